"""bench/float8_emulated.py at its smallest size: 2 steps of each run, its table, its JSON record and its verdict."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_float8_bench_smallest_size(tmp_path: Path) -> None:
    out = tmp_path / "f8.json"
    cmd = [sys.executable, "bench/float8_emulated.py", "--steps", "2", "--tail", "1", "--recipes", "tensorwise", "--seq-len", "64",
           "--batch-size", "4", "--tolerance", "0.5", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| fp8-tensorwise | fp8/tensorwise/emulated/28-layers |" in proc.stdout
    assert "checkpoint round trip fp8-tensorwise -> bf16: exact" in proc.stdout and "checkpoint round trip bf16 -> fp8-tensorwise: exact" in proc.stdout
    record = json.loads(out.read_text())
    assert record["pass"] is True and [r["name"] for r in record["runs"]] == ["bf16", "fp8-tensorwise"]
    bf16, fp8 = (r["summary"] for r in record["runs"])
    assert bf16["steps"] == fp8["steps"] == 2 and bf16["non_finite"] == fp8["non_finite"] == 0
    assert all(math.isfinite(x) for r in record["runs"] for x in r["losses"])
    assert fp8["rel_diff"] == (fp8["tail_mean"] - bf16["tail_mean"]) / bf16["tail_mean"]
    assert all(t["exact"] and t["differences"] == [] for t in record["round_trips"].values())


def test_float8_bench_refuses_an_unknown_recipe() -> None:
    proc = subprocess.run([sys.executable, "bench/float8_emulated.py", "--recipes", "blockwise"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--recipes: choose from tensorwise, rowwise, got 'blockwise'" in proc.stderr
