"""``bench/kill_chaos.py``: its arguments and the summary line it reads from the scenario's output.

The scenario itself runs in the suite at its smoke size (``tests/operator/test_kill_chaos_cluster.py``); the
script only runs that module at another size, so here it is checked without a control plane.
"""

from __future__ import annotations

import subprocess
import sys

from tests.bench.test_bench_smoke import REPO

sys.path.insert(0, str(REPO / "bench"))

import kill_chaos  # noqa: E402


def test_help_and_a_bad_seed_list() -> None:
    proc = subprocess.run([sys.executable, "bench/kill_chaos.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--scale {full,smoke}" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "bench/kill_chaos.py", "--seeds", "16,x"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--seeds: comma-separated integers, got '16,x'" in proc.stderr


def test_the_summary_line_is_found_in_the_modules_output() -> None:
    out = "RAILTRAIN_CHAOS_SEED=16 (set it to reproduce)\n8 kills (7 taken over by a standby, 1 by a fresh process; ...) in 48.9 s\n.\n"
    found = kill_chaos.SUMMARY.search(out)
    assert found and found.group(0) == "8 kills (7 taken over by a standby, 1 by a fresh process; ...) in 48.9 s"
