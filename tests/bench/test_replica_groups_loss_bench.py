"""``bench/replica_groups_loss.py``: its arguments, the job's curve, smoothing, distances and verdict (no processes).

The runs it compares are ``run --local`` replica-group runs; the two kills in one run are checked by
``tests/cli/test_local_replica_groups.py``. Here the script's own arithmetic is checked on made-up curves.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys

from tests.bench.test_bench_smoke import REPO

sys.path.insert(0, str(REPO / "bench"))

import replica_groups_loss as bench  # noqa: E402


def test_help_and_bad_kills() -> None:
    proc = subprocess.run([sys.executable, "bench/replica_groups_loss.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--kills" in proc.stdout, proc.stderr
    for bad in ("80,30", "30", "x,y", "30,500"):  # 500: past the default --steps
        proc = subprocess.run([sys.executable, "bench/replica_groups_loss.py", "--kills", bad], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "--kills must be two" in proc.stderr, (bad, proc.stderr)


def test_the_job_curve_averages_the_groups_and_the_smoothing_needs_a_full_window() -> None:
    curve = bench.job_curve({1: [4.0, 2.0], 2: [2.0], 4: [1.0, 1.0]}, 4)
    assert curve == [3.0, 2.0, None, 1.0]  # step 2 logged by one group (the other away); step 3 by none
    assert bench.smooth([3.0, 2.0, 1.0, 0.0], 2) == [None, 2.5, 1.5, 0.5]
    assert bench.smooth(curve, 2) == [None, 2.5, None, None]
    assert bench.distance([None, 2.5, 1.5], [None, 2.0, 2.0]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bench.distance([None], [1.0]))


def test_the_verdict_is_the_failures_distance_over_the_data_orders() -> None:
    args = argparse.Namespace(steps=6, window=2, kills=[2, 4], batch_size=2, seq_len=16)
    base = {s: [5.0 - s * 0.5] * 2 for s in range(1, 7)}
    samples = {
        "uninterrupted": {"finished": True, "kills": 0, "losses": base},
        "reordered": {"finished": True, "kills": 0, "losses": {s: [v[0] + 0.2] * 2 for s, v in base.items()}},
        "two-failures": {"finished": True, "kills": 2, "losses": {s: [v[0] + 0.1] for s, v in base.items()}},
    }
    table, summary = bench.summarize(samples, args)
    assert summary["reordered"]["mean_abs_diff"] == 0.2 and summary["two-failures"]["mean_abs_diff"] == 0.1
    assert summary["failures_over_data_order"] == 0.5 and summary["two-failures"]["final_loss"] == 2.35
    assert "0.50x as far as another data order does: within the noise" in table.plain()
