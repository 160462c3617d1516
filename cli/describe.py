"""``railtrain describe`` and the live view of ``submit --wait`` (pure: objects in, rich renderables and sentences out).

The objects are the JSON mappings the API server returns: the TrainingJob, its
pods and its Events. ``status.progress`` (crds/goodput.py) is read defensively
for the live view's progress bar (each field may be absent, or of another
type): a job written by an operator that does not fill it shows the rest.

Everything is laid out for a terminal of 80 columns: tables wrap only their
last (message) column.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from railtrain.cli.views import age, count, job_detail
from railtrain.crds.times import parse_time_or_none
from railtrain.crds.verdicts import parse_termination_message


def _number(value: Any) -> float | None:
    """``value`` as a float (numbers and numeric strings); None otherwise."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def duration(seconds: float | None) -> str:
    """``95`` → ``1m35s``, ``7300`` → ``2h01m``; ``"?"`` for None."""
    if seconds is None or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_numbers(status: dict[str, Any], now: datetime) -> dict[str, float | None] | None:
    """The fields of ``status.progress`` as numbers, or None when the job reports none.

    Returns:
        ``step``, ``total`` (steps), ``loss``, ``tps`` (tokens/s) and ``eta``
        (seconds to finish: ``etaSeconds``, else from an ``estimatedFinishTime``
        timestamp, else from the rate of steps is unknown and None).
    """
    p = status.get("progress")
    if not isinstance(p, dict) or _number(p.get("step")) is None:
        return None
    eta = _number(p.get("etaSeconds", p.get("remainingSeconds")))
    if eta is None:
        finish = parse_time_or_none(p.get("estimatedFinishTime") or p.get("eta"))
        eta = (finish - now).total_seconds() if finish else None
    return {
        "step": _number(p.get("step")),
        "total": _number(p.get("totalSteps", p.get("steps"))),
        "loss": _number(p.get("loss", p.get("latestLoss"))),
        "tps": _number(p.get("tokensPerSecond", p.get("tokensPerSec"))),
        "eta": eta,
    }


def progress_line(status: dict[str, Any], now: datetime, width: int = 24) -> RenderableType | None:
    """``step 120/300 ━━━━━━━━╸────── 40%  loss 1.93  tokens/s 5,210  ETA 2m10s``, or None without progress."""
    nums = progress_numbers(status, now)
    if nums is None:
        return None
    step, total = int(nums["step"] or 0), nums["total"]
    grid = Table.grid(padding=(0, 1))
    cells: list[RenderableType] = [Text(f"step {step}" + (f"/{int(total)}" if total else ""))]
    if total:
        cells.append(ProgressBar(total=total, completed=min(step, total), width=width))
        cells.append(Text(f"{100 * min(step, total) / total:.0f}%"))
    details = []
    if nums["loss"] is not None:
        details.append(f"loss {nums['loss']:.3g}")
    if nums["tps"] is not None:
        details.append(f"tokens/s {nums['tps']:,.0f}")
    if nums["eta"] is not None:
        details.append(f"ETA {duration(nums['eta'])}")
    cells.append(Text("  ".join(details)))
    for _ in cells:
        grid.add_column()
    grid.add_row(*cells)
    return grid


def restart_reasons(events: list[dict[str, Any]]) -> Counter[str]:
    """Restarts by reason, from the job's Warning Events whose message says it restarts the gang (summing each Event's count)."""
    out: Counter[str] = Counter()
    for e in events:
        if e.get("type") == "Warning" and "restarting" in (e.get("message") or ""):
            out[e.get("reason") or "?"] += int(e.get("count") or 1)
    return out


def rank_verdicts(pods: list[dict[str, Any]]) -> list[tuple[int, str, int, str, str]]:
    """``(rank, pod, exit code, verdict, message)`` of every pod whose training container ended with a failure.

    The verdict and message come from the trainer's termination message when
    it wrote one (:func:`railtrain.crds.verdicts.parse_termination_message`),
    else the kubelet's reason and message.
    """
    from railtrain.cli.logs import pod_rank

    out = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if cs.get("name") != "trainer" or not term or int(term.get("exitCode") or 0) == 0:
                continue
            verdict = parse_termination_message(term.get("message"))
            if verdict:
                what, message = f"{verdict['verdict']} ({verdict['reason']})", verdict["message"]
            else:
                what, message = term.get("reason") or "Error", " ".join(str(term.get("message") or "").split())
            out.append((pod_rank(pod), pod["metadata"]["name"], int(term.get("exitCode") or 0), what, message))
    return sorted(out)


def failure_sentence(job: dict[str, Any]) -> str | None:
    """One sentence naming why a Failed job failed (its Failed condition's reason and message: the verdict and the failing rank's message), else None."""
    status = job.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    name = job["metadata"]["name"]
    failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed" and c.get("status") == "True"), None)
    if failed is None:
        return f"trainingjob {name} failed (no Failed condition says why; 'railtrain describe {name}' shows its Events)"
    message = " ".join(str(failed.get("message") or "").split())
    return f"trainingjob {name} failed: {failed.get('reason') or 'Failed'}" + (f": {message}" if message else "")


def events_table(events: list[dict[str, Any]], now: datetime, limit: int = 10) -> RenderableType:
    """The ``limit`` most recent Events: age, type, reason (× count), message."""
    recent = events[-limit:]
    if not recent:
        return Text("Events: none")
    table = Table(box=None, pad_edge=False, header_style="bold", title="Events", title_justify="left", title_style="bold")
    for column in ("AGE", "TYPE", "REASON", "MESSAGE"):
        table.add_column(column, no_wrap=column != "MESSAGE")
    for e in recent:
        when = e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp")
        n = int(e.get("count") or 1)
        table.add_row(age(when, now), e.get("type", ""), (e.get("reason") or "") + (f" ×{n}" if n > 1 else ""), e.get("message", ""))
    return table


def replica_groups_table(status: dict[str, Any]) -> RenderableType | None:
    """The ``Replica groups`` table of a job with ``spec.faultTolerance`` (``status.replicaGroups``): each group's phase,
    last step, quorum (groups in it / groups), heals, replacements (job / infrastructure), pods and nodes; None for a job without the records. Read defensively: a
    malformed entry is skipped."""
    rows = [g for g in status.get("replicaGroups") or [] if isinstance(g, dict)]
    if not rows:
        return None
    table = Table(box=None, pad_edge=False, header_style="bold", title="Replica groups", title_justify="left", title_style="bold")
    for column in ("GROUP", "PHASE", "STEP", "QUORUM", "HEALS", "REPLACED", "PODS", "NODES"):
        table.add_column(column, no_wrap=column not in ("PODS", "NODES"))
    for g in rows:
        replaced = f"{g.get('replacements', 0)} (job {g.get('jobRestarts', 0)}, infra {g.get('infrastructureRestarts', 0)})"
        step = "-" if g.get("step") is None else str(g["step"])
        quorum = "-" if g.get("quorum") is None else f"{g['quorum']}/{len(rows)}"
        table.add_row(str(g.get("group", "?")), str(g.get("phase", "")), step, quorum, str(g.get("heals", 0)), replaced,
                      " ".join(map(str, g.get("members") or [])), " ".join(str(n) or "-" for n in g.get("nodes") or []))  # fmt: skip
    return table


def describe_view(job: dict[str, Any], pods: list[dict[str, Any]], events: list[dict[str, Any]], now: datetime, kueue: RenderableType | None = None) -> RenderableType:
    """Everything ``railtrain describe`` shows: ``railtrain get``'s view (summary with progress and goodput, conditions,
    placement with domains), then the command, restarts by reason, the Kueue admission (``kueue``, from
    :func:`railtrain.cli.kueueview.kueue_table`, for a Kueue job), the failed ranks' verdicts and the recent Events."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    from railtrain.cli.logs import pod_rank, pod_restart

    current = int(status.get("restarts") or 0)
    rank0 = next((p for p in pods if pod_rank(p) == 0 and pod_restart(p) == current), None)
    parts: list[RenderableType] = [job_detail(job, now, rank0), Text("")]
    extra = Table.grid(padding=(0, 2))
    extra.add_column(style="bold", no_wrap=True)
    extra.add_column()
    extra.add_row("Image:", str(spec.get("image", "")))
    extra.add_row("Command:", " ".join(str(a) for a in [*(spec.get("command") or []), *(spec.get("args") or [])]))
    policy = spec.get("runPolicy") or {}
    extra.add_row("Run policy:", f"backoffLimit {policy.get('backoffLimit', 3)}" + (", suspended" if policy.get("suspend") else ""))
    restarts = f"{status.get('restarts', 0)} (job {status.get('jobRestarts', 0)}, infrastructure {status.get('infrastructureRestarts', 0)})"
    if status.get("inPlaceRestarts"):  # runPolicy.restartInPlace: counted in job/infrastructure above, pods not recreated
        causes = ", ".join(f"{k} {n}" for k, n in sorted(((status.get("inPlace") or {}).get("causes") or {}).items()))
        restarts += f"; {status['inPlaceRestarts']} of them in place" + (f" (this gang: {causes})" if causes else "")
    reasons = restart_reasons(events)
    if reasons:
        restarts += "; by reason: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items()))
    extra.add_row("Restarts:", restarts)
    if spec.get("spares"):  # hot spares: waiting spare pods of this gang (a spare that took a rank is a rank's pod now)
        waiting = [p for p in pods if "railtrain.dev/spare" in ((p.get("metadata") or {}).get("labels") or {}) and pod_restart(p) == current
                   and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]  # fmt: skip
        where = ", ".join(f"{p['metadata']['name']} on {(p.get('spec') or {}).get('nodeName') or '(not bound)'}" for p in waiting)
        extra.add_row("Spares:", f"{spec['spares']} wanted, {len(waiting)} waiting" + (f": {where}" if where else ""))
    for label, key in (("Started:", "startTime"), ("Completed:", "completionTime")):
        if status.get(key):
            extra.add_row(label, f"{age(status[key], now)} ago")
    parts += [extra, Text("")]  # progress and goodput are job_detail's lines
    if kueue is not None:
        parts += [kueue, Text("")]
    verdicts = rank_verdicts(pods)
    if verdicts:
        table = Table(box=None, pad_edge=False, header_style="bold", title="Failed ranks", title_justify="left", title_style="bold")
        for column in ("RANK", "EXIT", "VERDICT", "MESSAGE"):
            table.add_column(column, no_wrap=column != "MESSAGE")
        for rank, _pod, code, verdict, message in verdicts:
            table.add_row(str(rank), str(code), verdict, message)
        parts += [table, Text("")]
    groups = replica_groups_table(status)
    if groups is not None:
        parts += [groups, Text("")]
    quarantined = [q for q in status.get("quarantines") or [] if isinstance(q, dict)]
    if quarantined:
        parts += [Text("Quarantined: " + ", ".join(f"{q.get('node')} ({q.get('verdict')})" for q in quarantined)), Text("")]
    parts.append(events_table(events, now))
    sentence = failure_sentence(job)
    if sentence:
        parts += [Text(""), Text(sentence, style="red")]
    return Group(*parts)


def live_view(job: dict[str, Any], now: datetime) -> RenderableType:
    """The live part of ``submit --wait``: name, phase, age, restarts, the explaining condition and the progress bar."""
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    phase = status.get("phase") or "Pending"
    style = {"Succeeded": "green", "Failed": "red", "Restarting": "yellow"}.get(phase, "bold")
    head = Text.assemble((meta.get("name", ""), "bold"), "  ", (phase, style), f"  age {age(meta.get('creationTimestamp'), now)}")
    restarts = int(status.get("restarts") or 0)
    if restarts:
        head.append(f"  {count(restarts, 'restart')}")
    lines: list[RenderableType] = [head]
    progress = progress_line(status, now)
    if progress is not None:
        lines.append(progress)
    return Group(*lines)


def condition_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """One line per condition of ``new`` that is new or changed since ``old`` (and the phase, when it changed)."""

    def conds(obj: dict[str, Any] | None) -> dict[str, tuple[str, str, str]]:
        return {c.get("type", ""): (c.get("status", ""), c.get("reason", ""), c.get("message", "")) for c in ((obj or {}).get("status") or {}).get("conditions") or []}

    out = []
    before, after = conds(old), conds(new)
    old_phase = ((old or {}).get("status") or {}).get("phase")
    new_phase = (new.get("status") or {}).get("phase")
    if new_phase and new_phase != old_phase:
        out.append(f"phase {new_phase}")
    for type_, (st, reason, message) in after.items():
        if before.get(type_) != (st, reason, message):
            out.append(f"{type_}={st} {reason}" + (f": {message}" if message else ""))
    return out
