"""``railtrain plan``: where a job would go now, or why not, decided by the operator's own admission code (pure).

:func:`plan` takes a validated manifest and the cluster's objects (nodes, every
pod, every TrainingJob: live from the API server, or a file written by
``railtrain snapshot``) through the operator's own admission pass
(:func:`railtrain.operator.job.admit.admission_pass`: the queue and the capacity promised
to admitted and restarting gangs, one snapshot and one schedule per GPU resource name),
with the new job last in its priority (it would be created now). Nothing is written anywhere.

The answer is a :class:`PlanResult`: the operator's decision for the job
(a Placement with nodes and domains, or a Refusal with its sentence), why
each node is or is not a candidate (:func:`railtrain.operator.scheduling.nodefit.restrict`'s
filters), and the jobs ahead of it in the queue. A job labelled
``kueue.x-k8s.io/queue-name`` is Kueue's to admit (docs/kueue.md): it is not
planned onto nodes; the answer names its LocalQueue and what its Workload would
request (:class:`KueueRequest`, from the operator's own
:func:`railtrain.operator.job.workload.desired`).

May import: ``railtrain.crds`` and the operator's pure wings (``operator/job``, ``operator/scheduling``); never kopf or the kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from railtrain.crds import times
from railtrain.crds.kueue import PRIORITY_LABEL
from railtrain.operator.job import admit, ledger, workload
from railtrain.operator.job.observed import observe_job
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.scheduling.nodefit import restrict
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.queue import AVOIDED, queue_key
from railtrain.crds.labels import HOSTNAME

SNAPSHOT_KIND = "RailtrainClusterSnapshot"
"""``kind`` of a file written by ``railtrain snapshot``."""


@dataclass(frozen=True)
class NodeRow:
    """One node as the job sees it: ``verdict`` is "fits" or why not (a filter's words)."""

    name: str
    free_gpus: int
    gpus: int
    verdict: str
    domains: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class KueueRequest:
    """What the Workload of a Kueue job would ask Kueue for.

    Attributes:
        local_queue: the LocalQueue its label names; workload: the Workload's name (the job's uid prefix once created).
        pods: the pod set's count (``spec.nodes``).
        resources: per container of the pod, its requests (limits where a resource has no request, as Kueue counts them).
        topology: the pod set's ``topologyRequest`` (empty without topology levels).
        priority: the WorkloadPriorityClass of ``kueue.x-k8s.io/priority-class``, else ``spec.priority`` (a number).
    """

    local_queue: str
    workload: str
    pods: int
    resources: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    topology: Mapping[str, Any]
    priority: str


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` found.

    Attributes:
        job: ``namespace/name``.
        result: the operator's decision (``Placement`` or ``Refusal``), or None when the job would not enter the queue.
        not_queued: why it would not enter the queue ("" when it would).
        nodes: every node with the job's filters applied, fitting ones first.
        levels: the topology levels (node label keys) of ``NodeRow.domains``.
        ahead: ``(job, priority, decision in words)`` of the waiting jobs before it in the queue.
        kueue: for a job Kueue admits, what its Workload would request (``result`` is then None).
    """

    job: str
    result: Placement | Refusal | None
    not_queued: str = ""
    nodes: tuple[NodeRow, ...] = ()
    levels: tuple[str, ...] = ()
    ahead: tuple[tuple[str, int, str], ...] = field(default_factory=tuple)
    kueue: KueueRequest | None = None


def make_snapshot(objects: Mapping[str, list[dict[str, Any]]], taken: datetime) -> dict[str, Any]:
    """The document ``railtrain snapshot`` writes: the objects without ``managedFields``, and when they were read."""

    def clean(o: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (o.get("metadata") or {}).items() if k != "managedFields"}
        return {**o, "metadata": meta}

    return {
        "kind": SNAPSHOT_KIND,
        "taken": times.format_micro_time(taken),
        **{key: [clean(o) for o in objects.get(key) or []] for key in ("nodes", "pods", "trainingjobs")},
    }


def read_snapshot(doc: Any, source: str) -> dict[str, list[dict[str, Any]]]:
    """The objects of a ``railtrain snapshot`` document.

    Raises:
        ValueError: it is not one (the sentence names the file and what it lacks).
    """
    if not isinstance(doc, dict) or doc.get("kind") != SNAPSHOT_KIND:
        raise ValueError(f"--snapshot {source}: not a cluster snapshot (kind {SNAPSHOT_KIND}); write one with 'railtrain snapshot > FILE'")
    out = {}
    for key in ("nodes", "pods", "trainingjobs"):
        items = doc.get(key)
        if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("metadata"), dict) for i in items):
            raise ValueError(f"--snapshot {source}: {key} must be a list of objects with metadata")
        out[key] = items
    return out


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def plan(manifest: dict[str, Any], namespace: str, objects: Mapping[str, list[dict[str, Any]]], levels: tuple[str, ...], now: datetime) -> PlanResult:
    """Decide, as the operator's next admission pass would, where the job in ``manifest`` goes.

    Args:
        manifest: a validated TrainingJob manifest (a mapping).
        namespace: the namespace it would be created in.
        objects: ``nodes``, ``pods`` (every namespace) and ``trainingjobs`` of the cluster.
        levels: the operator's topology levels, widest first.
        now: the time of the pass (the new job is created at it, so it is last among equal priorities).

    Returns:
        A :class:`PlanResult`. A job of the same name and namespace in
        ``objects`` is replaced by the manifest (planned as if created anew).
        A job labelled ``kueue.x-k8s.io/queue-name`` is not planned onto nodes: ``result`` is None and
        ``kueue`` says what its Workload would request (:func:`kueue_request`).
    """
    meta = {**(manifest.get("metadata") or {}), "namespace": namespace, "uid": "", "creationTimestamp": times.format_micro_time(now)}
    new = {**manifest, "metadata": meta, "status": {}}
    me = f"{namespace}/{meta.get('name', '')}"
    if workload.queue_name(new) is not None:  # Kueue's to admit: railtrain places it only inside Kueue's admission
        try:
            return PlanResult(me, None, "", kueue=kueue_request(new, levels))
        except ValueError:
            return PlanResult(me, None, "the operator would not queue it (its spec has a problem the operator refuses; 'railtrain validate' names it)")
    every = objects.get("pods") or []
    # the manifest is planned as if created anew: the pods of a job it replaces are not its own (they still hold capacity)
    labelled = [p for job, pods in ledger.by_job(every).items() if job != me for p in pods]
    active = [p for p in every if ((p.get("status") or {}).get("phase")) not in ("Succeeded", "Failed")]
    others = [j for j in objects.get("trainingjobs") or [] if _key(j) != _key(new)]
    found = admit.admission_pass([*others, new], labelled, active, objects.get("nodes") or [], now, PlanSettings(levels=levels))  # the operator's own pass
    mine = found.queue.waiting[me][2] if me in found.queue.waiting else None
    if mine is None:
        suspended = ((new.get("spec") or {}).get("runPolicy") or {}).get("suspend")
        why = "it is suspended (spec.runPolicy.suspend): it takes no turn in the queue until resumed" if suspended else "the operator would not queue it (its spec has a problem the operator refuses; 'railtrain validate' names it)"
        return PlanResult(me, None, why)
    snap = found.snapshots[mine.gpu_resource]
    ordered = sorted(found.requests(mine.gpu_resource), key=queue_key)
    position = next(i for i, r in enumerate(ordered) if r.job == me)
    by_job = {d.job: d.result for d in found.decisions}
    ahead = tuple((r.job, r.priority, _said(by_job[r.job])) for r in ordered[:position])
    seen = restrict(snap.excluding(mine.avoid, AVOIDED), mine.needs, mine.gpu_resource)
    rows = []
    for node in seen.nodes.values():
        if not node.eligible:
            verdict = node.why_ineligible
        elif node.gpus < mine.gpus_per_node:
            verdict = f"fewer than {mine.gpus_per_node} GPUs allocatable"
        elif node.free_gpus < mine.gpus_per_node:
            verdict = f"{node.free_gpus} of {node.gpus} GPUs free, needs {mine.gpus_per_node}"
        elif node.short:
            verdict = node.short
        else:
            verdict = "fits"
        rows.append(NodeRow(node.name, node.free_gpus, node.gpus, verdict, node.domains))
    rows.sort(key=lambda r: (r.verdict != "fits", tuple(d or "" for d in r.domains), r.name))
    return PlanResult(me, by_job[me], "", tuple(rows), snap.levels, ahead)


def kueue_request(job: dict[str, Any], levels: tuple[str, ...]) -> KueueRequest:
    """What the Workload of the Kueue job ``job`` (labelled ``kueue.x-k8s.io/queue-name``) would request (pure).

    Raises:
        ValueError: the job is not Kueue's, or its spec cannot become pods.
    """
    seen = observe_job(job)
    usable = seen.usable
    want = workload.desired(seen, levels, workload.Priority(int(usable.spec.priority or 0) if usable is not None else 0))
    podset = want["spec"]["podSets"][0]
    resources = []
    for container in (podset["template"].get("spec") or {}).get("containers") or []:
        limits, requests = (container.get("resources") or {}).get("limits") or {}, (container.get("resources") or {}).get("requests") or {}
        asked = {**limits, **requests}
        if asked:
            resources.append((str(container.get("name", "")), tuple(sorted((k, str(v)) for k, v in asked.items()))))
    label = ((job.get("metadata") or {}).get("labels") or {}).get(PRIORITY_LABEL)
    priority = f"WorkloadPriorityClass {label}" if label else str(want["spec"]["priority"])
    name = want["metadata"]["name"] if (job.get("metadata") or {}).get("uid") else f"{want['metadata']['name']}-<uid prefix>"  # not created yet
    return KueueRequest(want["spec"]["queueName"], name, int(podset["count"]), tuple(resources),
                        dict(podset.get("topologyRequest") or {}), priority)


def kueue_sentences(job: str, request: KueueRequest) -> list[str]:
    """``railtrain plan``'s lines for a job Kueue admits: whose it is, then the Workload's request (pod count, resources per pod, topology, priority)."""
    topo = request.topology
    mode = next((m for m in ("required", "preferred") if topo.get(m)), None)
    where = f"{mode} {topo[mode]}" if mode else ("unconstrained" if topo.get("unconstrained") else "none (no topology levels)")
    per_pod = "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in asked) for name, asked in request.resources) or "nothing"
    return [
        f"{job} is Kueue's to admit (label kueue.x-k8s.io/queue-name): railtrain does not plan it onto nodes; once Kueue admits its Workload "
        f"from LocalQueue {request.local_queue}, railtrain places the gang inside Kueue's topology assignment.",
        f"Its Workload ({request.workload}) would request {request.pods} pods (pod set {workload.PODSET}), each {per_pod}; "
        f"topology {where}; priority {request.priority}.",
    ]


def _said(result: Placement | Refusal) -> str:
    if isinstance(result, Placement):
        return f"placed first ({len(result.nodes)} nodes)"
    return f"waits too ({result.reason})"


def plan_view(result: PlanResult) -> Any:
    """The rich renderable of a :class:`PlanResult`: the decision in one sentence, the queue ahead, and the node table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from railtrain.cli.views import _label_column

    if result.kueue is not None:
        return Group(*(Text(line) for line in kueue_sentences(result.job, result.kueue)))
    if result.result is None:
        return Text(f"{result.job} would not be admitted: {result.not_queued}", style="yellow")
    parts: list[Any] = []
    if isinstance(result.result, Placement):
        parts.append(Text(f"{result.job} would be admitted now: {result.result.message()}", style="green"))
        table = Table(box=None, pad_edge=False, header_style="bold", title="Placement", title_justify="left", title_style="bold")
        table.add_column("RANK", justify="right")
        table.add_column("NODE", overflow="fold")
        levels = [k for k in result.levels if k != HOSTNAME and any(k in d for d in result.result.domains)]
        for level in levels:
            table.add_column(_label_column(level), overflow="fold")
        for rank, node in enumerate(result.result.nodes):
            domains = result.result.domains[rank] if rank < len(result.result.domains) else {}
            table.add_row(str(rank), node, *(domains.get(level, "") for level in levels))
        parts += [Text(""), table]
    else:
        parts.append(Text(f"{result.job} would wait: {result.result.reason}: {result.result.message}", style="yellow"))
    if result.ahead:
        table = Table(box=None, pad_edge=False, header_style="bold", title="Ahead in the queue", title_justify="left", title_style="bold")
        for column in ("JOB", "PRIORITY", "THIS PASS"):
            table.add_column(column)
        for job, priority, said in result.ahead:
            table.add_row(job, str(priority), said)
        parts += [Text(""), table]
    if result.nodes:
        table = Table(box=None, pad_edge=False, header_style="bold", title="Nodes", title_justify="left", title_style="bold")
        table.add_column("NODE", overflow="fold")
        table.add_column("GPUS FREE", justify="right", no_wrap=True)
        # the narrowest level above the node (e.g. the rack) names the domain; wider ones follow from it
        named = [i for i, k in enumerate(result.levels) if k != HOSTNAME and any(i < len(r.domains) and r.domains[i] for r in result.nodes)]
        shown = named[-1:]
        for i in shown:
            table.add_column(_label_column(result.levels[i]), overflow="fold")
        table.add_column("FOR THIS JOB", overflow="fold")
        for row in result.nodes:
            table.add_row(row.name, f"{row.free_gpus}/{row.gpus}", *((row.domains[i] or "") for i in shown), row.verdict)
        parts += [Text(""), table]
    return Group(*parts)


def as_data(result: PlanResult) -> dict[str, Any]:
    """``-o json|yaml`` of ``railtrain plan``: the decision, the queue ahead and the nodes as plain data."""
    decision: dict[str, Any]
    if result.kueue is not None:
        k = result.kueue
        decision = {"admitted": False, "reason": "KueueAdmits", "message": kueue_sentences(result.job, k)[0],
                    "kueue": {"localQueue": k.local_queue, "workload": k.workload, "pods": k.pods,
                              "resourcesPerPod": {name: dict(asked) for name, asked in k.resources}, "topologyRequest": dict(k.topology), "priority": k.priority}}
    elif isinstance(result.result, Placement):
        decision = {"admitted": True, "reason": result.result.reason, "message": result.result.message(), "nodes": list(result.result.nodes),
                    "domains": [dict(d) for d in result.result.domains], "topology": dict(result.result.summary)}
    elif isinstance(result.result, Refusal):
        decision = {"admitted": False, "reason": result.result.reason, "message": result.result.message}
    else:
        decision = {"admitted": False, "reason": "NotQueued", "message": result.not_queued}
    return {
        "job": result.job,
        "decision": decision,
        "ahead": [{"job": j, "priority": p, "thisPass": s} for j, p, s in result.ahead],
        "nodes": [{"name": r.name, "freeGpus": r.free_gpus, "gpus": r.gpus, "verdict": r.verdict,
                   "domains": {k: v for k, v in zip(result.levels, r.domains) if v is not None}} for r in result.nodes],
    }
