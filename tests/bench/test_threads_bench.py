"""bench/threads.py at its smallest size: railtrain's setting alone, 2 steps of 2 × 32 tokens, 1 repeat, half a busy loop per CPU (the table and the JSON record)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_threads_bench_smallest_size(tmp_path):
    out = tmp_path / "threads.json"
    proc = subprocess.run([sys.executable, "bench/threads.py", "--settings", "railtrain", "--steps", "2", "--repeats", "1", "--load-per-cpu", "0.5",
                           "--batch-size", "2", "--seq-len", "32", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert set(record["summary"]) == {"idle", "loaded"}
    assert set(record["summary"]["idle"]) == {"railtrain"}
    assert len(record["samples"]) == 2 and all(s["tokens_per_s"] > 0 for s in record["samples"])
    railtrain = [s for s in record["samples"] if s["setting"] == "railtrain"]
    assert all(s["threads"] and s["threads"] >= 1 for s in railtrain)  # the trainer said what it chose
    assert "railtrain's setting: at worst" in proc.stdout
