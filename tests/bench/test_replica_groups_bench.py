"""``bench/replica_groups_local.py``: its arguments and its summary, at the smallest size and without processes (seconds).

The runs it measures are the ones ``tests/cli/test_local_replica_groups.py`` checks (a group killed and replaced);
here the script's own parts are checked: the refusal of bad sizes and the medians, goal and ratio of its table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from tests.bench.test_bench_smoke import REPO

sys.path.insert(0, str(REPO / "bench"))

import replica_groups_local  # noqa: E402


def test_help_and_a_bad_size() -> None:
    proc = subprocess.run([sys.executable, "bench/replica_groups_local.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--kill-step" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "bench/replica_groups_local.py", "--kill-step", "1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--kill-step >= 2" in proc.stderr


def test_the_summary_takes_medians_per_arm_and_the_gangs_stall_over_the_groups() -> None:
    args = argparse.Namespace(kill_step=10, repeats=3, memory_interval=5)
    groups = [{"arm": "replica-groups", "finished": True, "stall_s": s, "steps_lost": 0, "full_strength_s": 20.0, "load1": 4.0} for s in (1.0, 1.5, 3.0)]
    gangs = [{"arm": "gang-restart", "finished": True, "stall_s": s, "steps_lost": 4, "full_strength_s": s - 5, "load1": 6.0} for s in (30.0, 45.0, 60.0)]
    unfinished = {"arm": "gang-restart", "finished": False, "stall_s": float("nan"), "steps_lost": None, "full_strength_s": float("nan"), "load1": 5.0}
    table, summary = replica_groups_local.summarize([*groups, *gangs, unfinished], args)
    assert summary["replica-groups"]["stall_p50_s"] == 1.5 and summary["replica-groups"]["stall_max_s"] == 3.0
    assert summary["gang-restart"]["n"] == 3 and summary["gang-restart"]["steps_lost_max"] == 4
    assert summary["stall_ratio_gang_over_groups"] == 30.0
    text = table.plain()
    assert "| replica-groups | 1.50" in text and "met" in text and "missed" in text
    assert "load average (1 min) median 5.0" in text and "30.00x" in text
