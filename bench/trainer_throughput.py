"""Trainer throughput against a plain PyTorch loop of the same model and parallelism, in the same run.

For each layout (``single``, ``ddp``, ``fsdp``, ``tp``, ``pp``, ...) one
torchrun launch builds, on every rank, the railtrain :class:`Trainer` and, next
to it, the same model with the same parallel wrapping (``build_model``: the
same preset, seed, pipeline stage, tensor-parallel plan, DDP/FSDP2 and mixed
precision) driven by the smallest loop torch allows: one fixed batch of random
tokens already on the device, ``forward``, ``backward``, gradient clipping,
``AdamW.step``, ``zero_grad`` (a pipeline stage: ``schedule.step`` in place of
forward and backward), and no host synchronisation until the end of a timed
run. The trainer runs its real loop (``Trainer.train``): sampling windows from
the corpus, the learning-rate schedule, the loss all-reduce and ``.item()``
every step, logging and metrics. The two are timed in alternation, ``--repeats``
times ``--steps`` steps each after ``--warmup`` steps, and the table shows
medians of tokens/s (global batch tokens per second) and the overhead ratio:
the median over repeats of trainer time / plain-loop time of each back-to-back
pair (1.00x is no overhead), with its range.

    python bench/trainer_throughput.py                                   # CPU: single ddp fsdp tp pp (2 processes), tiny preset
    python bench/trainer_throughput.py --layouts fsdp-tp,pp-ddp          # the 4-process combinations
    python bench/trainer_throughput.py --device cuda --preset 1b --layouts single --batch-size 4 --seq-len 2048
    python bench/trainer_throughput.py --layouts ddp --steps 2 --repeats 1 --warmup 1   # the smoke test's size
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Table, fmt_x, machine, median, ratio, write_json

REPO = Path(__file__).resolve().parents[1]

LAYOUTS: dict[str, tuple[int, list[str]]] = {
    # name: (processes unless --nproc says otherwise, trainer flags); "single" is one plain process, no torchrun
    "single": (1, []),
    "ddp": (2, ["--parallel", "ddp"]),
    "fsdp": (2, ["--parallel", "fsdp"]),
    "tp": (2, ["--tp", "2"]),
    "pp": (2, ["--pp", "2", "--pp-schedule", "1f1b"]),
    "fsdp-tp": (4, ["--parallel", "fsdp", "--tp", "2"]),
    "pp-ddp": (4, ["--pp", "2", "--parallel", "ddp"]),
}


def trainer_flags(args: argparse.Namespace, layout: str) -> list[str]:
    """The trainer command line of ``layout`` at the benchmark's size."""
    return [
        "--data", args.data, "--preset", args.preset, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
        "--device", args.device, "--mixed-precision", args.mixed_precision, "--threads", str(args.threads),
        "--log-every", "1000000", "--warmup-steps", "10", *LAYOUTS[layout][1], *args.extra,
    ]  # fmt: skip


# --- worker: one layout, run under torchrun (or alone for "single") ----------------


class PlainLoop:
    """The baseline: the trainer's model and parallel wrapping, a minimal step loop around it."""

    def __init__(self, trainer: Any) -> None:
        import torch

        from railtrain.trainer.model import lm_loss
        from railtrain.trainer.pipeline import build_schedule
        from railtrain.trainer.train import build_model

        c, dims, info = trainer.config, trainer.dims, trainer.info
        self.torch, self.info, self.lm_loss = torch, info, lm_loss
        self.model = build_model(c, dims, info, trainer.bf16, trainer.mesh)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        self.autocast = trainer.bf16 and not dims.uses_fsdp
        gen = torch.Generator().manual_seed(1234)
        tokens = torch.randint(0, 256, (trainer.sampler.local_batch, c.seq_len + 1), generator=gen).to(info.device)
        self.inputs, self.targets = tokens[:, :-1], tokens[:, 1:]
        self.schedule, self.stage, self.stages = None, 0, dims.pp
        if dims.pp > 1:
            m = trainer.microbatches
            self.stage = dims.coordinates(info.rank)["pp"]
            self.schedule = build_schedule(self.model, self.stage, dims.pp, info.device, trainer.mesh["pp"].get_group(), c.pp_schedule, m,
                                           lambda out, y: lm_loss(out, y) / m)  # fmt: skip

    def run(self, steps: int) -> None:
        """``steps`` optimizer steps on the fixed batch; returns after the device and every rank are done."""
        torch = self.torch
        for _ in range(steps):
            with torch.autocast(self.info.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                if self.schedule is None:
                    loss = self.lm_loss(self.model(self.inputs), self.targets)
                elif self.stage == 0:
                    self.schedule.step(self.inputs)
                elif self.stage == self.stages - 1:
                    self.schedule.step(target=self.targets)
                else:
                    self.schedule.step()
            if self.schedule is None:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)  # per stage under pipeline parallel
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        sync(self.info)


def sync(info: Any) -> None:
    """Wait for the device and for every rank."""
    import torch
    import torch.distributed as dist

    if info.device.type == "cuda":
        torch.cuda.synchronize()
    if info.distributed:
        dist.barrier()


def worker(args: argparse.Namespace) -> None:
    """Time the trainer and the plain loop of one layout in alternation; rank 0 writes the samples to ``--out``."""
    from railtrain.trainer.config import parse_args
    from railtrain.trainer.train import Trainer

    trainer = Trainer(parse_args(trainer_flags(args, args.layout) + ["--steps", str(max(args.warmup, 1))]))
    try:
        trainer.config.steps = args.warmup
        plain = PlainLoop(trainer)
        quiet = contextlib.redirect_stdout(io.StringIO())
        with quiet:
            trainer.train()  # warm-up
        plain.run(args.warmup)
        trainer_s, plain_s = [], []
        for _ in range(args.repeats):
            trainer.config.steps += args.steps
            sync(trainer.info)
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                trainer.train()
            sync(trainer.info)
            trainer_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            plain.run(args.steps)
            plain_s.append(time.perf_counter() - t0)
        if trainer.info.rank == 0:
            record = {
                "layout": args.layout, "parallel": trainer.dims.describe(), "world_size": trainer.info.world_size,
                "device": trainer.info.device.type, "bf16": trainer.bf16, "tokens_per_step": args.batch_size * args.seq_len,
                "steps_per_sample": args.steps, "trainer_s": trainer_s, "plain_s": plain_s,
            }  # fmt: skip
            Path(args.out).write_text(json.dumps(record))
    finally:
        trainer.close()


# --- driver ----------------------------------------------------------------------


def run_layout(args: argparse.Namespace, layout: str, out: Path) -> dict[str, Any]:
    """Launch the worker for ``layout`` and return its record.

    Raises:
        RuntimeError: the launch failed (its output is in the message).
    """
    worker_args = [
        str(Path(__file__).resolve()), "--worker", "--layout", layout, "--out", str(out),
        *(a for k, v in vars(args).items() if k in PASSED for a in (f"--{k.replace('_', '-')}", str(v))),
        *(f"--extra={x}" for x in args.extra),
    ]  # fmt: skip
    if layout == "single":
        cmd = [sys.executable, *worker_args]
    else:
        nproc = args.nproc or LAYOUTS[layout][0]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *worker_args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAILTRAIN_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "bench"), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"layout {layout} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


PASSED = ("data", "preset", "batch_size", "seq_len", "device", "mixed_precision", "threads", "steps", "warmup", "repeats")
"""Flags the driver hands on to every worker."""


def summarize(rec: dict[str, Any]) -> dict[str, Any]:
    """Median tokens/s of both loops, and the overhead ratio of one layout's record.

    The ratio is the median over repeats of ``trainer_s[i] / plain_s[i]``: the
    two samples of a pair ran back to back, under the same load from whatever
    else the machine runs, so their ratio is steadier than a ratio of medians.
    """
    tokens = rec["tokens_per_step"] * rec["steps_per_sample"]
    pairs = [ratio(t, p) for t, p in zip(rec["trainer_s"], rec["plain_s"])]
    return {
        "trainer_tokens_per_s": median(tokens / s for s in rec["trainer_s"]),
        "plain_tokens_per_s": median(tokens / s for s in rec["plain_s"]),
        "overhead_ratio": median(pairs),
        "overhead_ratio_range": [min(pairs), max(pairs)],
    }


def main(argv: list[str] | None = None) -> None:
    """Parse flags; as the driver, run every layout, print the table and write the JSON record."""
    parser = argparse.ArgumentParser(prog="trainer_throughput.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="single,ddp,fsdp,tp,pp", help=f"Comma-separated layouts among {', '.join(LAYOUTS)} (default single,ddp,fsdp,tp,pp).")
    parser.add_argument("--nproc", type=int, default=0, help="Processes of every layout but single (default 0: the layout's own, 2 or 4).")
    parser.add_argument("--data", default="pkg://email/*.py", help="Trainer --data (default pkg://email/*.py).")
    parser.add_argument("--preset", default="tiny", help="Model preset (default tiny).")
    parser.add_argument("--batch-size", type=int, default=8, help="Global batch in sequences (default 8).")
    parser.add_argument("--seq-len", type=int, default=128, help="Tokens per sequence (default 128).")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="Device (default cpu).")
    parser.add_argument("--mixed-precision", default="auto", choices=["auto", "bf16", "fp32"], help="Trainer --mixed-precision (default auto: bf16 on cuda).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process (default 1).")
    parser.add_argument("--steps", type=int, default=5, help="Steps per timed sample (default 5).")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed steps first (default 3).")
    parser.add_argument("--repeats", type=int, default=11, help="Timed samples of each loop, alternating (default 11).")
    parser.add_argument("--extra", action="append", default=[], help="An extra trainer flag for every layout (repeatable, e.g. --extra=--activation-checkpointing).")
    parser.add_argument("--timeout", type=float, default=1800, help="Seconds one layout may take (default 1800).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/trainer_throughput-<time>.json).")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return
    layouts = [x for x in args.layouts.split(",") if x]
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown or not layouts:
        parser.error(f"--layouts: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(LAYOUTS)}")
    if min(args.steps, args.repeats) < 1 or args.warmup < 0 or args.nproc < 0:
        parser.error("--steps and --repeats must be >= 1, --warmup and --nproc >= 0")
    before = machine()
    started = time.perf_counter()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for layout in layouts:
            rec = run_layout(args, layout, Path(tmp) / f"{layout}.json")
            rec["summary"] = summarize(rec)
            records.append(rec)
    table = Table(
        f"trainer throughput: preset {args.preset}, batch {args.batch_size} x {args.seq_len} tokens, {args.device}; "
        f"median of {args.repeats} x {args.steps} steps",
        ["layout", "parallel", "trainer tokens/s", "plain loop tokens/s", "overhead ratio [range]"],
        note="overhead = trainer time / plain-loop time of back-to-back samples on the same model and parallel wrapping, median over repeats (1.00x = none)",
    )
    for rec in records:
        s = rec["summary"]
        lo, hi = s["overhead_ratio_range"]
        overhead = f"{fmt_x(s['overhead_ratio'])} [{fmt_x(lo)}-{fmt_x(hi)}]"
        table.add(rec["layout"], rec["parallel"], f"{s['trainer_tokens_per_s']:.0f}", f"{s['plain_tokens_per_s']:.0f}", overhead)
    table.print()
    record = {
        "machine_before": before,
        "machine_after": machine(),
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("worker", "layout", "out")},
        "elapsed_s": round(time.perf_counter() - started, 2),
        "layouts": records,
    }
    path = write_json("trainer_throughput", record, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
