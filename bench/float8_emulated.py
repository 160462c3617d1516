"""FP8 training emulated on CPU against bf16: the loss over a run of the tiny model, NaNs, and the checkpoint round trip.

Each precision trains the ``tiny`` preset for ``--steps`` steps in this
process, through the trainer's own :class:`~railtrain.trainer.train.Trainer`,
from the same seed on the same batches: ``bf16`` (the baseline, autocast),
then ``fp8`` with each ``--recipes`` entry (torchao's float8 linear layers,
``--fp8-emulate``: operands rounded to float8 with dynamic scales, multiplied
in float32; numerics of fp8 training, not its speed). The table gives each
run's last loss, the mean of its last ``--tail`` losses (each logged loss is
one batch's, so the tail mean is the steadier end point), the relative
difference of that mean from bf16's, and the count of non-finite losses.

The round trip: the first fp8 run and the bf16 run each checkpoint their last
step (persistent tier, DCP); a Trainer of the other precision resumes from it,
and every parameter and optimizer-state tensor must equal the saver's bitwise.
(tests/trainer/test_float8.py checks the same across 2 FSDP2 ranks with float8
all-gather, in both tiers kinds.) Wall time per step is reported but is not a
claim about FP8 speed: emulation is slower than bf16 by design.

    python bench/float8_emulated.py [--steps 200] [--recipes tensorwise,rowwise] [--json PATH]

Pass: every fp8 tail mean within ``--tolerance`` (default 2%) of bf16's, no
non-finite loss, both round trips exact; exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from float8_roundtrip import differences, snapshot  # noqa: E402
from harness import Table, machine, revision, write_json  # noqa: E402

RECIPES = ("tensorwise", "rowwise")


def trainer_flags(args: argparse.Namespace, precision: str, recipe: str, checkpoint_dir: Path, metrics: Path) -> list[str]:
    """The trainer command line of one run (fp8 runs are emulated)."""
    flags = ["--data", args.data, "--preset", "tiny", "--steps", str(args.steps), "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size),
             "--threads", str(args.threads), "--seed", str(args.seed), "--log-every", str(max(1, args.steps // 10)), "--mixed-precision", precision,
             "--checkpoint-dir", str(checkpoint_dir), "--checkpoint-interval", str(args.steps), "--no-checkpoint-async", "--metrics-file", str(metrics)]  # fmt: skip
    if precision == "fp8":
        flags += ["--fp8-recipe", recipe, "--fp8-emulate"]
    return flags


def quietly(fn: Any) -> tuple[Any, str]:
    """Call ``fn()`` with stdout captured; its result and the text."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn()
    return result, out.getvalue()


def train(args: argparse.Namespace, precision: str, recipe: str, workdir: Path) -> dict[str, Any]:
    """One run to ``--steps``; its losses, seconds per step, layer count, and the final state's snapshot."""
    from railtrain.trainer.config import parse_args
    from railtrain.trainer.train import Trainer
    from railtrain.trainer import float8

    name = precision if precision != "fp8" else f"fp8-{recipe}"
    metrics = workdir / f"{name}.jsonl"
    trainer = Trainer(parse_args(trainer_flags(args, precision, recipe, workdir / name, metrics)))
    try:
        started = time.perf_counter()
        _, log = quietly(trainer.train)
        elapsed = time.perf_counter() - started
        state = snapshot(trainer)
        describe = float8.describe(trainer.model, trainer.config) if trainer.fp8 else trainer.precision
    finally:
        trainer.close()
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {"name": name, "precision": describe, "losses": [r["loss"] for r in records], "seconds_per_step": elapsed / args.steps,
            "log_tail": log.strip().splitlines()[-3:], "checkpoint": str(workdir / name), "state": state}  # fmt: skip


def resume_compare(args: argparse.Namespace, saver: dict[str, Any], precision: str, recipe: str, workdir: Path) -> list[str]:
    """Resume a Trainer of ``precision`` from ``saver``'s checkpoint; the tensors that differ from ``saver``'s final state."""
    from railtrain.trainer.config import parse_args
    from railtrain.trainer.train import Trainer

    flags = trainer_flags(args, precision, recipe, Path(saver["checkpoint"]), workdir / f"resume-{saver['name']}.jsonl")
    trainer = Trainer(parse_args(flags))
    try:
        quietly(trainer.resume)
        if trainer.step != args.steps:
            return [f"resumed at step {trainer.step}, expected {args.steps}"]
        return differences(saver["state"], snapshot(trainer))
    finally:
        trainer.close()


def summarize(run: dict[str, Any], base: dict[str, Any], tail: int) -> dict[str, Any]:
    """Last loss, tail mean, its relative difference from ``base``'s, non-finite count."""
    losses = run["losses"]
    mean = sum(losses[-tail:]) / len(losses[-tail:])
    base_mean = sum(base["losses"][-tail:]) / len(base["losses"][-tail:])
    return {"last_loss": losses[-1], "tail_mean": mean, "rel_diff": (mean - base_mean) / base_mean,
            "non_finite": sum(not math.isfinite(x) for x in losses), "steps": len(losses)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print the table, write the JSON record; return 0 when it passes, 1 when not."""
    parser = argparse.ArgumentParser(prog="float8_emulated.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="Training steps of every run (default 200).")
    parser.add_argument("--recipes", default="tensorwise,rowwise", help="Comma-separated fp8 recipes (default tensorwise,rowwise).")
    parser.add_argument("--tail", type=int, default=20, help="Losses averaged at the end (default 20).")
    parser.add_argument("--tolerance", type=float, default=0.02, help="Largest relative difference of the tail means (default 0.02).")
    parser.add_argument("--data", default="pkg://email/*.py", help="Trainer --data (default pkg://email/*.py).")
    parser.add_argument("--batch-size", type=int, default=8, help="Global batch in sequences (default 8).")
    parser.add_argument("--seq-len", type=int, default=128, help="Tokens per sequence (default 128).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the model and the data (default 0).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/float8_emulated-<time>.json).")
    args = parser.parse_args(argv)
    recipes = [r for r in args.recipes.split(",") if r]
    if not recipes or any(r not in RECIPES for r in recipes):
        parser.error(f"--recipes: choose from {', '.join(RECIPES)}, got {args.recipes!r}")
    if args.steps < 1 or not 1 <= args.tail <= args.steps or args.tolerance <= 0:
        parser.error("--steps must be >= 1, --tail in [1, --steps], --tolerance > 0")
    before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = train(args, "bf16", "", work)
        runs = [train(args, "fp8", r, work) for r in recipes]
        trips = {
            f"{runs[0]['name']} -> bf16": resume_compare(args, runs[0], "bf16", "", work),
            f"bf16 -> {runs[0]['name']}": resume_compare(args, base, "fp8", recipes[0], work),
        }
    rows = [(run, summarize(run, base, args.tail)) for run in [base, *runs]]
    table = Table(
        f"fp8 (torchao, emulated on CPU) vs bf16: tiny preset, {args.steps} steps of {args.batch_size} x {args.seq_len} tokens, seed {args.seed}",
        ["run", "precision", "last loss", f"mean of last {args.tail}", "vs bf16", "non-finite", "s/step"],
        note="s/step is emulation time on this machine, not an fp8 speed (emulation multiplies in float32 after rounding to float8)",
    )
    for run, s in rows:
        table.add(run["name"], run["precision"], f"{s['last_loss']:.4f}", f"{s['tail_mean']:.4f}", f"{s['rel_diff']:+.2%}", s["non_finite"], f"{run['seconds_per_step']:.3f}")
    table.print()
    for name, problems in trips.items():
        print(f"checkpoint round trip {name}: {'exact (every parameter and optimizer tensor bitwise equal)' if not problems else '; '.join(problems[:5])}")
    ok = all(abs(s["rel_diff"]) <= args.tolerance and s["non_finite"] == 0 for _, s in rows) and not any(trips.values())
    print(f"{'PASS' if ok else 'FAIL'}: fp8 tail means within {args.tolerance:.0%} of bf16, no non-finite loss, round trips exact")
    record = {
        "machine_before": before,
        "machine_after": machine(),
        "revision": revision(),
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "runs": [{**{k: v for k, v in run.items() if k != "state"}, "summary": s} for run, s in rows],
        "round_trips": {name: {"exact": not problems, "differences": problems} for name, problems in trips.items()},
        "pass": ok,
    }
    print(f"wrote {write_json('float8_emulated', record, args.json)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
