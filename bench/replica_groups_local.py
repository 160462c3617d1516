"""Replica groups (torchft) against a gang restart, in local real runs: one group killed vs the same job restarted whole.

Both arms train the tiny preset (2 × 16-byte sequences per step, ``--log-every 1``, health checks off) on 2 local
nodes × 1 process, alternating so that the machine's load hits both:

``replica-groups``
    the job with ``spec.faultTolerance: {replicaGroups: 2, minReplicas: 1}`` under
    :class:`railtrain.cli.local_replica.ReplicaGroupRun`, exactly what ``railtrain run --local`` runs: every process of
    group 1 is SIGKILLed once it logged ``--kill-step`` (``--fault-kill-group``); it is started again alone and heals
    from group 0. The run is
    ended once the replacement has logged ``--steps-after`` steps of its own.
``gang-restart``
    the same job without replica groups, with a memory-tier checkpoint every ``--memory-interval`` steps, under
    :class:`railtrain.cli.local_recovery.RecoveringRun`: rank 1 kills itself at ``--kill-step`` (``--fault-kill``),
    the whole gang is stopped and restarted, resuming from the memory tier; it trains to ``--kill-step +
    --steps-after``.

Measured per run:

* **stall**: the longest time the job made no step: replica groups: the survivor's longest gap between two step
  lines from the step before the kill on (:func:`railtrain.cli.local_replica.survivor_stall`); gang restart: the
  last step line before the kill to the first step line of the restarted gang.
* **steps lost**: replica groups: steps the survivor never logged between its first and last step (each step is
  committed or run again); gang restart: the last step before the kill minus the step the new gang resumed from.
* **full strength after**: seconds from the failure being seen (the group's or the gang's relaunch) to the
  replacement's (the new gang's) first step line.

Usage: ``python bench/replica_groups_local.py [--repeats N] [--json PATH]``; prints a table and writes JSON to
``bench/results/replica-groups-local-<time>.json``.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Table, command_line, fmt_s, fmt_x, machine, median, ratio, write_json  # noqa: E402

from railtrain.cli import local as local_run  # noqa: E402
from railtrain.cli import local_replica  # noqa: E402
from railtrain.cli.local_recovery import RecoveringRun  # noqa: E402
from railtrain.crds import contract  # noqa: E402
from railtrain.crds.faults import KillGroupFault  # noqa: E402
from railtrain.crds.validation import parse_manifest  # noqa: E402

STEP = re.compile(r"^step=(\d+) loss=")
RESUMED = re.compile(r"^resumed from step (\d+)")
DEADLINE_S = 600.0
"""The most one run may take before it is stopped and recorded as not finished."""
GOAL_STALL_S = 2.0
"""Issue 31's goal for the survivors' stall."""


def job_doc(name: str, steps: int, groups: bool, memory_interval: int, persistent: Path) -> dict[str, Any]:
    """The manifest of one arm: 2 nodes × 1 process of the tiny preset; replica groups, or a memory tier for the gang."""
    spec: dict[str, Any] = {
        "image": "local", "command": ["torchrun", "-m", "railtrain.trainer"], "nodes": 2, "procsPerNode": 1,
        "args": ["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", str(steps), "--batch-size", "2", "--seq-len", "16",
                 "--log-every", "1", "--no-health", "--threads", "1"],
    }  # fmt: skip
    if groups:
        spec["faultTolerance"] = {"replicaGroups": 2, "minReplicas": 1}
    else:
        spec["checkpoint"] = {"location": str(persistent), "interval": 100000, "memory": {"interval": memory_interval}}
    return {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}


def measure_groups(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """One replica-groups run (module docstring); returns its sample."""
    job = parse_manifest(job_doc("rg-bench", 10**6, True, args.memory_interval, scratch / "ckpt"))
    screen = io.StringIO()

    def gang(nodes: list[Any], group: int, on_line: Any, log_dir: Path) -> Any:
        return local_run.LocalGang(nodes, workdir=scratch, grace=2, out=screen, on_line=on_line, log_dir=log_dir)

    (scratch / "messages").mkdir()
    run = local_replica.ReplicaGroupRun(job, scratch, local_run.new_local_uid(), {}, KillGroupFault(group=1, step=args.kill_step), gang,
                                        lambda s: None, scratch / "messages", scratch / "logs")  # fmt: skip
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", run.run()), daemon=True)
    thread.start()
    g1 = run.groups[1]
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and thread.is_alive():
        if g1.launches == 2 and g1.healed and sum(1 for _, n in g1.step_times if n > args.kill_step) >= args.steps_after:
            break
        time.sleep(0.2)  # the runner's records are polled; the run ends as soon as they say so
    run.request_stop()
    thread.join(timeout=120)
    record = run.record()
    stall, missing = local_replica.survivor_stall(record, killed=1, after_step=args.kill_step)
    r0, r1 = record["groups"]
    relaunched = r1["launched_at"][1] if len(r1["launched_at"]) > 1 else None
    back = next((t for t, n in r1["step_times"] if relaunched is not None and t >= relaunched), None)
    return {
        "arm": "replica-groups", "finished": bool(back), "stall_s": round(stall, 3), "steps_lost": len(missing),
        "full_strength_s": round(back - relaunched, 3) if back and relaunched else float("nan"),
        "survivor_steps_while_replaced": sum(1 for t, _ in r0["step_times"] if relaunched is not None and back is not None and relaunched <= t <= back),
        "healed_at": min((n for t, n in r1["step_times"] if relaunched is not None and t >= relaunched), default=None),
        "replacement": {k: r1[k] for k in ("replacements", "healed", "lost", "code", "reason", "launched_at")},
        "load1": round(machine()["loadavg"][0], 2) if machine()["loadavg"] else None,
    }  # fmt: skip


class _Lines:
    """Times the step and resume lines of rank 0 of each gang (``on_line`` of :class:`~railtrain.cli.local.LocalGang`)."""

    def __init__(self) -> None:
        self.gang = 0
        self.steps: list[tuple[float, int, int]] = []  # (time, gang, step)
        self.resumed: list[tuple[int, int]] = []  # (gang, step)

    def line(self, rank: int, text: str) -> None:
        if rank != 0:
            return
        if m := STEP.match(text):
            self.steps.append((time.monotonic(), self.gang, int(m.group(1))))
        elif m := RESUMED.match(text):
            self.resumed.append((self.gang, int(m.group(1))))


def measure_gang(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """One gang-restart run (module docstring); returns its sample."""
    doc = job_doc("gang-bench", args.kill_step + args.steps_after, False, args.memory_interval, scratch / "ckpt")
    doc["spec"]["env"] = [{"name": contract.ENV_FAULT_KILL, "value": f"rank=1,step={args.kill_step}"}]
    job = parse_manifest(doc)
    uid = local_run.new_local_uid()
    lines = _Lines()
    runner: RecoveringRun | None = None
    relaunched: list[float] = []

    def plan(restarts: int) -> list[Any]:
        ports = local_run.free_ports(3)
        return local_run.plan_local(job, rdzv_port=ports[0], metrics_ports=ports[1:], base_dir=scratch, restarts=restarts, uid=uid)

    def make_gang(nodes: list[Any]) -> Any:
        lines.gang = runner.restarts if runner else 0
        if lines.gang:
            relaunched.append(time.monotonic())
        return local_run.LocalGang(nodes, workdir=scratch, grace=2, out=io.StringIO(), on_line=lines.line)

    try:
        runner = RecoveringRun(job, plan, make_gang, scratch)
        code = runner.run()
    finally:
        for root in local_run.job_run_roots(job, uid).values():
            shutil.rmtree(root, ignore_errors=True)
    before = [(t, s) for t, g, s in lines.steps if g == 0]
    after = [(t, s) for t, g, s in lines.steps if g >= 1]
    last_t, last = before[-1] if before else (None, 0)
    resumed = next((s for g, s in lines.resumed if g >= 1), 0)
    return {
        "arm": "gang-restart", "finished": code == 0 and bool(after), "exit": code, "restarts": runner.restarts,
        "stall_s": round(after[0][0] - last_t, 3) if after and last_t else float("nan"),
        "steps_lost": last - resumed if after else None,
        "full_strength_s": round(after[0][0] - relaunched[0], 3) if after and relaunched else float("nan"),
        "last_step_before": last, "resumed_from": resumed,
        "load1": round(machine()["loadavg"][0], 2) if machine()["loadavg"] else None,
    }  # fmt: skip


def summarize(samples: list[dict[str, Any]], args: argparse.Namespace) -> tuple[Table, dict[str, Any]]:
    """The table and summary of ``samples`` (medians per arm, and the gang's stall over the groups')."""
    summary: dict[str, Any] = {}
    table = Table(
        f"Local real runs (tiny, 2 × 1 process): one replica group killed vs a gang restart, kill at step {args.kill_step}, {args.repeats} repeat(s)",
        ["arm", "stall p50 s", "stall max s", f"goal ≤ {GOAL_STALL_S:.0f} s", "steps lost (max)", "full strength after p50 s"],
        note=f"load average (1 min) median {median(s['load1'] for s in samples if s.get('load1') is not None):.1f}; "
             f"gang restart resumes from a memory tier every {args.memory_interval} steps",
    )  # fmt: skip
    for arm in ("replica-groups", "gang-restart"):
        mine = [s for s in samples if s["arm"] == arm and s["finished"]]
        if not mine:
            table.add(arm, "-", "-", "not measured", "-", "-")
            continue
        summary[arm] = {
            "stall_p50_s": median(s["stall_s"] for s in mine), "stall_max_s": max(s["stall_s"] for s in mine),
            "steps_lost_max": max(s["steps_lost"] for s in mine), "full_strength_p50_s": median(s["full_strength_s"] for s in mine), "n": len(mine),
        }  # fmt: skip
        a = summary[arm]
        table.add(arm, fmt_s(a["stall_p50_s"]), fmt_s(a["stall_max_s"]), "met" if a["stall_p50_s"] <= GOAL_STALL_S else "missed",
                  a["steps_lost_max"], fmt_s(a["full_strength_p50_s"]))  # fmt: skip
    if "replica-groups" in summary and "gang-restart" in summary:
        summary["stall_ratio_gang_over_groups"] = round(ratio(summary["gang-restart"]["stall_p50_s"], summary["replica-groups"]["stall_p50_s"]), 2)
        table.note += f"; the gang restart stalls {fmt_x(summary['stall_ratio_gang_over_groups'])} as long"
    return table, summary


def main(argv: list[str] | None = None) -> int:
    """Run both arms ``--repeats`` times, alternating; print the table and write the JSON record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="Runs per arm (default 3).")
    parser.add_argument("--kill-step", type=int, default=10, help="The step the group (the rank, in a gang) is killed at.")
    parser.add_argument("--steps-after", type=int, default=5, help="Steps the replacement (the restarted gang) trains after the kill.")
    parser.add_argument("--memory-interval", type=int, default=5, help="The gang's memory-tier interval in steps.")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/).")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.kill_step < 2 or args.steps_after < 1 or args.memory_interval < 1:
        parser.error("--repeats, --steps-after and --memory-interval must be >= 1 and --kill-step >= 2")
    before = machine()
    samples = []
    for i in range(args.repeats):
        for measure in (measure_groups, measure_gang):
            scratch = Path(tempfile.mkdtemp(prefix="railtrain-rg-bench-"))
            try:
                s = measure(args, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            print(f"  r{i} {s['arm']:15} stall {fmt_s(s['stall_s'])}s, steps lost {s['steps_lost']}, full strength after {fmt_s(s['full_strength_s'])}s "
                  f"(load {s['load1']})", flush=True)  # fmt: skip
            samples.append(s)
    table, summary = summarize(samples, args)
    table.print()
    path = write_json("replica-groups-local", {"command": command_line(), "args": vars(args) | {"json": str(args.json)},
                                                "machine_before": before, "machine_after": machine(), "samples": samples, "summary": summary}, args.json)  # fmt: skip
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
