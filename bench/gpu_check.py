"""GPU check: train the 1b preset (1.23B parameters) in bf16 and in fp8 on one GPU for a few dozen steps; print tokens/s and MFU.

The same code path as every other run: the railtrain ``Trainer`` (built from
the trainer's own flags, ``--device cuda --mixed-precision bf16``, so
autocast in bfloat16 over float32 master weights; then ``--mixed-precision
fp8``, the same with the blocks' linear layers in float8 through torchao,
``--fp8-recipe`` tensorwise by default), its real step loop, real text. Each
of ``--precisions`` is one run in turn, on the same batches; for each it times
``--steps`` steps after ``--warmup`` untimed ones and reports

* tokens/s: ``batch_size × seq_len × steps ÷ seconds``;
* model TFLOP/s: tokens/s × the model's training FLOPs per token
  (``ModelConfig.flops_per_token``: ``6 N + 12 · layers · dim · seq_len``,
  embedding excluded, recomputation not counted);
* MFU: model FLOP/s ÷ ``--peak-flops`` (default 989e12: the dense bf16 peak
  of one H100 or H200 SXM), for fp8 too, so the two MFUs compare like the
  tokens/s (torchtitan reports fp8 MFU against the bf16 peak as well; the
  dense fp8 peak is twice it);
* fp8 ÷ bf16 tokens/s, the figure FP8 training is for. The trainer does not
  use ``torch.compile``, so torchao's float8 casts run as separate kernels,
  not fused into their neighbours: the ratio is that of this trainer, which
  may sit below torchtitan's compiled figures;
* peak GPU memory, and the loss at the first and last step;
* the health checks (docs/health.md) on the device: milliseconds of one parameter fingerprint of
  the whole model and of one known-answer test (CUDA-synchronised medians of 5), whether the
  known-answer test gives the same bytes on every run, and their cost per step at the default
  intervals (fingerprint every 50 steps, two KATs every 500) as a share of the step time. The
  timed steps run with the checks on, as a job does; ``--no-health`` times them off.

    python bench/gpu_check.py                                   # needs a CUDA device (fp8: compute capability 8.9+)
    python bench/gpu_check.py --batch-size 4 --activation-checkpointing --fp8-recipe rowwise
    python bench/gpu_check.py --precisions bf16                 # an older GPU: bf16 alone
    python bench/gpu_check.py --device cpu --preset tiny --steps 2 --warmup 0 --seq-len 64 --batch-size 2 --fp8-emulate   # a dry run on CPU

``--cp-memory`` runs the context-parallel case instead (``bench/gpu_cp_memory.py``):
activation memory per rank at 8k, 32k and 128k tokens, context 1 against
context N, one process per GPU under torchrun:

    torchrun --nproc-per-node 8 bench/gpu_check.py --cp-memory
    torchrun --nproc-per-node 2 bench/gpu_check.py --cp-memory --device cpu --preset tiny --cp-seq-lens 64,128   # a dry run on CPU

``--allreduce`` runs the all-reduce bus-bandwidth check instead (``bench/allreduce.py``):
every visible GPU, NCCL, with a fabric profile's variables off and on (docs/fabric.md):

    python bench/gpu_check.py --allreduce --fabric-profile infiniband --hcas mlx5_0,mlx5_1

Without a CUDA device (and without ``--device cpu``) it exits with status 1
and one sentence on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Table, machine, write_json

H100_BF16_DENSE_FLOPS = 989e12
"""Peak dense bf16 FLOP/s of one H100 / H200 SXM (NVIDIA data sheets; 1,979e12 is with 2:4 sparsity)."""

PRECISIONS = ("bf16", "fp8", "fp32")

NO_CUDA = "gpu_check: torch sees no CUDA device (torch.cuda.is_available() is False), so run it on a machine with a GPU, or pass --device cpu for a dry run."


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The check's flags (errors exit 2 with argparse's usage line)."""
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="1b", help="Model preset (default 1b, 1.23B parameters).")
    parser.add_argument("--steps", type=int, default=30, help="Timed optimizer steps (default 30).")
    parser.add_argument("--warmup", type=int, default=5, help="Untimed steps first: allocator, kernels, autotuning (default 5).")
    parser.add_argument("--batch-size", type=int, default=8, help="Sequences per step (default 8).")
    parser.add_argument("--seq-len", type=int, default=2048, help="Tokens per sequence (default 2048).")
    parser.add_argument("--peak-flops", type=float, default=H100_BF16_DENSE_FLOPS, help="Peak FLOP/s of the GPU in bf16, dense (default 989e12, H100/H200 SXM).")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cuda (default), or cpu for a dry run of the same path.")
    parser.add_argument("--precisions", default="bf16,fp8", help="Comma-separated trainer --mixed-precision values, one run each, in order (default bf16,fp8; among bf16, fp8, fp32).")
    parser.add_argument("--fp8-recipe", default="tensorwise", choices=["tensorwise", "rowwise"], help="Trainer --fp8-recipe of the fp8 run (default tensorwise).")
    parser.add_argument("--fp8-emulate", action="store_true", help="Trainer --fp8-emulate: emulate float8 (for a dry run on a CPU or a GPU below compute capability 8.9; no speed-up).")
    parser.add_argument("--lr", type=float, default=3e-4, help="Peak learning rate (default 3e-4, stable for 1b in a short run).")
    parser.add_argument("--activation-checkpointing", action="store_true", help="Recompute block activations in backward (less memory; model FLOPs unchanged, so MFU drops).")
    parser.add_argument("--data", default="pkg://email/*.py", help="Training text (default pkg://email/*.py).")
    parser.add_argument("--no-health", action="store_true", help="Run the timed steps with the health checks off (RAILTRAIN_HEALTH=0), to compare.")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/gpu_check-<time>.json).")
    parser.add_argument("--cp-memory", action="store_true", help="Run the context-parallel memory case instead (under torchrun, one process per GPU; see bench/gpu_cp_memory.py).")
    parser.add_argument("--cp-seq-lens", default="8192,32768,131072", help="--cp-memory: sequence lengths, comma-separated (default 8192,32768,131072).")
    parser.add_argument("--allreduce", action="store_true", help="Instead of training: all-reduce bus bandwidth with --fabric-profile's variables off and on (bench/allreduce.py).")
    parser.add_argument("--fabric-profile", default="railtrain", help="With --allreduce: the fabric profile compared (default railtrain).")
    parser.add_argument("--hcas", default=None, help="With --allreduce: this node's HCA list, as its railtrain.dev/hcas annotation would give it.")
    args = parser.parse_args(argv)
    try:
        args.cp_seq_len_list = [int(x) for x in args.cp_seq_lens.split(",")]
    except ValueError:
        parser.error(f"--cp-seq-lens must be comma-separated integers, got {args.cp_seq_lens!r}")
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1 or args.seq_len < 1:
        parser.error("--steps, --batch-size and --seq-len must be >= 1, --warmup >= 0")
    if not args.peak_flops > 0:
        parser.error("--peak-flops must be > 0")
    args.precisions = [p for p in args.precisions.split(",") if p]
    if not args.precisions or any(p not in PRECISIONS for p in args.precisions) or len(set(args.precisions)) != len(args.precisions):
        parser.error(f"--precisions must list distinct values among {', '.join(PRECISIONS)}")
    return args


def model_flops(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> tuple[float, float]:
    """``(model FLOP/s, MFU)`` of one device: ``flops_per_token × tokens_per_s`` and that ÷ ``peak_flops``."""
    achieved = flops_per_token * tokens_per_s
    return achieved, achieved / peak_flops


def trainer_argv(args: argparse.Namespace, metrics_file: Path, precision: str = "bf16") -> list[str]:
    """The trainer command line of the ``precision`` run (``--steps`` is raised as the check goes)."""
    argv = [
        "--data", args.data, "--preset", args.preset, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
        "--device", args.device, "--mixed-precision", precision, "--lr", str(args.lr), "--warmup-steps", "10",
        "--steps", str(max(args.warmup, 1)), "--log-every", "10", "--metrics-file", str(metrics_file),
    ]  # fmt: skip
    if precision == "fp8":
        argv += ["--fp8-recipe", args.fp8_recipe] + (["--fp8-emulate"] if args.fp8_emulate else [])
    return argv + (["--activation-checkpointing"] if args.activation_checkpointing else [])


def run(args: argparse.Namespace, precision: str = "bf16") -> dict[str, Any]:
    """Train in ``precision`` and time; returns the figures (see the module docstring).

    Raises:
        ValueError: the trainer refuses the configuration (e.g. fp8 on a GPU below compute capability 8.9).
    """
    import torch

    from railtrain.trainer.config import parse_args as trainer_args
    from railtrain.trainer.model import PRESETS
    from railtrain.trainer.train import Trainer

    config = PRESETS[args.preset]
    with tempfile.TemporaryDirectory() as tmp:
        metrics_file = Path(tmp) / "metrics.jsonl"
        trainer = Trainer(trainer_args(trainer_argv(args, metrics_file, precision)), environ={"RAILTRAIN_HEALTH": "0"} if args.no_health else {})
        try:
            trainer.config.steps = args.warmup
            with contextlib.redirect_stdout(io.StringIO()):
                trainer.train()  # warm-up steps
            if args.device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            trainer.config.steps += args.steps
            t0 = time.perf_counter()
            trainer.train()  # prints the trainer's own step lines
            if args.device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            peak_mem = torch.cuda.max_memory_allocated() if args.device == "cuda" else 0
            device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
            bf16 = trainer.bf16
            float8_layers = sum(type(m).__name__ == "Float8Linear" for m in trainer.model.modules())
            health = health_figures(trainer.model, trainer.info.device)
        finally:
            trainer.close()
        losses = [json.loads(line)["loss"] for line in metrics_file.read_text().splitlines()]
    tokens_per_s = args.batch_size * args.seq_len * args.steps / seconds
    flops_per_token = config.flops_per_token(args.seq_len)
    achieved, mfu = model_flops(flops_per_token, tokens_per_s, args.peak_flops)
    return {
        "precision": precision, "float8_layers": float8_layers, "device_name": device_name, "params": config.num_params(), "bf16": bf16, "seconds": seconds,
        "step_s": seconds / args.steps, "tokens_per_s": tokens_per_s, "flops_per_token": flops_per_token,
        "model_flops_per_s": achieved, "mfu": mfu, "peak_memory_bytes": peak_mem,
        "loss_first": losses[0], "loss_last": losses[-1], "losses": losses, "health": health, "health_on": not args.no_health,
        "health_share_per_step": (health["fingerprint_ms"] / 50 + 2 * health["known_answer_ms"] / 500) / 1000 / (seconds / args.steps),
    }  # fmt: skip


def health_figures(model: Any, device: Any) -> dict[str, Any]:
    """Milliseconds of one model fingerprint and one known-answer test on ``device`` (medians of 5), and KAT stability."""
    import torch

    from railtrain.trainer.health.fingerprint import known_answer, model_fingerprint

    def timed(fn: Any) -> tuple[float, Any]:
        times, out = [], None
        for _ in range(5):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return sorted(times)[2] * 1000, out

    fp_ms, _ = timed(lambda: model_fingerprint(model))
    answers = {known_answer(device) for _ in range(5)}
    kat_ms, _ = timed(lambda: known_answer(device))
    return {"fingerprint_ms": fp_ms, "known_answer_ms": kat_ms, "known_answer_stable": len(answers) == 1}


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 on success, 1 without a CUDA device (one sentence on stderr)."""
    args = parse_args(argv)
    if args.allreduce:
        from allreduce import main as allreduce_main

        extra = ["--hcas", args.hcas] if args.hcas else []
        return allreduce_main(["--fabric-profile", args.fabric_profile, "--device", args.device, *extra, *(["--json", str(args.json)] if args.json else [])])
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(NO_CUDA, file=sys.stderr, flush=True)
            return 1
    before = machine()
    if args.cp_memory:
        return cp_memory_case(args, before)
    results = []
    for precision in args.precisions:
        try:
            results.append(run(args, precision))
        except ValueError as err:  # the trainer's refusal, e.g. fp8 below compute capability 8.9: one sentence
            print(f"gpu_check: {precision}: {err}", file=sys.stderr, flush=True)
            return 1
    first = results[0]
    table = Table(
        f"gpu check: preset {args.preset} ({first['params'] / 1e6:,.0f}M params) on {first['device_name']}, "
        f"batch {args.batch_size} x {args.seq_len}, {args.steps} steps after {args.warmup}",
        ["metric", *[describe(r, args) for r in results]],
        note=f"MFU = model FLOPs/token ({first['flops_per_token'] / 1e9:.2f} GFLOP) x tokens/s / peak {args.peak_flops / 1e12:.0f} TFLOP/s (the bf16 dense peak, for every column)",
    )
    cuda = args.device == "cuda"
    rows = [
        ("tokens/s", lambda r: f"{r['tokens_per_s']:.0f}"),
        (f"tokens/s vs {first['precision']}", lambda r: f"{r['tokens_per_s'] / first['tokens_per_s']:.2f}x"),
        ("step time", lambda r: f"{r['step_s'] * 1000:.1f} ms"),
        ("model TFLOP/s", lambda r: f"{r['model_flops_per_s'] / 1e12:.1f}"),
        ("MFU", lambda r: f"{100 * r['mfu']:.1f}%"),
        ("peak GPU memory", lambda r: f"{r['peak_memory_bytes'] / 2**30:.1f} GiB" if cuda else "-"),
        ("loss first -> last", lambda r: f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}"),
        ("health checks during the timed steps", lambda r: "on" if r["health_on"] else "off (--no-health)"),
        ("parameter fingerprint", lambda r: f"{r['health']['fingerprint_ms']:.1f} ms"),
        ("known-answer test", lambda r: f"{r['health']['known_answer_ms']:.1f} ms, {'same bytes every run' if r['health']['known_answer_stable'] else 'DIFFERENT bytes across runs'}"),
        ("health cost per step at default intervals", lambda r: f"{100 * r['health_share_per_step']:.3f}%"),
    ]
    for name, cell in rows:
        table.add(name, *[cell(r) for r in results])
    table.print()
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    ratios = {f"{r['precision']}_vs_{first['precision']}_tokens_per_s": r["tokens_per_s"] / first["tokens_per_s"] for r in results[1:]}
    path = write_json("gpu_check", {"machine": before, "params": params, "results": results, "ratios": ratios}, args.json)
    print(f"wrote {path}")
    return 0


def describe(r: dict[str, Any], args: argparse.Namespace) -> str:
    """A column header: the precision, and for fp8 the recipe, emulation and converted layers."""
    if r["precision"] != "fp8":
        return r["precision"]
    return f"fp8 {args.fp8_recipe}{' emulated' if args.fp8_emulate else ''} ({r['float8_layers']} layers)"


def cp_memory_case(args: argparse.Namespace, before: dict[str, Any]) -> int:
    """``--cp-memory``: the table and JSON record of :mod:`gpu_cp_memory` (printed and written by rank 0)."""
    import gpu_cp_memory

    rows = gpu_cp_memory.run(args.preset, args.cp_seq_len_list, args.device)
    if not rows:  # not rank 0
        return 0
    table = Table(
        f"gpu check, context parallel: activation memory per rank, preset {args.preset}, 1 sequence, {args.device}",
        ["tokens", "context", "tokens per rank", "added MiB (largest rank)", "vs context 1"],
        note="added = peak allocated during one forward+backward minus allocated before it (CPU dry run: peak RSS added)",
    )
    for row in gpu_cp_memory.table_rows(rows):
        table.add(*row)
    table.print()
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    path = write_json("gpu_check_cp_memory", {"machine": before, "params": params, "rows": rows}, args.json)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
