"""bench/health.py at its smallest size: one on/off overhead pair and a short clean run, the table and the JSON record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_health_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "health.json"
    args = ["--only", "clean,overhead", "--clean-steps", "12", "--overhead-steps", "4", "--pairs", "1", "--json", str(out)]
    proc = subprocess.run([sys.executable, "bench/health.py", *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "false positives over 12 clean steps" in proc.stdout and "step-time overhead" in proc.stdout
    record = json.loads(out.read_text())
    assert record["clean"]["verdict"] is None and record["clean"]["rcs"] == [0, 0]
    assert record["overhead"]["pairs"][0]["on_s"] > 0 and record["overhead"]["pairs"][0]["off_s"] > 0


def test_health_bench_refuses_an_unknown_part() -> None:
    proc = subprocess.run([sys.executable, "bench/health.py", "--only", "speed"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--only: unknown part(s) speed; allowed: latency, clean, overhead" in proc.stderr
