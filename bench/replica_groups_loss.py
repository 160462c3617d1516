"""Replica groups' loss curve: a run with two group failures against an uninterrupted run and the noise of data order.

Three arms of one job, each a local real run of 2 replica groups × 1 process (the tiny preset, ``--batch-size``
sequences of ``--seq-len`` bytes per step, ``minReplicas: 1``, health checks off) under :class:`railtrain.cli.local_replica.ReplicaGroupRun`,
exactly what ``railtrain run --local`` runs, trained to ``--steps``:

``uninterrupted``
    ``--seed 0``: the reference curve.
``reordered``
    ``--data-seed 1``: the same initial model, another order of the data. Its distance from the reference is the
    noise of data order, the yardstick.
``two-failures``
    ``--seed 0``; every process of group 1 is SIGKILLed after step ``--kills[0]``, and of group 0 after ``--kills[1]``
    once group 1 trains again. Each is replaced alone and heals from the survivor, which trains on alone meanwhile
    (on its half of each step's batch).

How the curves are compared: the job's loss at step ``s`` is the mean of the losses its groups logged for ``s``
(each is over the group's half of the batch; a step only one group logged is over that half). Each curve is
smoothed with a trailing mean of ``--window`` steps, and an arm's distance from the reference is the mean and the
largest absolute difference of the smoothed curves over steps ``window … steps``. The verdict is the ratio of the
failures' mean distance to the reordered run's: at most 1 means the two failures moved the curve no more than
another order of the same data does.

Usage: ``python bench/replica_groups_loss.py [--steps N] [--window W] [--kills A,B] [--json PATH]``; prints a table
and writes JSON to ``bench/results/replica-groups-loss-<time>.json``.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Table, command_line, machine, ratio, write_json  # noqa: E402

from railtrain.cli import local as local_run  # noqa: E402
from railtrain.cli import local_replica  # noqa: E402
from railtrain.crds.faults import KillGroupFault  # noqa: E402
from railtrain.crds.validation import parse_manifest  # noqa: E402

STEP_LOSS = re.compile(r"^step=(\d+) loss=([-+0-9.eE]+|nan|inf)")
DEADLINE_S = 900.0
"""The most one run may take before it is stopped and recorded as not finished."""
ARMS = ("uninterrupted", "reordered", "two-failures")


def job_doc(steps: int, batch_size: int, seq_len: int, extra: list[str]) -> dict[str, Any]:
    """The manifest of one arm: 2 replica groups × 1 process of the tiny preset, ``extra`` trainer flags added."""
    spec: dict[str, Any] = {
        "image": "local", "command": ["torchrun", "-m", "railtrain.trainer"], "nodes": 2, "procsPerNode": 1,
        "args": ["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", str(steps), "--batch-size", str(batch_size), "--seq-len", str(seq_len),
                 "--log-every", "1", "--no-health", "--threads", "1", *extra],
        "faultTolerance": {"replicaGroups": 2, "minReplicas": 1},
    }  # fmt: skip
    return {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "rg-loss"}, "spec": spec}


def run_arm(arm: str, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """One arm's run to ``args.steps``; returns ``{"arm", "finished", "losses": {step: [loss per group that logged it]},
    "kills", "replacements"}``."""
    extra = ["--data-seed", "1"] if arm == "reordered" else []
    kills = [KillGroupFault(group=1, step=args.kills[0]), KillGroupFault(group=0, step=args.kills[1])] if arm == "two-failures" else None
    job = parse_manifest(job_doc(args.steps, args.batch_size, args.seq_len, extra))
    losses: dict[int, list[float]] = {}
    guard = threading.Lock()

    def gang(nodes: list[Any], group: int, on_line: Any, log_dir: Path) -> Any:
        def line(rank: int, text: str) -> None:
            on_line(rank, text)
            if rank == 0 and (m := STEP_LOSS.match(text)):
                with guard:
                    losses.setdefault(int(m.group(1)), []).append(float(m.group(2)))

        return local_run.LocalGang(nodes, workdir=scratch, grace=2, out=io.StringIO(), on_line=line, log_dir=log_dir)

    (scratch / "messages").mkdir()
    run = local_replica.ReplicaGroupRun(job, scratch, local_run.new_local_uid(), {}, kills, gang, lambda s: None, scratch / "messages", scratch / "logs")
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", run.run()), daemon=True)
    thread.start()
    thread.join(timeout=DEADLINE_S)
    if thread.is_alive():
        run.request_stop()
        thread.join(timeout=120)
    record = run.record()
    return {
        "arm": arm, "finished": result.get("code") == 0 and max(losses, default=0) >= args.steps, "code": result.get("code"),
        "losses": {s: v for s, v in sorted(losses.items())}, "kills": len(run.kill_times),
        "replacements": [g["replacements"] for g in record["groups"]], "healed": [g["healed"] for g in record["groups"]],
    }  # fmt: skip


def job_curve(losses: dict[int, list[float]], steps: int) -> list[float | None]:
    """The job's loss per step ``1 … steps`` (index ``s − 1``): the mean of the groups' logged losses, None where no
    group logged the step (a run that ended early)."""
    return [sum(v) / len(v) if (v := losses.get(s)) else None for s in range(1, steps + 1)]


def smooth(curve: list[float | None], window: int) -> list[float | None]:
    """Trailing mean of ``window`` steps (None until ``window`` values, or where one of them is missing)."""
    out: list[float | None] = []
    for i in range(len(curve)):
        part = curve[max(0, i - window + 1) : i + 1]
        out.append(sum(part) / window if len(part) == window and all(x is not None for x in part) else None)  # type: ignore[arg-type]
    return out


def distance(curve: list[float | None], reference: list[float | None]) -> tuple[float, float]:
    """``(mean, max)`` absolute difference where both smoothed curves have a value; NaN where they share none."""
    diffs = [abs(a - b) for a, b in zip(curve, reference) if a is not None and b is not None]
    return (sum(diffs) / len(diffs), max(diffs)) if diffs else (float("nan"), float("nan"))


def summarize(samples: dict[str, dict[str, Any]], args: argparse.Namespace) -> tuple[Table, dict[str, Any]]:
    """The table and summary: each arm's final smoothed loss and its distance from the uninterrupted curve, and the
    failures' mean distance over the reordered run's."""
    curves = {arm: smooth(job_curve(s["losses"], args.steps), args.window) for arm, s in samples.items()}
    reference = curves.get("uninterrupted")
    summary: dict[str, Any] = {}
    table = Table(
        f"Loss curve (tiny, 2 replica groups × 1 process, {args.batch_size} × {args.seq_len} bytes per step, {args.steps} steps, trailing mean of {args.window} steps): "
        f"two group failures (group 1 after step {args.kills[0]}, group 0 after step {args.kills[1]}) vs the noise of data order",
        ["arm", "finished", "kills", "final loss", "mean |Δ| vs uninterrupted", "max |Δ|"],
    )
    for arm in ARMS:
        s = samples.get(arm)
        if s is None:
            continue
        final = next((x for x in reversed(curves[arm]) if x is not None), None)
        mean_d, max_d = distance(curves[arm], reference) if reference is not None and arm != "uninterrupted" else (0.0, 0.0)
        summary[arm] = {"finished": s["finished"], "kills": s["kills"], "final_loss": None if final is None else round(final, 4),
                        "mean_abs_diff": round(mean_d, 4), "max_abs_diff": round(max_d, 4)}  # fmt: skip
        table.add(arm, "yes" if s["finished"] else "no", s["kills"], "-" if final is None else f"{final:.4f}", f"{mean_d:.4f}", f"{max_d:.4f}")
    if "two-failures" in summary and "reordered" in summary:
        r = ratio(summary["two-failures"]["mean_abs_diff"], summary["reordered"]["mean_abs_diff"])
        summary["failures_over_data_order"] = round(r, 3)
        verdict = "within" if r <= 1 else "outside"
        table.note = f"the two failures moved the curve {r:.2f}x as far as another data order does: {verdict} the noise of data order"
    return table, summary


def main(argv: list[str] | None = None) -> int:
    """Run the three arms once each; print the table and write the JSON record."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="Steps every arm trains to (default 400).")
    parser.add_argument("--window", type=int, default=25, help="Steps of the trailing mean (default 25).")
    parser.add_argument("--kills", default="60,200", help="Steps after which group 1, then group 0, is killed (default 60,200).")
    parser.add_argument("--batch-size", type=int, default=16, help="Sequences per step, both groups together (default 16: steps slow enough that a replacement, 10-20 s to start here, is back before the run ends).")
    parser.add_argument("--seq-len", type=int, default=128, help="Bytes per sequence (default 128).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/).")
    args = parser.parse_args(argv)
    try:
        args.kills = [int(x) for x in args.kills.split(",")]
    except ValueError:
        parser.error(f"--kills must be two step numbers, e.g. 30,80; got {args.kills!r}")
    if len(args.kills) != 2 or not 2 <= args.kills[0] < args.kills[1] < args.steps or not 1 <= args.window < args.steps:
        parser.error("--kills must be two steps 2 <= A < B < --steps, and --window between 1 and --steps - 1")
    if args.batch_size < 2 or args.batch_size % 2 or args.seq_len < 2:
        parser.error("--batch-size must be even and >= 2 (each group takes half), and --seq-len >= 2")
    before = machine()
    samples: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        scratch = Path(tempfile.mkdtemp(prefix="railtrain-rg-loss-"))
        try:
            samples[arm] = run_arm(arm, args, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        s = samples[arm]
        print(f"  {arm:14} finished {s['finished']}, kills {s['kills']}, replacements {s['replacements']}, healed {s['healed']}", flush=True)
    table, summary = summarize(samples, args)
    table.print()
    path = write_json("replica-groups-loss", {"command": command_line(), "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                               "machine_before": before, "machine_after": machine(), "samples": samples, "summary": summary}, args.json)  # fmt: skip
    print(f"wrote {path}")
    return 0 if all(s["finished"] for s in samples.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
