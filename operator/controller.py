"""Applying one job's plan: its creates, deletes, releases and quarantines, its one status write, then its Events.

The :class:`~railtrain.operator.reconciler.Reconciler` reads a job and plans it
(pure: :func:`railtrain.operator.job.planner.plan`); the functions here perform
that plan through the fenced verbs of :class:`~railtrain.operator.kube.verbs.Kube`,
in the order that keeps admission all-or-nothing across operator restarts: an
admitted placement (and a restart's hold) is written before any of its pods is
created or deleted, and Events follow only a status write that happened. The
independent per-pod calls of one plan run at once on the caller's pool. Nothing
here keeps state between calls.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from datetime import datetime
from typing import Any

from railtrain.crds import contract, labels, replica_groups
from railtrain.crds.times import format_time
from railtrain.crds import reasons
from railtrain.operator import metrics
from railtrain.operator.job import planner
from railtrain.operator.job import resize
from railtrain.operator.job.lighthouse import LighthouseSeen
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.kube import connection
from railtrain.operator.kube.pool import each
from railtrain.operator.kube.errors import Rejected
from railtrain.operator.kube.verbs import Kube
from railtrain.operator.scheduling import quarantine

log = logging.getLogger("railtrain.operator")


def first_write_left_to_the_pass(job: dict[str, Any], p: planner.Plan) -> bool:
    """Whether ``p`` is a new job's first plan that only writes its first status (pure; a waiting job has no Service).

    Such a plan is left to the admission pass that follows (:meth:`railtrain.operator.reconciler.Reconciler.reconcile_job`).

    Args:
        job: the TrainingJob as read; p: its plan.

    Returns:
        True when the job has no status yet and ``p`` creates no pod or other
        object, deletes, releases and quarantines nothing, and has no Event or log line.
    """
    if job.get("status") is not None:
        return False
    return not (p.create_pods or p.create_objects or p.delete_pods or p.ungate or p.force_delete_pods or p.quarantine or p.events or p.log or p.delete_job)


def apply_or_reject(kube: Kube, job: dict[str, Any], p: planner.Plan, now: datetime, pool: Executor) -> bool:
    """Apply a plan; when the API server refuses one of its objects as invalid, fail the job instead (status, Warning Event).

    Returns:
        False when the job was failed here, or when the plan's status was not written (the job was deleted or
        changed since it was read: :func:`_write_status`), so nothing after it was done.

    Raises:
        railtrain.operator.kube.fence.NotLeader: this operator may no longer write; the rest of the plan is dropped.

    ``pool`` runs the plan's independent per-pod calls at once.
    """
    try:
        return _apply(kube, job, p, now, pool)
    except Rejected as err:
        meta = job["metadata"]
        message = f"the API server refused {err.kind} {err.name} ({err.status}): {err.message}; fix the spec and submit the job again"
        log.warning("%s/%s failed: %s", meta["namespace"], meta["name"], message)
        # Read again: the plan may have written the job's status before the refused create (an admission record).
        current = kube.get_job(meta["namespace"], meta["name"])
        if current is None:
            return False
        status = planner.rejected_status(current, message, now)
        written = kube.patch_status(
            meta["namespace"], meta["name"], planner.status_patch(current.get("status") or {}, status), resource_version=current["metadata"].get("resourceVersion")
        )
        if written:
            kube.emit_event(current, "Warning", planner.REJECTED, message)
        return False


def job_pods(kube: Kube, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's labelled pods, plus any pod holding a rank's name that the label list lacks (read by name).

    A new job's first reconcile (no status yet) skips the reads: it writes the
    job's status before any rank is created. Until the job's first gang is
    admitted (:func:`railtrain.operator.job.planner.gang_ever_created`) the names
    are looked up in the operator's pod caches (:meth:`Kube.pods_named` with
    ``cached=True``) rather than with one GET each: a 256-pod gang's admission
    waited for 256 sequential GETs, all answered 404. A finished pod outside
    the caches that holds a rank's name makes that rank's create fail with
    AlreadyExists, and from then on the job's reconciles read by name.
    """
    meta = job["metadata"]
    pods = kube.list_job_pods(meta["namespace"], meta["name"])
    status = job.get("status")
    missing = planner.missing_names(job, pods) if status else []
    if missing:
        pods.extend(kube.pods_named(meta["namespace"], missing, cached=not planner.gang_ever_created(status)))
    return pods


def lighthouse_of(kube: Kube, job: dict[str, Any]) -> LighthouseSeen | None:
    """A job's Lighthouse pod and Service (``<job>-lighthouse``), read for a job whose stored spec has ``faultTolerance``
    or whose status records replica groups (one GET each; None for any other job: nothing is read or decided)."""
    if not (job.get("spec") or {}).get("faultTolerance") and not (job.get("status") or {}).get("replicaGroups"):
        return None
    meta = job["metadata"]
    name = replica_groups.lighthouse_name(meta["name"])
    return LighthouseSeen(pod=kube.get_pod(meta["namespace"], name), service=kube.get_service(meta["namespace"], name))


def jobs_on_node(kube: Kube, node: str) -> list[tuple[str, str]]:
    """``(namespace, job name)`` of every TrainingJob with a pod bound to ``node``, sorted."""
    return sorted({(p["metadata"]["namespace"], (p["metadata"].get("labels") or {})[contract.LABEL_JOB_NAME]) for p in kube.list_railtrain_pods(node)})


def needs_nodes(job: Observed | dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Whether this pass must see the Nodes: some pod is bound to one (node loss), some is pinned to one but
    not bound yet (a node unusable before binding), ranks are to be created from status.admission (their
    nodes' fabric values), or the job (as observed in this pass, or as read) may grow."""
    seen = observed(job)
    admitted = planner.admission_record(seen.status)
    return resize.wants_to_grow(seen) or (admitted is not None and not admitted.created) or any(
        (p.get("spec") or {}).get("nodeName") or ((p.get("spec") or {}).get("nodeSelector") or {}).get(labels.HOSTNAME) for p in pods
    )


def quarantine_node(kube: Kube, job: dict[str, Any], node_name: str, verdict: str, evidence: str, now: datetime, attempts: int = 5) -> bool:
    """Taint ``node_name`` ``railtrain.dev/quarantined=<verdict>:NoSchedule`` and record an Event on the Node naming the job and evidence.

    Read-modify-write with the node's resourceVersion, retried on conflict
    (:func:`railtrain.operator.kube.connection.update_node`, as ``railtrain node clear`` does). The same patch sets the
    :data:`~railtrain.operator.scheduling.quarantine.ANNOTATION_AT` annotation to ``now``, from which the cluster-wide
    bound is counted.

    Returns:
        True when this call added the taint; False when the node is gone, already quarantined, or kept changing.
    """
    meta = job["metadata"]

    def change(node: dict[str, Any]) -> dict[str, Any] | None:
        taints = quarantine.taints_with(node, verdict)
        return None if taints is None else {"taints": taints, "annotations": {quarantine.ANNOTATION_AT: format_time(now)}}

    outcome, _ = connection.update_node(lambda: kube.get_node(node_name), kube.set_node_taints, change, attempts)
    if outcome == "changed":
        kube.emit_event(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "uid": node_name}},
            "Warning", reasons.NODE_QUARANTINED,
            f"quarantined by TrainingJob {meta.get('namespace')}/{meta['name']}: {evidence}; clear with `railtrain node clear {node_name}`",
        )
        metrics.QUARANTINES.labels(verdict).inc()
        return True
    if outcome == "conflict":
        log.warning("node %s: could not add the quarantine taint after %d attempts (concurrent changes)", node_name, attempts)
    return False


def _apply(kube: Kube, job: dict[str, Any], p: planner.Plan, now: datetime, pool: Executor) -> bool:
    """Apply a plan: its creates, deletes, releases and quarantines, and its one status write (:func:`_write_status`).

    Every write goes through the fenced verbs of :class:`~railtrain.operator.kube.verbs.Kube`, and the status is written
    with the resourceVersion of ``job`` as read, the object the plan was decided on.

    Returns:
        False when the status was not written (the job was deleted or changed since it was read); when the
        status comes first (an admission record, a restart's hold), nothing else is done then.
    """
    namespace = job["metadata"]["namespace"]
    for line in p.log:  # one line per recovery decision (Events expire; the operator's log stays)
        log.info("%s/%s %s", namespace, job["metadata"]["name"], line)
    for name in p.force_delete_pods:
        kube.force_delete_pod(namespace, name)
    if p.delete_service is not None:  # a job whose gang is gone waits without its rendezvous Service (pure rule: phases/housekeeping.py)
        kube.delete_service(namespace, contract.service_name(job["metadata"]["name"]), p.delete_service)
    for node, verdict, evidence in p.quarantine:
        quarantine_node(kube, job, node, verdict, evidence, now)
    if p.quarantine:
        metrics.observe_nodes(kube.list_nodes())
    service = [p.create_service] if p.create_service is not None else []
    with_pods = service if p.status_first and p.create_pods else []  # an admitted gang's Service: with its pods, after the status
    for obj in ([] if with_pods else service) + p.create_objects:
        kube.create(obj)
    if p.status_first and (p.create_pods or p.delete_pods):
        # An admitted placement is recorded before any of its pods exists; a restart's hold before any old pod is deleted.
        if not _write_status(kube, job, p, announce=not p.create_pods):  # a restart's Events come with its status, as before the hold
            return False  # the job is gone or changed since it was read: create and delete nothing
        kube.create_many(p.create_pods + with_pods)  # ranks first
        each([lambda name=name: kube.delete_pod(namespace, name, p.uids.get(name)) for name in p.delete_pods], pool)
        if p.create_pods:
            _announce(kube, job, p)  # GangPlaced/GangCreated once the pods exist, and off the gang's critical path
        return True
    kube.create_many(p.create_pods)
    each([lambda name=name: kube.delete_pod(namespace, name, p.uids.get(name)) for name in p.delete_pods], pool)
    each([lambda name=name: kube.release_pod(namespace, name, p.pin.get(name), p.annotate.get(name)) for name in p.ungate], pool)
    if p.delete_job:
        if kube.delete_job(namespace, job["metadata"]["name"], job["metadata"].get("uid", "")):
            for type_, reason, message in p.events:
                kube.emit_event(job, type_, reason, message)
        return True
    return _write_status(kube, job, p)


def _write_status(kube: Kube, job: dict[str, Any], p: planner.Plan, announce: bool = True) -> bool:
    """Write the plan's status when it changed, then (``announce``) its Events and metrics (:func:`_announce`).

    The patch carries ``job``'s resourceVersion, the version the plan was decided on: when anyone wrote the
    job since (another leader, a user, a newer event this pass did not see), the API server answers 409
    and the decision is dropped, one INFO line; the next reconcile plans again on the newer job.

    Returns:
        False when the job was deleted or changed since it was read (nothing written).
    """
    if not p.status_changed:
        return True
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    if not kube.patch_status(namespace, name, planner.status_patch(job.get("status") or {}, p.status), resource_version=job["metadata"].get("resourceVersion")):
        log.info("%s/%s: status not written: the job was deleted or changed since this pass read it; the next reconcile plans again", namespace, name)
        return False
    if announce:
        _announce(kube, job, p)
    return True


def _announce(kube: Kube, job: dict[str, Any], p: planner.Plan) -> None:
    """The Events and metrics of a status this plan wrote (only call it after a write that happened)."""
    if not p.status_changed:
        return
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    for type_, reason, message in p.events:
        kube.emit_event(job, type_, reason, message)
    metrics.observe_transition(job.get("status") or {}, p.status, job["metadata"].get("creationTimestamp"))
    if p.status.get("goodput") and p.status.get("goodput") != (job.get("status") or {}).get("goodput"):
        metrics.observe_goodput(namespace, name, p.status["goodput"])
