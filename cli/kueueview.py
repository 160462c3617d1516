"""The Kueue part of ``railtrain describe`` (pure: the job, its Workload and LocalQueue as read in, lines out).

For a TrainingJob labelled ``kueue.x-k8s.io/queue-name`` (docs/kueue.md) it
says which Workload stands for the job, its LocalQueue and ClusterQueue (and, under MultiKueue, the worker cluster),
whether Kueue admitted it (flavors, hosts of the topology assignment), Kueue's
reason and message while it waits, and any eviction. The Workload is read
with the operator's own reading
(:func:`railtrain.operator.job.kueuestatus.view`), so the CLI and the operator
never disagree on where a Workload stands.
"""

from __future__ import annotations

from typing import Any, Mapping

from rich.table import Table

from railtrain.crds.kueue import MULTIKUEUE_ORIGIN_LABEL
from railtrain.crds.labels import HOSTNAME
from railtrain.operator.job import kueuestatus as ks
from railtrain.operator.job.workload import managed_elsewhere, prebuilt_name, queue_name, workload_name


def kueue_rows(job: Mapping[str, Any], workload: Mapping[str, Any] | None, local_queue: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(label, text)`` rows about the job's Kueue admission; empty for a job without the queue-name label.

    Args:
        job: the TrainingJob as read; workload: its Workload (None: there is none);
        local_queue: the LocalQueue the label names (None: it does not exist, or was not read).
    """
    queue = queue_name(job)
    if queue is None:
        return []
    name = workload_name(job.get("metadata") or {})
    if not workload:
        return [("Kueue:", f"Workload {name} not found (LocalQueue {queue}); the operator creates it while the job waits")]
    try:
        v = ks.view(workload)
    except ValueError as err:  # an admission whose topology assignment does not decode: say so, show the rest
        v, undecoded = ks.KueueView(name=str((workload.get("metadata") or {}).get("name", name)), state=ks.ADMITTED), str(err)
    else:
        undecoded = ""
    cq = v.cluster_queue or str(((local_queue or {}).get("spec") or {}).get("clusterQueue") or "")
    where = f"LocalQueue {queue}" + (f", ClusterQueue {cq}" if cq else "" if local_queue else " (not found)")
    rows = [("Kueue:", f"Workload {v.name} ({where})")]
    admission = _admission(v, undecoded)
    asked = ks.admitted_count({"spec": workload.get("spec") or {}})
    if v.admitted and v.count and v.count < asked:
        admission += f"; partial admission: {v.count} of the {asked} pods asked for (spec.elastic.minNodes)"
    rows.append(("Admission:", admission))
    ready = ks.condition(workload, ks.PODS_READY)
    if ready is not None:
        rows.append(("Pods ready:", f"{ready.get('status', '?')} ({ready.get('reason', '')}): {ready.get('message', '')}"))
    evictions = _evictions(workload)
    if evictions:
        rows.append(("Evictions:", evictions))
    if managed_elsewhere(job):  # a MultiKueue manager: the gang runs on a worker cluster; the status is that worker's
        worker = str((workload.get("status") or {}).get("clusterName") or "")
        rows.append(("MultiKueue:", f"runs on worker cluster {worker} (its status is that cluster's, copied back)" if worker
                     else "not dispatched to a worker cluster yet"))
    elif (prebuilt := prebuilt_name(job)) is not None:
        origin = ((job.get("metadata") or {}).get("labels") or {}).get(MULTIKUEUE_ORIGIN_LABEL, "")
        rows.append(("MultiKueue:", f"a copy dispatched by the manager {origin or '(unnamed)'}; Workload {prebuilt} was built there"))
    return rows


def _admission(v: ks.KueueView, undecoded: str) -> str:
    """One sentence: admitted (flavors, hosts, domains), pending (Kueue's reason: message), evicted or finished (reason: message)."""
    said = f"{v.reason}: {v.message}" if v.reason and v.message else (v.message or v.reason)
    if v.state == ks.ADMITTED:
        flavors = ", ".join(f"{flavor} ({resource})" for resource, flavor in sorted(v.flavors.items()))
        text = f"admitted by ClusterQueue {v.cluster_queue or '?'}" + (f", flavor {flavors}" if flavors else "")
        if undecoded:
            return f"{text}; its topology assignment does not decode: {undecoded}"
        if v.domains:
            pods = sum(n for _, n in v.domains)
            if HOSTNAME in v.levels:
                hosts = {values[v.levels.index(HOSTNAME)] for values, _ in v.domains}
                text += f", {pods} pods on {len(hosts)} assigned hosts"
            else:
                text += f", {pods} pods in {len(v.domains)} assigned domains of {v.levels[-1] if v.levels else '?'}"
        return text
    if v.state == ks.EVICTED:
        return f"evicted: {said or 'no reason given'}" + ("; quota still reserved until the gang stops" if v.reserved else "; waiting to be admitted again")
    if v.state == ks.FINISHED:
        return f"finished: {said or 'no reason given'}"
    return f"pending: {said or 'Kueue has not considered it yet'}"


def _evictions(workload: Mapping[str, Any]) -> str:
    """Past evictions Kueue counted (v1beta2 ``status.schedulingStats.evictions``: reason × count), requeues, and the last
    eviction's message once re-admitted (Kueue's ``SetQuotaReservation`` turns ``Evicted`` False, "Previously: ..."); "" without any."""
    status = workload.get("status") or {}
    counted = [e for e in ((status.get("schedulingStats") or {}).get("evictions") or []) if isinstance(e, Mapping)]
    parts = [f"{e.get('reason', '?')}" + (f"/{e['underlyingCause']}" if e.get("underlyingCause") else "") + f" ×{int(e.get('count') or 1)}" for e in counted]
    requeues = (status.get("requeueState") or {}).get("count")
    if requeues:
        parts.append(f"requeued {requeues} times")
    last = ks.condition(workload, "Evicted") or {}
    if last.get("status") == "False" and last.get("message"):  # reset on re-admission, Kueue keeps the old message as "Previously: ..."
        parts.append(f"last: {str(last['message']).removeprefix('Previously: ')}")
    return "; ".join(parts)


def kueue_table(job: Mapping[str, Any], workload: Mapping[str, Any] | None, local_queue: Mapping[str, Any] | None) -> Table | None:
    """:func:`kueue_rows` as a two-column grid for ``railtrain describe``; None for a job without the queue-name label."""
    rows = kueue_rows(job, workload, local_queue)
    if not rows:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for label, text in rows:
        grid.add_row(label, text)
    return grid
