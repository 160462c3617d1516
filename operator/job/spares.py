"""Hot spares of a running gang (pure): which spare pods to create or delete, where they go, and a takeover's writes.

A job with ``spec.spares: N`` (and ``runPolicy.restartInPlace``) keeps N spare pods beside its running gang: each
runs the pod-side supervisor in spare mode (:class:`railtrain.crds.supervisor.Spare`): the image started, the
files torch loads read once, and it waits outside the world until the gang's coordinator gives it a lost node's
rank. Spare pods carry :data:`~railtrain.crds.contract.LABEL_SPARE` instead of a node rank and are not part of the
gang (:func:`railtrain.operator.job.pods.owned` leaves them out), but they are real bound pods, so the ledger
counts their GPUs as taken: a spare's GPUs are the job's.

* **Where**: on free nodes that fit one pod of the gang, not holding one of its ranks, in the narrowest domain the
  gang's nodes share (rack, then block, then anywhere), so a spare that takes a rank keeps the gang inside its
  domain (:func:`choose`). They are created after the gang is Running, by the admission pass, which holds the
  ledger (:meth:`railtrain.operator.reconciler.Reconciler.admission_pass`); a spare taken (or lost) is refilled
  by the next pass the same way.
* **Takeover**: the coordinator (node rank 0's supervisor) decides it and says so in ``GET /ledger``'s
  ``holders``; the operator, reading it with the progress endpoint, makes the pods say it too (:func:`takeover`):
  the spare pod gets the rank's label and loses the spare label, and the lost rank's old pod is deleted (grace
  0: its node is gone). No other pod is touched.
* **Old spares**: spare pods of an earlier gang (a gang restart), or of a job no longer Running, are deleted
  (:func:`stale`); their supervisors would leave on their own once the coordinator is gone, 30 s later.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

from railtrain.crds import contract, supervisor
from railtrain.operator.job import binding, render
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.job.workload import queue_name
from railtrain.operator.job.pods import admitted_nodes, controller_uid, is_gated, pod_phase, rank_of, restart_of
from railtrain.operator.scheduling.nodefit import pod_needs, restrict
from railtrain.operator.scheduling.snapshot import ClusterSnapshot, NodeInfo, pod_node

SPARE_TAKEOVER = "SpareTakeover"
"""Event reason (Normal): a hot spare took a lost node's rank; the other pods were not touched."""


def is_spare(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is a hot spare still waiting (it carries :data:`~railtrain.crds.contract.LABEL_SPARE`)."""
    return contract.LABEL_SPARE in ((pod.get("metadata") or {}).get("labels") or {})


def spare_name(job: str, restarts: int, index: int) -> str:
    """The name of spare ``index`` of the gang with restart count ``restarts``: ``<job>-spare-<restarts>-<index>``."""
    return f"{job}-spare-{restarts}-{index}"


def job_spares(obj: Mapping[str, Any], pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spare pods the job owns (its uid is their controller's), still waiting."""
    uid = obj["metadata"].get("uid")
    return [p for p in pods if is_spare(p) and uid and controller_uid(p) == uid]


def live(seen: Observed, spares: Sequence[dict[str, Any]], down: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Spares of the current gang that still run (or are starting), not being deleted, not on a node in ``down``."""
    return [p for p in spares if restart_of(p) == seen.status.restarts and pod_phase(p) not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp") and pod_node(p) not in down]  # fmt: skip


def down_nodes(nodes: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the nodes whose Ready condition is not True (a spare there is lost: its supervisor went silent too)."""
    out = set()
    for n in nodes:
        ready = next((c for c in (n.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready is None or ready.get("status") != "True":
            out.add(n["metadata"]["name"])
    return frozenset(out)


def wanted(job: Observed | dict[str, Any], pods: Sequence[dict[str, Any]], down: frozenset[str] = frozenset()) -> int:
    """How many spare pods to create for ``job`` now: ``spec.spares`` less its live ones, once its gang is Running
    and released (0 otherwise, and for a job the models refuse)."""
    seen = observed(job)
    if seen.job is None or not seen.job.spec.spares or seen.status.phase != "Running" or seen.meta.get("deletionTimestamp"):
        return 0
    gang = gang_pods(seen, pods)
    if not gang or len(gang) < admitted_nodes(seen.job.spec, gang) or any(is_gated(p) or not pod_node(p) for p in gang):
        return 0
    return max(0, seen.job.spec.spares - len(live(seen, job_spares(seen.obj, pods), down)))


def gang_pods(seen: Observed, pods: Sequence[dict[str, Any]], terminating: bool = False) -> list[dict[str, Any]]:
    """The current gang's rank pods (not spares), not being deleted (``terminating``: those being deleted too)."""
    uid = seen.meta.get("uid")
    return [p for p in pods if not is_spare(p) and uid and controller_uid(p) == uid and restart_of(p) == seen.status.restarts
            and (terminating or not p["metadata"].get("deletionTimestamp"))]  # fmt: skip


def by_rank(job: Observed | dict[str, Any], pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The current gang's rank pods in node-rank order (pure); where a spare took a rank (relabelled), the spare's pod
    comes before the rank's old pod, still listed until it is gone."""
    seen = observed(job)
    name = seen.meta["name"]
    return sorted(gang_pods(seen, pods), key=lambda p: (rank_of(p), p["metadata"]["name"] == contract.pod_name(name, rank_of(p))))


def stale(job: Observed | dict[str, Any], pods: Sequence[dict[str, Any]], down: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Spare pods of ``job`` to delete: an earlier gang's, one on a node in ``down`` (not Ready: it cannot take a rank),
    or every one once the job is not Running (or spares were lowered: the last beyond ``spec.spares``)."""
    seen = observed(job)
    mine = [p for p in job_spares(seen.obj, pods) if not p["metadata"].get("deletionTimestamp")]
    lost = [p for p in mine if pod_node(p) in down]
    mine = [p for p in mine if pod_node(p) not in down]
    keep = seen.job.spec.spares if seen.job is not None and seen.status.phase == "Running" else 0
    current = sorted((p for p in mine if restart_of(p) == seen.status.restarts), key=lambda p: p["metadata"]["name"])
    return lost + [p for p in mine if restart_of(p) != seen.status.restarts] + current[keep:]


def _shared(gang: Sequence[NodeInfo]) -> tuple[str | None, ...]:
    """The gang's domain value at each level where all its nodes share one (None where they do not)."""
    if not gang:
        return ()
    first = gang[0].domains
    return tuple(v if v is not None and all(n.domains[i] == v for n in gang) else None for i, v in enumerate(first))


def choose(cluster: ClusterSnapshot, gang_nodes: Sequence[str], pod: Mapping[str, Any], gpus: int, gpu_resource: str, k: int,
           avoid: frozenset[str] = frozenset()) -> list[str]:  # fmt: skip
    """Nodes for ``k`` spare pods (pure).

    Args:
        cluster: the pass's snapshot (what is free after the pass's own reservations).
        gang_nodes: the nodes of the gang's ranks (never chosen, and the domain to stay in).
        pod: a rendered spare pod (its requests, tolerations, node selectors and affinity must fit the node).
        gpus: accelerators per pod; gpu_resource: their resource name; k: spares wanted.
        avoid: nodes the job avoids (``status.avoidNodes``).

    Returns:
        Up to ``k`` node names, in the narrowest domain the gang shares first (levels narrowest first), then by name;
        fewer when fewer fit.
    """
    view = restrict(cluster, pod_needs(pod, gpu_resource), gpu_resource)
    gang = [view.nodes[n] for n in gang_nodes if n in view.nodes]
    shared = _shared(gang)
    taken = set(gang_nodes) | set(avoid)
    cands = [n for n in view.eligible() if n.name not in taken and not n.short and n.free_gpus >= gpus]

    def depth(n: NodeInfo) -> int:  # how many of the narrowest shared levels the node is in
        same = 0
        for i in reversed(range(len(shared))):
            if shared[i] is None:
                continue
            if i < len(n.domains) and n.domains[i] == shared[i]:
                same += 1
            else:
                break
        return same

    return [n.name for n in sorted(cands, key=lambda n: (-depth(n), n.name))][:k]


def render_spare(seen: Observed, namespace: str, index: int, node: str, nnodes: int | None = None) -> dict[str, Any]:
    """The pod of spare ``index`` of the current gang, bound to ``node`` (ungated, pinned; created by the admission pass;
    ``node`` "": the gated, unpinned pod, whose needs placement checks).

    It is the last rank's pod (same image, command, resources, template and contract) under its own name and
    hostname, labelled :data:`~railtrain.crds.contract.LABEL_SPARE` instead of a node rank, with
    :data:`railtrain.crds.supervisor.ENV_SPARE` naming it, so its supervisor waits as a spare.

    Raises:
        ValueError: the job's spec is not usable (the models refuse it).
    """
    if seen.job is None:
        raise ValueError("the job's spec is not usable")
    from railtrain.operator.job import inplace as job_inplace

    spec, meta, restarts = seen.job.spec, seen.meta, seen.status.restarts
    n = nnodes or spec.nodes  # the admitted gang size (an elastic gang may run below spec.nodes)
    pod = job_inplace.with_spent(render.render_pod(seen.job, namespace, meta.get("uid", ""), n - 1, restarts), seen.status)
    pod = copy.deepcopy(pod)
    name = spare_name(meta["name"], restarts, index)
    labels = {k: v for k, v in pod["metadata"]["labels"].items() if k != contract.LABEL_NODE_RANK} | {contract.LABEL_SPARE: str(index)}
    pod["metadata"] |= {"name": name, "labels": labels}
    pod["spec"]["hostname"] = name
    for c in pod["spec"]["containers"]:
        if c.get("name") == render.CONTAINER_NAME:
            c["env"] = [e for e in c.get("env") or [] if e.get("name") != supervisor.ENV_SPARE] + [{"name": supervisor.ENV_SPARE, "value": name}]
    return binding.admitted_pod(pod, node, render.gang_annotations(spec, n)) if node else pod


def takeover(job: Observed | dict[str, Any], pods: Sequence[dict[str, Any]], holders: Mapping[int, str]) -> tuple[dict[str, dict[str, str | None]], list[str], list[str]]:
    """What the pods must say once the coordinator gave lost ranks to spares (pure).

    Args:
        job: the job as read; pods: its pods (labelled with its name).
        holders: node rank → the spare pod (its name) the coordinator gave it to (``GET /ledger``'s ``holders``).

    Returns:
        ``(relabel, delete, sentences)``: spare pod name → the label changes (the rank's label set, the spare label
        removed: ``None``); the names of the ranks' old pods to delete at once (grace period 0: a lost node's, or
        one already terminating because it was deleted or evicted); one sentence per takeover. Ranks
        already taken (the spare pod already carries the rank) and spares not found are left out.
    """
    seen = observed(job)
    by_name = {p["metadata"]["name"]: p for p in pods if controller_uid(p) == seen.meta.get("uid")}
    relabel: dict[str, dict[str, str | None]] = {}
    delete: list[str] = []
    sentences: list[str] = []
    for rank, name in sorted(holders.items()):
        spare = by_name.get(name)
        if spare is None or restart_of(spare) != seen.status.restarts:
            continue
        # a terminating one too (its pod deleted or evicted): deleted at once
        old = [p for p in gang_pods(seen, pods, terminating=True) if rank_of(p) == rank and p["metadata"]["name"] != name]
        if is_spare(spare):
            relabel[name] = {contract.LABEL_NODE_RANK: str(rank), contract.LABEL_SPARE: None}
        delete += [p["metadata"]["name"] for p in old]
        if is_spare(spare) or old:
            was = ", ".join(f"{p['metadata']['name']} on {pod_node(p) or '?'}" for p in old) or "its pod already gone"
            sentences.append(f"hot spare {name} on {pod_node(spare) or '?'} took node rank {rank} ({was}); the other pods were not touched")
    return relabel, delete, sentences


def plan_spares(
    jobs: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]], taken: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]],
    levels: tuple[str, ...],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:  # fmt: skip
    """One admission pass's spare work (pure): the spare pods to create, bound, and the stale ones to delete.

    Args:
        jobs: the TrainingJobs as read; pods: every pod labelled with a job's name.
        taken: the ledger's pods (every non-terminal pod, plus the pass's promised ones).
        nodes: every v1 Node; levels: the topology levels, widest first (one snapshot per GPU resource name is built
            from ``taken``, and each spare chosen is reserved in it for the next job's).

    Returns:
        ``(create, delete, short)``: spare pods to create; spare pods to delete; one sentence per job that wants
        more spares than free nodes fit (``namespace/job: ...``).
    """
    from railtrain.operator.scheduling.snapshot import snapshot
    from railtrain.operator.scheduling.snapshot import pod_requests

    clusters: dict[str, ClusterSnapshot] = {}
    create: list[dict[str, Any]] = []
    delete: list[dict[str, Any]] = []
    short: list[str] = []
    down = down_nodes(nodes)
    for job in jobs:
        seen = observed(job)
        delete += stale(seen, pods, down)
        k = wanted(seen, pods, down)
        if not k or seen.job is None or queue_name(seen.obj):
            continue  # a Kueue job's capacity is Kueue's to admit: its Workload has no spares (docs/operator.md, Hot spares)
        spec, meta = seen.job.spec, seen.meta
        namespace = meta.get("namespace", "")
        resource = spec.resources.gpu_resource_name
        if resource not in clusters:
            clusters[resource] = snapshot(nodes, taken, resource, levels)
        cluster = clusters[resource]
        names = {p["metadata"]["name"] for p in pods}  # a spare that took a rank keeps its name: never reused
        indices = [i for i in range(len(names) + k) if spare_name(meta["name"], seen.status.restarts, i) not in names][:k]
        gang = gang_pods(seen, pods)
        size = admitted_nodes(spec, gang)
        try:
            probe = render_spare(seen, namespace, indices[0], "", size)
        except ValueError as err:  # a spec the renderer refuses: this job gets no spare; the others still do
            short.append(f"{namespace}/{meta['name']}: no spare pod can be rendered: {err}")
            continue
        gang_nodes = [n for p in gang if (n := pod_node(p))]
        chosen = choose(cluster, gang_nodes, probe, spec.resources.gpus, resource, k, frozenset(seen.status.avoid_nodes))
        if len(chosen) < k:
            short.append(f"{namespace}/{meta['name']}: {len(chosen)} of {k} spare pod(s) fit on free nodes now")
        requests = {r: v for r, v in pod_requests(probe).items() if r != resource}
        clusters[resource] = cluster.reserve(chosen, spec.resources.gpus, requests, holder=f"{namespace}/{meta['name']}")
        create += [render_spare(seen, namespace, i, node, size) for i, node in zip(indices, chosen)]
    return create, delete, short
