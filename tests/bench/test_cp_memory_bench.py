"""``bench/cp_memory.py`` at its smallest size: it runs end to end, prints its table and writes its JSON record.

The memory figures at this size are a few MiB and RSS is noisy there, so only
the exact one is checked: the bytes saved for backward halve with context 2
(each rank keeps the activations of half the tokens).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cp_memory_bench_smallest_size(tmp_path: Path) -> None:
    out = tmp_path / "cp_memory.json"
    args = ["--seq-len", "64", "--contexts", "1,2", "--repeats", "1", "--batch-size", "1", "--json", str(out)]
    proc = subprocess.run([sys.executable, "bench/cp_memory.py", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "| context | tokens per rank | peak RSS added (MiB)" in proc.stdout
    record = json.loads(out.read_text())
    assert record["benchmark"] == "cp_memory" and record["command"].startswith("python bench/cp_memory.py")
    assert [r["local_tokens"] for r in record["ranks"]["2"]] == [32, 32] and record["ranks"]["1"][0]["local_tokens"] == 64
    assert all(len(r["peak_rss_bytes"]) == 1 and r["peak_rss_bytes"][0] > 0 for n in ("1", "2") for r in record["ranks"][n])
    assert 0.45 < record["summary"]["2"]["saved_ratio"] < 0.55


def test_cp_memory_bench_refuses_a_degree_the_sequence_cannot_split() -> None:
    proc = subprocess.run([sys.executable, "bench/cp_memory.py", "--seq-len", "60", "--contexts", "1,4"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--contexts 4: each degree must be >= 1 and 2 x it must divide --seq-len 60" in proc.stderr
