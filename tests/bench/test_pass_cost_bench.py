"""``bench/pass_cost.py`` at its smallest size: the watch-fed caches take every cluster-wide LIST out of a pass."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench.test_bench_smoke import REPO


@pytest.mark.cluster
def test_pass_cost_smallest_size(tmp_path):
    out = tmp_path / "pass_cost.json"
    proc = subprocess.run(
        [sys.executable, "bench/pass_cost.py", "--nodes", "2", "--pods-per-node", "1", "--waiting", "1", "--passes", "2", "--repeats", "1", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    summary = {row["mode"]: row for row in json.loads(out.read_text())["summary"]}
    assert summary["list"]["cluster_lists_per_pass"] >= 4  # jobs, railtrain pods, active pods, nodes, namespaces
    assert summary["cache"]["cluster_lists_per_pass"] == 0


def test_bad_size_is_one_sentence():
    proc = subprocess.run([sys.executable, "bench/pass_cost.py", "--nodes", "0"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--nodes" in proc.stderr and "Traceback" not in proc.stderr
