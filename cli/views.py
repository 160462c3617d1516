"""How ``railtrain get`` shows TrainingJobs (pure: objects in, rich renderables out).

The objects are the JSON mappings the API server returns. Nothing here talks to
the cluster, so every view is tested on hand-written objects.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import yaml
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from railtrain.crds import contract, fabric, labels
from railtrain.crds.times import parse_time_or_none

PROBLEM_TYPES = ("Failed", "Suspended")
"""Condition types that explain a job's state when True; False is their healthy state (others explain it when False/Unknown)."""

PHASE_EXPLAINED_BY = {"Pending": ("Scheduled",), "Restarting": ("Scheduled",), "Suspended": ("Suspended",), "Failed": ("Failed",)}
"""Phase → the condition types that say why a job is in it (a waiting job: why it is not Scheduled), preferred over newer ones."""



def count(n: int, one: str, many: str | None = None) -> str:
    """``n`` with the noun in the right number: ``1 node``, ``2 nodes``, ``1 process``, ``8 processes``."""
    return f"{n} {one if n == 1 else (many or one + 's')}"

def age(since: Any, now: datetime) -> str:
    """A kubectl-style age (``45s``, ``12m``, ``3h``, ``2d``) of timestamp ``since`` at ``now``; ``"<unknown>"`` if absent."""
    start = parse_time_or_none(since)
    if start is None:
        return "<unknown>"
    seconds = max(0, int((now - start).total_seconds()))
    # Switch unit once two of the next unit have passed, as kubectl does.
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def duration(seconds: float) -> str:
    """A short duration: ``45s``, ``12m05s``, ``3h07m``, ``2d04h`` (seconds rounded down)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def step_cell(status: dict[str, Any]) -> str:
    """``120/300`` (step of total steps from status.progress), ``120`` without a total, ``-`` before the first report."""
    progress = status.get("progress") or {}
    if "step" not in progress:
        return "-"
    return f"{progress['step']}/{progress['totalSteps']}" if progress.get("totalSteps") else str(progress["step"])


def goodput_cell(status: dict[str, Any]) -> str:
    """status.goodput.ratio as a percentage (``92%``), ``-`` when not computed yet."""
    goodput = status.get("goodput") or {}
    return f"{goodput['ratio']:.0%}" if "ratio" in goodput else "-"


def progress_line(status: dict[str, Any], now: datetime) -> str | None:
    """``step 120/300 (40%), loss 2.31, 12345 tokens/s, ETA 5m00s (read 3s ago)`` from status.progress; None without one."""
    p = status.get("progress") or {}
    if "step" not in p:
        return None
    words = [f"step {p['step']}/{p['totalSteps']} ({p['step'] / p['totalSteps']:.0%})" if p.get("totalSteps") else f"step {p['step']}"]
    if p.get("loss") is not None:
        words.append(f"loss {p['loss']:.3f}")
    if p.get("tokensPerSecond") is not None:
        words.append(f"{p['tokensPerSecond']:.0f} tokens/s")
    if p.get("etaSeconds") is not None:
        words.append(f"ETA {duration(p['etaSeconds'])}")
    read = f" (read {age(p.get('lastUpdateTime'), now)} ago)" if p.get("lastUpdateTime") else ""
    return ", ".join(words) + read


def goodput_line(status: dict[str, Any]) -> str | None:
    """``92% training of 1h02m: queued 1m00s, starting 2m00s, lost 3m00s (restart_node_lost 2m00s, recompute 30s)``, and
    ``, degraded 40s`` when replica groups' absences cost training capacity (status.goodput.degradedSeconds, 1 s or more); None without status.goodput."""
    g = status.get("goodput") or {}
    if "wallSeconds" not in g:
        return None
    lost = g.get("lostSeconds") or {}
    causes = ", ".join(f"{k} {duration(v)}" for k, v in sorted(lost.items()) if v >= 1)
    return (
        f"{g.get('ratio', 0):.0%} training of {duration(g['wallSeconds'])}: queued {duration(g.get('queuedSeconds', 0))}, "
        f"starting {duration(g.get('startingSeconds', 0))}, lost {duration(sum(lost.values()))}" + (f" ({causes})" if causes else "")
        + (f", degraded {duration(g['degradedSeconds'])} (replica groups absent; counted in training)" if g.get("degradedSeconds", 0) >= 1 else "")
    )


def explaining_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The condition that best explains why a job is in its phase and not simply progressing.

    Candidates are the conditions that are False or Unknown, except those of
    :data:`PROBLEM_TYPES`, which count only when True (``Suspended False
    Resumed`` explains nothing once the job waits or runs again). Among them a
    type that explains the phase (:data:`PHASE_EXPLAINED_BY`, e.g. Scheduled for
    Pending) wins; then the most recently transitioned one.

    Returns:
        That condition, or ``None`` when no condition is a candidate (a healthy running job).
    """
    status = obj.get("status") or {}
    explains = PHASE_EXPLAINED_BY.get(status.get("phase") or "Pending", ())
    conditions = status.get("conditions") or []
    candidates = [c for c in conditions if (c.get("status") == "True") == (c.get("type") in PROBLEM_TYPES)]
    if not candidates:
        return None
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return max(candidates, key=lambda c: (c.get("type") in explains, parse_time_or_none(c.get("lastTransitionTime")) or epoch))


_HOLDERS = (re.compile(r"held by:? ([^;()]+?)\s*(?:[;)]|\.\s|\.?$)"), re.compile(r"ahead in the queue: ([^;]+);"), re.compile(r"admitted again: (.+)$"))
"""Where the operator's waiting refusals name who holds the capacity (operator/scheduling/refusal.py ``held_by``, operator/scheduling/queue.py)."""


def permanent_fix(message: str) -> str | None:
    """The fix a permanent Scheduled=False message names (pure), or None when the message is not permanent.

    A permanent message carries one of :data:`~railtrain.crds.contract.PERMANENT_MARKERS` ("It can never fit ... :
    why; fix"); the fix is its last clause.
    """
    marker = next((m for m in contract.PERMANENT_MARKERS if m in message), None)
    if marker is None:
        return None
    tail = message.split(marker, 1)[1].split(": ", 1)[-1]
    return tail.rsplit("; ", 1)[-1].strip().rstrip(".")


def holders_named(message: str) -> str | None:
    """Who holds the capacity a waiting job needs, as the operator's refusal names them (pure); None when it names none."""
    for pattern in _HOLDERS:
        found = pattern.search(message)
        if found:
            return found.group(1).strip()
    return None


def reason_cell(condition: dict[str, Any] | None) -> str:
    """The REASON of ``railtrain get``'s table: the condition's reason, and for a refused gang whether it can never
    fit (with the fix) or waits (for whom, as ``railtrain plan`` names them).

    Examples: ``Unschedulable (never fits: ask for fewer nodes or less per pod, or add nodes)``,
    ``Unschedulable (waiting for team/a, team/b)``, ``TopologyUnsatisfiable (waiting)``.
    """
    if not condition:
        return ""
    reason, message = condition.get("reason", ""), condition.get("message") or ""
    if condition.get("type") != "Scheduled" or condition.get("status") != "False":
        return reason
    fix = permanent_fix(message)
    if fix is not None:
        what = "never starts" if contract.NEVER_STARTS in message else "never fits"
        return f"{reason} ({what}: {fix})"
    if reason in ("GangPlaced", "Suspended", "Restarting") or not message:
        return reason
    holders = holders_named(message)
    return f"{reason} (waiting for {holders})" if holders else reason


def print_table(console: Any, table: Table) -> None:
    """Print ``table`` whole: on a terminal at its width (long cells wrap inside their column); elsewhere (a pipe, a
    file) as wide as the table needs, so no cell is cut at the 80 columns rich assumes there."""
    if console.is_terminal:
        console.print(table)
        return
    needed = console.measure(table, options=console.options.update_width(100_000)).maximum
    saved = console.width
    console.width = max(saved, needed)  # Console.print caps its own width argument at the console's
    try:
        console.print(table)
    finally:
        console.width = saved


def jobs_table(items: list[dict[str, Any]], now: datetime, all_namespaces: bool = False) -> Table:
    """A table with one row per job: name, phase, nodes, restarts, step, goodput ratio, age, and the reason of
    :func:`explaining_condition` (:func:`reason_cell`: a refused gang says whether it never fits or waits, and for whom).

    Args:
        items: TrainingJob objects.
        now: the current time (ages are relative to it).
        all_namespaces: add a NAMESPACE column.
    """
    table = Table(box=None, pad_edge=False, header_style="bold")
    if all_namespaces:
        table.add_column("NAMESPACE")
    for column in ("NAME", "PHASE", "NODES", "RESTARTS", "STEP", "GOODPUT", "AGE", "REASON"):
        table.add_column(column, no_wrap=column != "REASON", overflow="fold")
    for obj in items:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        cond = explaining_condition(obj)
        row = [
            meta.get("name", ""),
            status.get("phase") or "Pending",
            str(spec.get("nodes", 1)),
            str(status.get("restarts", 0)),
            step_cell(status),
            goodput_cell(status),
            age(meta.get("creationTimestamp"), now),
            reason_cell(cond),
        ]
        table.add_row(*([meta.get("namespace", "")] if all_namespaces else []), *row)
    return table


def _gang_line(spec: dict[str, Any], status: dict[str, Any]) -> str:
    """``4 nodes × 8 processes (world size 32)``; an elastic job shows its admitted count and range."""
    nodes, procs = spec.get("nodes", 1), spec.get("procsPerNode", 1)
    elastic = spec.get("elastic") or {}
    if not elastic:
        return f"{count(nodes, 'node')} × {count(procs, 'process', 'processes')} (world size {nodes * procs})"
    span = f"{elastic.get('minNodes', nodes)}..{nodes}"
    admitted = status.get("admittedNodes")
    if admitted:
        return f"{admitted} of {span} nodes × {count(procs, 'process', 'processes')} (world size {admitted * procs}), elastic"
    return f"{span} nodes × {count(procs, 'process', 'processes')}, elastic (not admitted yet)"


def _label_column(key: str) -> str:
    """Column title of a topology level: ``railtrain.dev/rack`` → ``RACK``."""
    return key.split("|")[0].rsplit("/", 1)[-1].upper()


QUIET_SECONDS = 30
"""How long a job may go without any condition before ``railtrain get`` asks whether an operator runs (it writes one within seconds)."""


def _no_conditions(meta: dict[str, Any], now: datetime) -> str:
    """The line shown instead of the conditions of a job that has none.

    Every job the operator has looked at carries a condition (one it cannot
    run is Failed with InvalidSpec or PodRejected), so a job without one past
    :data:`QUIET_SECONDS` has not been seen by any operator.
    """
    created = parse_time_or_none(meta.get("creationTimestamp"))
    if created is None or (now - created).total_seconds() < QUIET_SECONDS:
        return "Conditions: none yet (the operator writes them within seconds of creation)"
    return (
        f"Conditions: none after {age(meta.get('creationTimestamp'), now)}: no operator has acted on this job; "
        "is 'railtrain operator' running against this cluster? (its log names a job it cannot act on)"
    )


def fabric_line(settings: dict[str, str]) -> str:
    """``NAME=value`` pairs of a rank's NCCL/libfabric settings (:func:`railtrain.crds.fabric.rank_settings`), or ``none``."""
    return " ".join(f"{k}={v}" for k, v in settings.items()) or "none"


def job_detail(obj: dict[str, Any], now: datetime, rank0: dict[str, Any] | None = None) -> RenderableType:
    """The view of one job: summary (with topology and admission), conditions and placement (rank → node and domains).

    ``rank0``, rank 0's pod when it exists, adds the NCCL/libfabric settings that rank got (docs/fabric.md).
    """
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("Name:", meta.get("name", ""))
    summary.add_row("Namespace:", meta.get("namespace", ""))
    summary.add_row("Phase:", status.get("phase") or "Pending")
    summary.add_row("Gang:", _gang_line(spec, status))
    topology = spec.get("topology") or {}
    asked = " ".join(filter(None, [f"policy {topology.get('policy', 'preferred')}", topology.get("level")]))
    summary.add_row("Topology:", asked + (f", priority {spec['priority']}" if spec.get("priority") else ""))
    if (status.get("topology") or {}).get("reason"):
        summary.add_row("Placed:", status["topology"]["reason"])
    if rank0 is not None:
        profile = ((rank0.get("metadata") or {}).get("annotations") or {}).get(fabric.ANNOTATION_PROFILE)
        summary.add_row("Fabric:", (f"profile {profile}: " if profile else "") + f"rank 0 got {fabric_line(fabric.rank_settings(rank0))}")
    summary.add_row("Restarts:", str(status.get("restarts", 0)))
    if status.get("requeues"):
        summary.add_row("Requeues:", f"{status['requeues']} (gang timeout; not admitted before {status.get('requeueAfter', '?')})")
    summary.add_row("Age:", age(meta.get("creationTimestamp"), now))
    if (line := progress_line(status, now)) is not None:
        summary.add_row("Progress:", line)
    if (line := goodput_line(status)) is not None:
        summary.add_row("Goodput:", line)
    parts: list[RenderableType] = [summary, Text("")]

    conditions = status.get("conditions") or []
    if conditions:
        table = Table(box=None, pad_edge=False, header_style="bold", title="Conditions", title_justify="left", title_style="bold")
        for column in ("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"):
            table.add_column(column, no_wrap=column != "MESSAGE")
        for c in conditions:
            table.add_row(c.get("type", ""), c.get("status", ""), c.get("reason", ""), age(c.get("lastTransitionTime"), now), c.get("message", ""))
        parts.append(table)
    else:
        parts.append(Text(_no_conditions(meta, now)))
    parts.append(Text(""))

    placement = sorted(status.get("placement") or [], key=lambda p: p.get("rank", 0))
    if placement:
        table = Table(box=None, pad_edge=False, header_style="bold", title="Placement", title_justify="left", title_style="bold")
        table.add_column("RANK", justify="right")
        table.add_column("NODE")
        levels = list(dict.fromkeys(k for p in placement for k in (p.get("domains") or {}) if k != labels.HOSTNAME))
        for level in levels:
            table.add_column(_label_column(level))
        for p in placement:
            domains = p.get("domains") or {}
            table.add_row(str(p.get("rank", "")), p.get("node", ""), *(domains.get(level, "") for level in levels))
        parts.append(table)
    else:
        parts.append(Text("Placement: not placed yet"))
    return Group(*parts)


def to_yaml(objs: list[dict[str, Any]] | dict[str, Any]) -> str:
    """YAML of one object, or of a ``List`` of objects, without ``metadata.managedFields`` (noise to a reader)."""

    def clean(o: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (o.get("metadata") or {}).items() if k != "managedFields"}
        return {**o, "metadata": meta}

    if isinstance(objs, dict):
        return yaml.safe_dump(clean(objs), sort_keys=False)
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [clean(o) for o in objs]}, sort_keys=False)
