"""bench/health.py at its smallest size: one on/off overhead pair and a short clean run, the table and the JSON record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_health_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "health.json"
    args = ["--only", "clean,overhead", "--clean-steps", "12", "--overhead-steps", "2", "--pairs", "1", "--json", str(out)]
    proc = subprocess.run([sys.executable, "bench/health.py", *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "false positives over 12 clean steps" in proc.stdout and "step-time overhead" in proc.stdout
    record = json.loads(out.read_text())
    assert record["clean"]["verdict"] is None and record["clean"]["rcs"] == [0, 0]
    assert record["overhead"]["pairs"][0]["on_s"] > 0 and record["overhead"]["pairs"][0]["off_s"] > 0


def test_health_bench_refuses_an_unknown_part() -> None:
    proc = subprocess.run([sys.executable, "bench/health.py", "--only", "speed"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--only: unknown part(s) speed; allowed: latency, clean, overhead, hangs" in proc.stderr


def test_health_bench_hangs_smoke(tmp_path: Path) -> None:
    """The hangs part at its smallest: one shape (detection time vs step time) and the gang stuck joining its process group."""
    out = tmp_path / "hangs.json"
    args = ["--only", "hangs", "--hang-shapes", "64x8", "--hang-floor", "1", "--onset", "4", "--init-deadline", "1", "--json", str(out)]
    proc = subprocess.run([sys.executable, "bench/health.py", *args], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hang detection time vs step time" in proc.stdout
    hung, init = json.loads(out.read_text())["hangs"]
    assert hung["verdict"]["verdict"] == "hang" and hung["detected_s"] <= hung["bound_s"] + 1.0, hung  # + two polls and a busy machine's slack
    assert init["verdict"]["verdict"] == "hang" and init["verdict"]["evidence"]["phase"] == "init"
