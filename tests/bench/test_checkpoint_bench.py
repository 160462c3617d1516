"""``bench/checkpoint_tiers.py`` at its smallest size: it runs end to end, prints its tables and writes a sound record."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_checkpoint_tiers_smallest(tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    cmd = [sys.executable, "bench/checkpoint_tiers.py", "--min-state-mib", "16", "--repeats", "1", "--steps", "1", "--json", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for title in ("Checkpoint write", "Training loop blocked", "Restore"):
        assert title in proc.stdout
    record = json.loads(out.read_text())
    summary = record["summary"]
    assert record["state_bytes"] >= 16 << 20 and record["world_size"] == 2
    assert set(summary["write"]) == {"memory", "local", "persistent"}
    assert set(summary["restore"]) == {"memory", "local", "persistent", "memory (peer copy)"}
    for row in summary["write"].values():
        assert row["state_mb_s"] > 0 and row["raw_mb_s"] > 0
    assert all(math.isfinite(v["seconds"]) and v["seconds"] > 0 for v in summary["restore"].values())
    assert summary["blocked"]["async"]["blocked_s"] > 0 and summary["blocked"]["sync"]["blocked_s"] > 0
