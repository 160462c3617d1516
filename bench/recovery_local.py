"""Recovery time in local real runs: from a fault to the first training step of the restarted gang, and steps lost.

The tiny example (2 nodes × 1 process, examples/tiny) runs under
:class:`railtrain.cli.local_recovery.RecoveringRun`, exactly what
``railtrain run --local`` runs, with a memory tier every ``--memory-interval``
steps (tmpfs, with the neighbour's copy) and the persistent tier every 50. At
step ``--fault-step`` (read from rank 0's step log) the fault is injected:

``rank-killed``
    node 1's processes get SIGKILL (a crashed rank): a job restart, resuming
    from the memory tier;
``node-lost``
    node 1's processes get SIGKILL and its memory-tier directory is deleted
    (the node's RAM is gone): its shard comes back from the copy on node 0;
``hardware-suspect``, ``hang``
    the trainer's own fault injection (``RAILTRAIN_FAULT_BITFLIP`` /
    ``RAILTRAIN_FAULT_HANG``, docs/health.md), when the trainer's health checks
    are installed; the clock starts when the failed gang has ended.

With ``--local-modes gang,in-place`` (or ``in-place-cold``: the supervisor's warm launcher off) each fault that can restart in place
(``rank-killed``) also runs with ``spec.runPolicy.restartInPlace``: node 1's
trainer processes get SIGKILL (its pod-side supervisor lives on, as a container
that keeps running), the supervisors restart the processes inside the running
"nodes", and no gang is rebuilt; the two modes alternate so load hits both.
With ``spare`` among the modes, ``node-lost`` also runs with ``spec.spares: 1``
(and ``restartInPlace``): node 1's supervisor and processes get SIGKILL, the
coordinator hears it fall silent (5 s), the spare "node" takes rank 1 and node 0
restarts in place; no gang is rebuilt.

Measured: seconds from the fault (for the last two: from the end of the failed
gang, since the detection time belongs to bench/health.py) to the first
``step=`` line of the new gang, and steps lost = the last step rank 0 logged
before the fault minus the step the new gang resumed from.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from harness import Table, fmt_s, machine, median

from railtrain.cli import local as local_run
from railtrain.cli.local_recovery import RecoveringRun
from railtrain.crds import contract
from railtrain.crds.supervisor import ENV_WARM
from railtrain.crds.validation import parse_manifest

REPO = Path(__file__).resolve().parents[1]
LOCAL_FAULTS = ("rank-killed", "node-lost", "hardware-suspect", "hang")
GOAL_S = 15.0
STEP = re.compile(r"^\[rank 0\] step=(\d+) ")
RESUMED = re.compile(r"^\[rank 0\] resumed from step (\d+)")


class Clock:
    """A text sink for the gang's output that timestamps rank 0's step and resume lines and can fire a fault once."""

    def __init__(self, fault_step: int, fire: Any) -> None:
        self.fault_step, self.fire = fault_step, fire
        self.steps: list[tuple[float, int, int]] = []  # (time, restart, step)
        self.resumed: list[tuple[int, int]] = []  # (restart, step)
        self.resumed_at: list[tuple[float, int]] = []  # (time, restart)
        self.fired_at: float | None = None
        self.last_before: int = 0
        self.restart = 0
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        now = time.monotonic()
        for line in text.splitlines():
            if m := STEP.match(line):
                step = int(m.group(1))
                self.steps.append((now, self.restart, step))
                if self.restart == 0 and self.fired_at is None and step >= self.fault_step:
                    self.last_before = step
                    self.fired_at = time.monotonic()
                    self.fire()
            elif m := RESUMED.match(line):
                if self.fired_at is not None and self.restart == 0:
                    self.restart = 1  # restarted in place: the same gang's next attempt resumed
                self.resumed.append((self.restart, int(m.group(1))))
                self.resumed_at.append((now, self.restart))
        return len(text)

    def flush(self) -> None:
        pass


def _trainers_under(pid: int) -> list[int]:
    """The pids of every process under ``pid`` (children, grandchildren, ...) whose command line runs the trainer
    (torchrun and its workers), not the pod-side supervisor; read from /proc (Linux)."""
    parents: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(d.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(parents.get(child, []))
        try:
            cmd = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"railtrain.trainer" in cmd and b"railtrain.crds.supervisor" not in cmd:
            found.append(child)
    return found


def _job(name: str, fault: str, steps: int, persistent: Path, memory_interval: int, fault_step: int, in_place: bool = False, spares: int = 0,
         warm: bool = True) -> Any:  # fmt: skip
    env = [] if warm else [{"name": ENV_WARM, "value": "off"}]
    if fault == "hardware-suspect":
        env.append({"name": contract.ENV_FAULT_BITFLIP, "value": f"rank=1,step={fault_step},mode=once,bit=30"})
    if fault == "hang":
        env.append({"name": contract.ENV_FAULT_HANG, "value": f"rank=1,step={fault_step},kind=compute"})
    return parse_manifest({
        "apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {
            "image": "local", "command": ["torchrun", "-m", "railtrain.trainer"], "nodes": 2, "procsPerNode": 1, "env": env,
            "args": ["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", str(steps), "--lr-decay-steps", str(steps), "--log-every", "1"],
            "checkpoint": {"location": str(persistent), "interval": 50, "memory": {"interval": memory_interval}},
            "runPolicy": {"restartInPlace": in_place}, "spares": spares,
        },
    })  # fmt: skip


def measure_local(fault: str, args: argparse.Namespace, mode: str = "gang") -> dict[str, Any]:
    """One local run with one fault, restarted as a new gang (``mode`` "gang"), in place ("in-place") or with a hot spare
    taking the lost node's rank ("spare"); returns the sample."""
    spare = mode == "spare"
    in_place = mode in ("in-place", "in-place-cold") or spare
    scratch = Path(tempfile.mkdtemp(prefix="railtrain-recovery-"))
    name, uid = f"rec-{uuid.uuid4().hex[:6]}", local_run.new_local_uid()
    shm = Path("/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()) / "railtrain" / local_run.LOCAL_NAMESPACE / name  # local_run_roots without the run id
    job = _job(name, fault, args.local_steps, scratch / "persistent", args.memory_interval, args.fault_step, in_place, int(spare), warm=mode != "in-place-cold")
    runner: RecoveringRun | None = None

    def fire() -> None:
        if fault not in ("rank-killed", "node-lost"):
            return
        gang = runner.current  # type: ignore[union-attr]
        proc = gang._procs[1]  # noqa: SLF001 - the bench plays the fault: node 1 dies
        if spare:  # the whole node: its supervisor too
            gang.kill_node(1)
            shutil.rmtree(shm / uid / "node-1", ignore_errors=True)
            return
        if in_place:  # the trainer processes die, the node and its supervisor live on
            for pid in _trainers_under(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        gang.kill_node(1)  # the node's group and every descendant: torchrun's workers run in sessions of their own
        if fault == "node-lost":
            shutil.rmtree(shm / uid / "node-1", ignore_errors=True)  # node 1's RAM is gone with it

    clock = Clock(args.fault_step, fire)

    def plan(restarts: int) -> list[Any]:
        ports = local_run.free_ports(3 + int(spare))
        return local_run.plan_local(job, rdzv_port=ports[0], metrics_ports=ports[1:], base_dir=scratch, restarts=restarts, uid=uid)

    def make_gang(nodes: list[Any]) -> Any:
        clock.restart = runner.restarts if runner else 0
        return local_run.LocalGang(nodes, workdir=scratch, grace=2, out=clock, hold=spare)

    try:
        runner = RecoveringRun(job, plan, make_gang, scratch)
        code = runner.run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    start = clock.fired_at if fault in ("rank-killed", "node-lost") else runner.failed_at
    first_new = next((t for t, r, _ in clock.steps if r >= 1), None)
    resumed = next((s for r, s in clock.resumed if r >= 1), 0)
    last = clock.last_before if fault in ("rank-killed", "node-lost") else max((s for _, r, s in clock.steps if r == 0), default=0)
    return {
        "fault": fault, "mode": mode, "exit": code, "restarts": runner.restarts, "verdicts": [d.verdict for d in runner.history],
        "seconds": round(first_new - start, 3) if first_new and start else float("nan"),
        "gang_stopped_s": round(runner.failed_at - start, 3) if runner.failed_at and start else None,
        "resumed_s": round(next((t for t, r in clock.resumed_at if r >= 1), float("nan")) - start, 3) if start else None,
        "last_step_before": last, "resumed_from": resumed, "steps_lost": last - resumed if first_new else None,
        "final_step": max((s for _, _, s in clock.steps), default=0), "load1": round(os.getloadavg()[0], 2),
    }


IN_PLACE_FAULTS = ("rank-killed",)
"""The local faults that restart in place (a trainer process dies, its node lives on)."""
SPARE_FAULTS = ("node-lost",)
"""The local faults a hot spare answers (the whole node is gone)."""


def run_local(args: argparse.Namespace) -> dict[str, Any]:
    """Every local fault kind (× restart mode) ``args.local_repeats`` times, modes alternating; prints a table and returns the record."""
    faults = [f for f in args.local_faults.split(",") if f]
    modes = [m for m in args.local_modes.split(",") if m]
    arms = [(f, m) for f in faults for m in modes if m == "gang" or (m in ("in-place", "in-place-cold") and f in IN_PLACE_FAULTS) or (m == "spare" and f in SPARE_FAULTS)]
    samples = []
    for i in range(args.local_repeats):
        for fault, mode in arms:
            s = measure_local(fault, args, mode)
            print(f"  local r{i} {fault:17} {mode:8} exit {s['exit']} gang restarts {s['restarts']} {s['verdicts']}: first new step after {s['seconds']:.2f}s "
                  f"(gang stopped {s['gang_stopped_s']}s, resumed {s['resumed_s']}s), steps lost {s['steps_lost']} (load {s['load1']})", flush=True)
            samples.append(s)
    summary: dict[str, Any] = {}
    table = Table(f"Local real run (tiny, 2 nodes × 1 process): fault → first step of the next attempt, {args.local_repeats} repeats",
                  ["fault", "restart", "p50 s", "max s", f"goal ≤ {GOAL_S:.0f} s", "gangs rebuilt", "steps lost (max)", f"memory interval {args.memory_interval}"],
                  note=f"load average (1 min) median {median(s['load1'] for s in samples):.1f}")
    for f, m in arms:
        key = f if m == "gang" else f"{f}/{m}"
        mine = [s for s in samples if s["fault"] == f and s["mode"] == m and s["seconds"] == s["seconds"]]
        if not mine:
            table.add(f, m, "-", "-", "not measured", "-", "-", "-")
            continue
        summary[key] = {"p50_s": median(s["seconds"] for s in mine), "max_s": max(s["seconds"] for s in mine), "steps_lost_max": max(s["steps_lost"] for s in mine),
                        "gangs_rebuilt": sorted({s["restarts"] for s in mine}), "n": len(mine)}
        ok = summary[key]["steps_lost_max"] <= args.memory_interval
        table.add(f, m, fmt_s(summary[key]["p50_s"]), fmt_s(summary[key]["max_s"]), "met" if summary[key]["p50_s"] <= GOAL_S else "missed",
                  "/".join(map(str, summary[key]["gangs_rebuilt"])), summary[key]["steps_lost_max"], "≤ interval" if ok else "> interval")
    for f in faults:
        for m in ("in-place", "in-place-cold", "spare"):
            if f"{f}/{m}" in summary and f in summary:
                summary[f"{f}/{m}/ratio"] = round(summary[f"{f}/{m}"]["p50_s"] / summary[f]["p50_s"], 3)
        if f"{f}/in-place" in summary and f"{f}/in-place-cold" in summary:  # the warm launcher's effect, same invocation
            summary[f"{f}/warm-over-cold"] = round(summary[f"{f}/in-place"]["p50_s"] / summary[f"{f}/in-place-cold"]["p50_s"], 3)
    table.print()
    return {"machine_before": machine(), "samples": samples, "summary": summary}


def add_args(parser: argparse.ArgumentParser) -> None:
    """The local part's options."""
    parser.add_argument("--local-faults", default="rank-killed,node-lost", help=f"Comma-separated subset of {','.join(LOCAL_FAULTS)}.")
    parser.add_argument("--local-steps", type=int, default=60)
    parser.add_argument("--fault-step", type=int, default=35)
    parser.add_argument("--memory-interval", type=int, default=10)
    parser.add_argument("--local-modes", default="gang", help="Comma-separated subset of gang,in-place,in-place-cold,spare (in place: spec.runPolicy.restartInPlace, rank-killed only, "
                        "the next attempt started in the supervisor's warm launcher; in-place-cold: the same with it off, RAILTRAIN_SUPERVISOR_WARM=off; spare: spec.spares 1, node-lost only).")
