"""bench/placement_filters.py at its smallest size, so the script cannot rot (a script, not a timed test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_placement_filters_smallest_size(tmp_path):
    out = tmp_path / "pf.json"
    proc = subprocess.run(
        [sys.executable, "bench/placement_filters.py", "--nodes", "64", "--jobs", "4", "--pods", "4", "--repeats", "2", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| mode" in proc.stdout
    record = json.loads(out.read_text())
    by_mode = {row["mode"]: row for row in record["summary"]}
    assert set(by_mode) == {"no filter", "gpus only", "template"}
    assert by_mode["no filter"]["ratio_to_no_filter"] == 1.0
    # Every mode places every gang: 64 nodes, 32 H100, 16 of them untainted-or-tolerated; 4 gangs x 4 nodes fit each way.
    assert all(row["placed"] == 4 for row in record["summary"])
    assert all(len(xs) == 2 for xs in record["samples_s"].values())
