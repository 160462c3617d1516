"""bench/hook_overhead.py at its smallest size: one process, the tiny preset, two pairs of two-step blocks, run twice.

Asserts the table and the JSON record's shape, that both arms ran the same steps, and that the hook did its
work every step (numeric check, known-answer test at start, the watchdog thread); never the speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/hook_overhead.py", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_hook_overhead_smallest_size(tmp_path: Path) -> None:
    out = tmp_path / "hook.json"
    proc = run_bench("--presets", "tiny", "--procs", "1", "--pairs", "2", "--block-steps", "2", "--warmup", "1", "--seq-len", "16", "--batch-size", "2", "--repeats", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| preset | procs | run | off ms" in proc.stdout and "load average before" in proc.stdout
    record = json.loads(out.read_text())
    assert record["benchmark"] == "hook_overhead" and record["machine_before"]["loadavg"] and record["machine_after"]["loadavg"]
    assert "Over runs" in proc.stdout and "full GCs on/off" in proc.stdout
    first, rec = record["configs"]
    assert (first["run"], rec["run"]) == (1, 2)
    (verdict,) = record["over_runs"]
    assert (verdict["preset"], verdict["procs"], verdict["runs"]) == ("tiny", 1, 2)
    assert verdict["wall_runs"] == [first["summary"]["wall"]["median"], rec["summary"]["wall"]["median"]]
    assert sorted(rec["full_gc_s"]) == ["off", "on"]  # full collections per arm (startup garbage frozen first)
    assert (rec["preset"], rec["procs"], rec["pairs"], rec["block_steps"], rec["steps_per_arm"]) == ("tiny", 1, 2, 2, 4)
    for key in ("off_s", "on_s", "off_cpu_s", "on_cpu_s", "on_hook_calls_s"):
        assert [len(block) for block in rec[key]] == [2, 2], key  # both arms: the same blocks of the same steps
    assert all(x > 0 for block in rec["on_s"] + rec["off_s"] for x in block)
    s = rec["summary"]
    assert s["steps_on"] == s["steps_off"] == 4
    for name in ("wall", "wall_means", "cpu"):
        assert s[name]["median"] > 0 and len(s[name]["iqr"]) == 2, name
    ran = rec["hook"]
    assert ran["checks"]["numeric"] == 1 + 4 and ran["checks"]["known_answer"] == 1  # every step, and the KAT at start
    assert ran["checks"]["timing"] == 0 and ran["checks"]["fingerprint"] == 0  # one process: no peer to time or compare
    assert ran["watchdog_alive"] and ran["health_enabled"] and ran["internal_errors"] == 0
    assert ran["settings"]["fingerprint_interval"] == 50  # the defaults a user gets
    assert verdict["wall_pooled"]["pairs"] == 4 and verdict["amortized_pooled"] > 0  # both runs' pairs together
    again = run_bench("--report", str(out))  # the tables again from the record, nothing run
    assert again.returncode == 0 and "Over runs" in again.stdout and "pooled wall (95% CI)" in again.stdout, again.stderr


def test_hook_overhead_refuses_procs_that_do_not_divide_the_batch() -> None:
    proc = run_bench("--procs", "3", "--batch-size", "4", timeout=60)
    assert proc.returncode == 2 and "--procs must be integers >= 1 that divide --batch-size 4, got '3'" in proc.stderr
    proc = run_bench("--report", "README.md", timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("hook_overhead.py: --report README.md: not a record of this benchmark")
    proc = run_bench("--repeats", "0", timeout=60)
    assert proc.returncode == 2 and "--repeats must be >= 1" in proc.stderr
