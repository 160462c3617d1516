"""Every benchmark in ``bench/`` at its smallest size, so the scripts cannot rot.

Benchmarks are scripts, not timed tests: these only check that each one runs
end to end, prints its table and writes a well-formed JSON record. The
start-up benchmarks start their own local control plane (marked ``cluster``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("gang_startup", "many_jobs", "placement_quality")


def run_bench(script: str, tmp_path: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run ``bench/<script>.py`` with ``args``; return its JSON record (the output is shown on failure)."""
    out = tmp_path / f"{script}.json"
    proc = subprocess.run(
        [sys.executable, f"bench/{script}.py", *args, "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert "| metric" in proc.stdout or "| workload" in proc.stdout, proc.stdout
    return json.loads(out.read_text())


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    proc = subprocess.run([sys.executable, f"bench/{script}.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_placement_quality_is_deterministic(tmp_path):
    args = ("--seeds", "1", "--jobs", "60", "--loads", "0.9")
    first = run_bench("placement_quality", tmp_path, *args)
    again = run_bench("placement_quality", tmp_path, *args)
    assert first["per_seed"] == again["per_seed"]
    summary = first["summary"]["0.9"]
    assert set(summary) == {"railtrain", "kube-scheduler"}
    for metrics in summary.values():
        assert 0 <= metrics["smallest_domain_share"]["median"] <= 1
        assert 0 <= metrics["ring_distance_mean"]["median"] <= 3
    assert summary["railtrain"]["held_idle_share"]["median"] == 0  # a gang never holds GPUs before it starts


@pytest.mark.cluster
@pytest.mark.parametrize(
    "script,args",
    [
        ("gang_startup", ("--sizes", "4", "--repeats", "1")),
        ("many_jobs", ("--jobs", "2", "--pods-per-job", "2", "--nodes", "4", "--repeats", "1", "--warmup", "0")),
    ],
)
def test_startup_benchmark_smallest_size(script, args, tmp_path):
    record = run_bench(script, tmp_path, *args)
    assert {row["mode"] for row in record["summary"]} == {"floor", "scheduler", "operator"}
    for row in record["summary"]:
        assert row["n"] == 1
        assert math.isfinite(row["all_running_s_median"]) and row["all_running_s_median"] > 0
    floor = next(r for r in record["summary"] if r["mode"] == "floor")
    assert floor["ratio_to_floor"] == pytest.approx(1.0)
