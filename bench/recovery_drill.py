"""Recovery drill: one 300-step tiny local run with a bit flip and a hang injected finishes within 2% of a clean run's loss.

Two local runs of the tiny example (2 nodes × 1 process, examples/tiny) under
:class:`railtrain.cli.local_recovery.RecoveringRun` (what ``railtrain run
--local`` runs), with a memory tier every ``--memory-interval`` steps and the
persistent tier every 50:

* **clean**: no fault;
* **faulty**: ``RAILTRAIN_FAULT_BITFLIP`` flips bit ``--bit`` of one parameter
  on rank 1 at ``--flip-step`` (once: a transient fault) and
  ``RAILTRAIN_FAULT_HANG`` hangs rank 0 at ``--hang-step``. The trainer's
  health checks (docs/health.md) end the gang with ``hardware-suspect`` and
  ``hang`` verdicts; the failure policy restarts the gang each time, and it
  resumes from the newest checkpoint.

The drill passes when the faulty run finished, restarted once per fault with
those verdicts, and its final loss is within ``--tolerance`` (2%) of the
clean run's. Without the trainer's health checks the faults go unnoticed and
the drill says so instead of passing. Run from the repository root::

    python bench/recovery_drill.py
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import machine, write_json

from railtrain.cli import local as local_run
from railtrain.cli.local_recovery import RecoveringRun
from railtrain.crds import contract
from railtrain.crds.validation import parse_manifest

LOSS = re.compile(r"^\[rank 0\] step=(\d+) loss=([0-9.naif]+)")


class Lines:
    """Collects rank 0's step losses and echoes the runner's notes."""

    def __init__(self) -> None:
        self.losses: dict[int, float] = {}

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if m := LOSS.match(line):
                self.losses[int(m.group(1))] = float(m.group(2))
        return len(text)

    def flush(self) -> None:
        pass


def run(args: argparse.Namespace, faulty: bool) -> dict[str, Any]:
    """One run; returns its final loss, exit status, restarts and verdicts."""
    scratch = Path(tempfile.mkdtemp(prefix="railtrain-drill-"))
    name = f"drill-{uuid.uuid4().hex[:6]}"
    env = [{"name": contract.ENV_FAULT_BITFLIP, "value": f"rank=1,step={args.flip_step},mode=once,bit={args.bit}"},
           {"name": contract.ENV_FAULT_HANG, "value": f"rank=0,step={args.hang_step},kind=compute"}] if faulty else []  # fmt: skip
    job = parse_manifest({
        "apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {
            "image": "local", "command": ["torchrun", "-m", "railtrain.trainer"], "nodes": 2, "procsPerNode": 1, "env": env,
            "args": ["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", str(args.steps), "--lr-decay-steps", str(args.steps), "--log-every", "10"],
            "checkpoint": {"location": str(scratch / "persistent"), "interval": 50, "memory": {"interval": args.memory_interval}},
        },
    })  # fmt: skip
    lines = Lines()
    uid = local_run.new_local_uid()  # one run: its restarts share the memory tier

    def plan(restarts: int) -> list[Any]:
        ports = local_run.free_ports(3)
        return local_run.plan_local(job, rdzv_port=ports[0], metrics_ports=ports[1:], base_dir=scratch, restarts=restarts, uid=uid)

    started = time.monotonic()
    runner = RecoveringRun(job, plan, lambda n: local_run.LocalGang(n, workdir=scratch, grace=2, out=lines), scratch, lambda s: print(f"    {s}", flush=True))
    try:
        code = runner.run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shm = Path("/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()) / "railtrain" / local_run.LOCAL_NAMESPACE / name
        shutil.rmtree(shm, ignore_errors=True)
    final = max(lines.losses) if lines.losses else 0
    return {"exit": code, "seconds": round(time.monotonic() - started, 1), "final_step": final, "final_loss": lines.losses.get(final, float("nan")),
            "restarts": runner.restarts, "verdicts": [d.verdict for d in runner.history]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--flip-step", type=int, default=100)
    parser.add_argument("--hang-step", type=int, default=200)
    parser.add_argument("--bit", type=int, default=30, help="Bit of the float32 parameter to flip (30: the top exponent bit).")
    parser.add_argument("--memory-interval", type=int, default=10)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    before = machine()
    clean = run(args, faulty=False)
    print(f"clean:  exit {clean['exit']}, step {clean['final_step']} loss {clean['final_loss']:.4f} in {clean['seconds']}s", flush=True)
    faulty = run(args, faulty=True)
    print(f"faulty: exit {faulty['exit']}, step {faulty['final_step']} loss {faulty['final_loss']:.4f} in {faulty['seconds']}s, restarts {faulty['restarts']} {faulty['verdicts']}", flush=True)
    rel = abs(faulty["final_loss"] - clean["final_loss"]) / clean["final_loss"] if clean["final_loss"] else float("nan")
    detected = sorted(faulty["verdicts"]) == sorted([contract.VERDICT_HARDWARE_SUSPECT, contract.VERDICT_HANG])
    ok = detected and faulty["exit"] == 0 and faulty["final_step"] == args.steps and rel <= args.tolerance
    verdict = "PASS" if ok else ("faults not detected: are the trainer's health checks installed?" if not detected else "FAIL")
    print(f"final loss differs by {100 * rel:.2f}% (tolerance {100 * args.tolerance:.0f}%): {verdict}")
    path = write_json("recovery_drill", {"machine_before": before, "machine_after": machine(), "params": vars(args) | {"json": str(args.json)},
                                         "clean": clean, "faulty": faulty, "relative_loss_difference": rel, "passed": ok}, args.json)  # fmt: skip
    print(f"wrote {path}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
