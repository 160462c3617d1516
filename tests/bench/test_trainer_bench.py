"""The trainer's benchmark scripts at their smallest size on CPU: the throughput table and the GPU check.

``bench/gpu_check.py`` is meant for a GPU; here it runs its CPU dry run (the
same Trainer path with the tiny preset) so its argument handling, its FLOPs
and MFU arithmetic and its refusal without CUDA are tested on every machine.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from railtrain.trainer.model import PRESETS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import gpu_check  # noqa: E402


def run_script(script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, f"bench/{script}.py", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def test_gpu_check_without_cuda_says_so_in_one_sentence() -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device, even on a GPU machine
    proc = run_script("gpu_check", env=env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == gpu_check.NO_CUDA + "\n" and proc.stdout == ""
    assert gpu_check.NO_CUDA.count(". ") == 0 and gpu_check.NO_CUDA.endswith(".")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "0"], "--steps"),
        (["--peak-flops", "0"], "--peak-flops must be > 0"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--precisions", "bf16,fp16"], "--precisions must list distinct values among bf16, fp8, fp32"),
    ],
)
def test_gpu_check_rejects_bad_arguments(args: list[str], message: str) -> None:
    proc = run_script("gpu_check", *args, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_gpu_check_defaults_to_the_1b_preset_on_cuda_in_bf16_then_fp8() -> None:
    args = gpu_check.parse_args([])
    assert (args.preset, args.device, args.precisions, args.fp8_recipe, args.peak_flops) == ("1b", "cuda", ["bf16", "fp8"], "tensorwise", 989e12)
    assert PRESETS[args.preset].num_params() >= 1_000_000_000
    argv = gpu_check.trainer_argv(args, Path("m.jsonl"), "bf16")
    assert argv[argv.index("--device") + 1] == "cuda" and argv[argv.index("--mixed-precision") + 1] == "bf16" and "--fp8-recipe" not in argv
    argv = gpu_check.trainer_argv(args, Path("m.jsonl"), "fp8")
    assert argv[argv.index("--mixed-precision") + 1] == "fp8" and argv[argv.index("--fp8-recipe") + 1] == "tensorwise" and "--fp8-emulate" not in argv


def test_mfu_arithmetic() -> None:
    # 1b at 2,048 tokens: 6 x 1.2338e9 matmul parameters + 12 x 24 x 2048 x 2048 = 8.61e9 FLOPs per token;
    # at 40,000 tokens/s that is 344 TFLOP/s, 34.8% of an H100's 989.
    fpt = PRESETS["1b"].flops_per_token(2048)
    assert fpt == 6 * (PRESETS["1b"].num_params() - 256 * 2048) + 12 * 24 * 2048 * 2048
    achieved, mfu = gpu_check.model_flops(fpt, 40_000, 989e12)
    assert achieved == pytest.approx(fpt * 40_000) and mfu == pytest.approx(achieved / 989e12)
    assert 0.34 < mfu < 0.36


def test_gpu_check_dry_run_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    proc = run_script("gpu_check", "--device", "cpu", "--preset", "tiny", "--steps", "2", "--warmup", "0", "--seq-len", "64", "--batch-size", "2",
                      "--fp8-emulate", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| MFU" in proc.stdout and "| tokens/s vs bf16" in proc.stdout and "fp8 tensorwise emulated (28 layers)" in proc.stdout
    record = json.loads(out.read_text())
    bf16, fp8 = record["results"]
    assert (bf16["precision"], bf16["float8_layers"], fp8["precision"], fp8["float8_layers"]) == ("bf16", 0, "fp8", 28)
    for r in (bf16, fp8):
        assert r["bf16"] is True and len(r["losses"]) == 2 and all(math.isfinite(x) for x in r["losses"])
        assert r["tokens_per_s"] == pytest.approx(2 * 64 * 2 / r["seconds"])
        assert r["flops_per_token"] == PRESETS["tiny"].flops_per_token(64)
        assert r["mfu"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / 989e12)
    assert record["ratios"]["fp8_vs_bf16_tokens_per_s"] == pytest.approx(fp8["tokens_per_s"] / bf16["tokens_per_s"])


def test_gpu_check_refuses_fp8_on_the_cpu_without_emulation_in_one_sentence() -> None:
    proc = run_script("gpu_check", "--device", "cpu", "--preset", "tiny", "--steps", "1", "--warmup", "0", "--seq-len", "64", "--batch-size", "2", "--precisions", "fp8")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("gpu_check: fp8: --mixed-precision fp8 needs a GPU of compute capability 8.9 or newer, but this process runs on the CPU")
    assert proc.stderr.count("\n") == 1


def test_trainer_throughput_smallest_size(tmp_path: Path) -> None:
    out = tmp_path / "tt.json"
    proc = run_script("trainer_throughput", "--layouts", "single,pp", "--steps", "1", "--repeats", "1", "--warmup", "0", "--seq-len", "32",
                      "--batch-size", "2", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| layout" in proc.stdout
    record = json.loads(out.read_text())
    assert [r["layout"] for r in record["layouts"]] == ["single", "pp"]
    for r in record["layouts"]:
        s = r["summary"]
        assert s["trainer_tokens_per_s"] > 0 and s["plain_tokens_per_s"] > 0
        assert s["overhead_ratio"] == pytest.approx(r["trainer_s"][0] / r["plain_s"][0])  # one pair: its ratio
    assert "pipeline=2" in record["layouts"][1]["parallel"]


def test_gpu_check_cp_memory_dry_run_on_two_cpu_processes(tmp_path: Path) -> None:
    """``--cp-memory`` on CPU (gloo, RSS): the case a GPU run must answer, context 1 and context 2, runs and records both."""
    out = tmp_path / "cp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "bench/gpu_check.py",
           "--cp-memory", "--device", "cpu", "--preset", "tiny", "--cp-seq-lens", "64", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "| tokens | context | tokens per rank | added MiB (largest rank) | vs context 1 |" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["seq_len"], r["context"], r["local_tokens"]) for r in rows] == [(64, 1, 64), (64, 2, 32)]
    assert all(len(r["added_bytes"]) == 2 and all(b is not None and b >= 0 for b in r["added_bytes"]) and r["errors"] == [] for r in rows)
