"""What a job's pods say about its gang (pure): rank, restart, phase, gate, ownership, admitted size.

The pods are the record of what was decided: a pod without the gang gate has
been released, and a released pod's :data:`~railtrain.crds.contract.ANNOTATION_NNODES`
is the size the gang was admitted with. Reading these back, rather than trusting
a status the operator may have crashed before writing, keeps admission correct
across operator restarts.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.scheduling`` and
``railtrain.operator.job`` modules; never kopf or the kubernetes client.
"""

from __future__ import annotations

from typing import Any


from railtrain.crds import contract, reasons
from railtrain.crds.api import TrainingJobSpec
from railtrain.crds.podtemplate import TRAINER
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.scheduling.snapshot import pod_node



NAME_TAKEN = (reasons.POD_NAME_TAKEN, reasons.SERVICE_NAME_TAKEN)
"""Scheduled reasons of a job whose pod or Service names are held by objects it does not own (operator/job/phases/ownership.py)."""


def restart_of(pod: dict[str, Any]) -> int:
    """The restart count a pod belongs to (its annotation), -1 when malformed."""
    try:
        return int((pod["metadata"].get("annotations") or {}).get(contract.ANNOTATION_RESTART, "0"))
    except ValueError:
        return -1


def rank_of(pod: dict[str, Any]) -> int:
    """A pod's node rank (its label), -1 when malformed."""
    try:
        return int((pod["metadata"].get("labels") or {}).get(contract.LABEL_NODE_RANK, "-1"))
    except ValueError:
        return -1


def pod_phase(pod: dict[str, Any]) -> str:
    """``status.phase`` of the pod itself, Pending when absent: whether it still runs (and holds its node), not how its rank ended."""
    return (pod.get("status") or {}).get("phase", "Pending")


def trainer_exit(pod: dict[str, Any]) -> int | None:
    """The exit code of the pod's trainer container (:data:`~railtrain.crds.podtemplate.TRAINER`) once it has terminated, else None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == TRAINER:
            term = (cs.get("state") or {}).get("terminated")
            if term is None:
                return None
            try:
                return int(term.get("exitCode", contract.EXIT_FAILED))
            except (TypeError, ValueError):
                return contract.EXIT_FAILED
    return None


def trainer_message(pod: dict[str, Any]) -> str:
    """The training container's termination message of ``pod`` ("" while it runs or when it wrote none)."""
    return next((((cs.get("state") or {}).get("terminated") or {}).get("message") or "" for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("name") == TRAINER), "")


def phase(pod: dict[str, Any]) -> str:
    """The phase of the pod's rank: decided by its trainer container alone, never by a sidecar.

    A rank is Succeeded once its trainer container exited 0 and Failed once it
    exited non-zero, whatever the template's sidecars do (regular containers,
    or native sidecars: init containers with ``restartPolicy: Always``): a
    metrics exporter that runs forever keeps the pod Running, and one that
    crashed makes a pod whose trainer exited 0 Failed (Kubernetes pod phases,
    "Pod lifecycle"; issue 15, kind 2). Before the trainer has terminated, or
    when the pod failed without it terminating (evicted, node lost), it is the
    pod's own phase (:func:`pod_phase`).

    Returns:
        Pending, Running, Succeeded, Failed or Unknown.
    """
    code = trainer_exit(pod)
    if code is not None:
        return "Succeeded" if code == 0 else "Failed"
    return pod_phase(pod)


def finished_but_running(pod: dict[str, Any]) -> bool:
    """Whether the pod's rank has finished (its trainer terminated) while the pod still runs (a sidecar has not ended)."""
    return trainer_exit(pod) is not None and pod_phase(pod) not in ("Succeeded", "Failed")


def is_gated(pod: dict[str, Any]) -> bool:
    """Whether the pod still carries railtrain's gang scheduling gate."""
    return any(g.get("name") == contract.SCHEDULING_GATE for g in (pod["spec"].get("schedulingGates") or []))


def controller_uid(pod: dict[str, Any]) -> str | None:
    """The uid of the pod's controller ownerReference (the one with ``controller: true``), None when it has none."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def owned(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods whose controller ownerReference is this job's uid.

    The Kubernetes controller convention: a controller acts only on objects it
    owns, and labels only narrow the list (a pod carrying the job's labels but
    not its ownerReference is someone else's, and is never adopted).

    A hot spare still waiting (:data:`~railtrain.crds.contract.LABEL_SPARE`) is the job's but not part of its
    gang, and is left out (:mod:`railtrain.operator.job.spares` keeps them); a spare that took a rank has lost
    that label and is in.
    """
    uid = obj["metadata"].get("uid")
    return [p for p in pods if uid and controller_uid(p) == uid and contract.LABEL_SPARE not in (p["metadata"].get("labels") or {})]


def rank_names(obj: dict[str, Any]) -> list[str]:
    """The deterministic pod names of the job's ranks, ``<job>-<rank>`` for every rank below ``spec.nodes``."""
    try:
        nodes = int((obj.get("spec") or {}).get("nodes", 1))
    except (TypeError, ValueError):
        return []
    return [contract.pod_name(obj["metadata"]["name"], r) for r in range(max(0, min(nodes, 4096)))]


def in_the_way(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods not owned by the job that hold one of its ranks' names, by name."""
    names, mine = set(rank_names(obj)), {id(p) for p in owned(obj, pods)}
    return sorted((p for p in pods if id(p) not in mine and p["metadata"]["name"] in names), key=lambda p: p["metadata"]["name"])


def current_gang(job: Observed | dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods of the job's current restart count (``status.restarts`` of ``job``, as observed or as read), not being deleted, ordered by rank.

    Where two pods carry one rank (a hot spare labelled with the rank it took, before the rank's old pod is deleted:
    :func:`railtrain.operator.job.spares.takeover`), the newer one holds it."""
    restarts = observed(job).status.restarts
    live = [p for p in pods if restart_of(p) == restarts and not p["metadata"].get("deletionTimestamp")]
    by_rank: dict[int, dict[str, Any]] = {}
    for p in sorted(live, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        by_rank[rank_of(p)] = p  # two pods of one rank: a hot spare just took it (the newer), the old one is being deleted
    return sorted(by_rank.values(), key=rank_of)


def admitted_nodes(spec: TrainingJobSpec, gang: list[dict[str, Any]]) -> int:
    """The gang size: the admitted count a released pod carries, else ``spec.nodes`` (not yet admitted).

    Returns:
        An int in ``[1, spec.nodes]``; a malformed annotation falls back to ``spec.nodes``.
    """
    for pod in gang:
        if not is_gated(pod):
            try:
                n = int((pod["metadata"].get("annotations") or {}).get(contract.ANNOTATION_NNODES, spec.nodes))
            except ValueError:
                return spec.nodes
            return n if 1 <= n <= spec.nodes else spec.nodes
    return spec.nodes


def ended_pods(job: Observed | dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The current gang's pods that ended (Succeeded or Failed) while their job goes on, as pods that still hold their node (pure).

    A pod in a terminal phase holds nothing in kube-scheduler's accounting, but its job has not
    decided yet what follows: the rank that failed is about to restart the gang (whose
    ``status.hold`` then keeps the node), the rank that finished waits for its peers. Counting
    them until the job's status moves on closes the window in which another job could be given
    the node of a rank that just failed. A job that is finished, suspended or being deleted holds
    nothing.

    Args:
        job: the TrainingJob as observed in this pass, or as read; pods: its pods.

    Returns:
        Copies of those pods with phase ``Running`` (what the admission pass's ledger counts).
    """
    seen = observed(job)
    status = seen.status
    if status.phase in (*cond.TERMINAL_PHASES, cond.SUSPENDED) or seen.meta.get("deletionTimestamp"):
        return []
    return [
        p | {"status": {**(p.get("status") or {}), "phase": "Running"}}
        for p in owned(seen.obj, pods)
        if pod_phase(p) in ("Succeeded", "Failed") and restart_of(p) == status.restarts and pod_node(p)
    ]


def lingering(job: Observed | dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Whether a pod of the job (as observed, or as read) not in its current gang (an earlier restart's, or being deleted) still holds a rank's name."""
    seen = observed(job)
    return any(restart_of(p) != seen.status.restarts or p["metadata"].get("deletionTimestamp") for p in owned(seen.obj, pods))
