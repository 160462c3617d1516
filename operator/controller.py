"""Reconciles and admission passes: read, plan (pure), apply, write status once, emit Events.

Two entry points:

* :func:`reconcile_job` brings one job one step closer to its desired state
  (creates its gated gang, follows pod phases, restarts, times out); when the
  job waits for nodes it asks for an admission pass;
* :func:`admission_pass` lists every job, pod and node once, runs the pure
  :func:`railtrain.operator.scheduling.queue.schedule` over all waiting jobs, and
  releases each ready gang it admitted (pin, annotate, ungate) and records each
  refusal, job by job.

Concurrency rules:

* one lock per job, so the pod-event, job-event, resync and admission paths
  never act on the same job at once;
* one process-wide scheduling lock around a whole admission pass (snapshot →
  schedule → pin), taken before any job lock and never while holding one, so
  two passes never count the same free GPUs. The pins themselves (nodeSelectors
  on unbound pods) are the ledger of promised capacity that the next snapshot
  subtracts, which keeps admission all-or-nothing across jobs and across
  operator restarts;
* requests for a pass coalesce: a caller whose request predates the start of
  a pass that ran while it waited skips its own pass.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from datetime import datetime, timezone
from typing import Any

from railtrain.crds import contract, labels
from railtrain.crds.times import format_time
from railtrain.crds.fabric import FabricProfile
from railtrain.crds import reasons
from railtrain.operator import metrics
from railtrain.operator.scheduling import queue as admission
from railtrain.operator.kube import connection as kubeclient
from railtrain.operator.job import ledger
from railtrain.operator.scheduling import quarantine
from railtrain.operator.job import planner
from railtrain.operator.job import resize
from railtrain.operator.scheduling import snapshot as cluster_model
from railtrain.operator.kube.fence import NotLeader
from railtrain.operator.kube.verbs import Kube, Rejected, describe, each
from railtrain.operator.scheduling.placement import PINNED_NODE_UNAVAILABLE, GangRequest, Placement, Refusal
from railtrain.operator.scheduling.placement import with_node_values as placement_values
from railtrain.operator.scheduling.topology import DEFAULT_LEVELS
from railtrain.operator.coalescer import Coalescer

log = logging.getLogger("railtrain.operator")

_job_locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_job_locks_guard = threading.Lock()
_scheduling_lock = threading.Lock()
_passes_started = 0


def _lock_for(namespace: str, name: str) -> threading.Lock:
    with _job_locks_guard:
        return _job_locks[(namespace, name)]


RECONCILES = Coalescer()
"""The event handlers' reconcile requests, coalesced per job (:mod:`railtrain.operator.coalescer`)."""


def job_lock(namespace: str, name: str) -> threading.Lock:
    """The lock every path that writes this job's status holds (reconciles, admission decisions, progress writes)."""
    return _lock_for(namespace, name)


def _now(now: datetime | None) -> datetime:
    return now or datetime.now(timezone.utc)


def reconcile_job(
    kube: Kube,
    namespace: str,
    name: str,
    now: datetime | None = None,
    levels: tuple[str, ...] = DEFAULT_LEVELS,
    admit: bool = True,
    watch_namespace: str | None = None,
    fabric: FabricProfile | None = None,
    max_quarantines_per_hour: int | None = None,
    coalesce: bool = False,
) -> planner.Plan | None:
    """Bring one job one step closer to its desired state; run an admission pass if it waits for nodes.

    Args:
        kube: API verbs.
        namespace, name: the TrainingJob.
        now: the current time (UTC); defaults to the wall clock.
        levels: the operator's topology levels, widest first.
        admit: run an admission pass when the job waits (the resync runs one
            pass after reconciling every job instead).
        watch_namespace: the operator's ``--namespace``; the pass admits only its jobs.
        fabric: the operator's fabric profile (:mod:`railtrain.crds.fabric`), rendered into new pods.
        max_quarantines_per_hour: the platform's bound on nodes quarantined per hour in the whole cluster (None: none).
        coalesce: an event's request (:data:`RECONCILES`): when a reconcile of this
            job already waits for the job's lock, return at once and let it run.

    Returns:
        The applied plan, or None when the job no longer exists or the request was coalesced.

    Raises:
        railtrain.operator.kube.errors.ApiError: the API server refused a call
            other than the tolerated 404/409 (the handler logs one line; the next
            event or resync retries). A pod or Service refused as invalid
            (400/422, :class:`~railtrain.operator.kube.verbs.Rejected`) is not raised:
            the job fails with reason PodRejected and a Warning Event.
        urllib3.exceptions.HTTPError: no answer from the API server.
    """
    started = time.monotonic()
    try:
        return _reconcile_job(kube, namespace, name, _now(now), levels, admit, watch_namespace, fabric, max_quarantines_per_hour, coalesce)
    except Exception as err:
        metrics.RECONCILE_ERRORS.labels(metrics.error_kind(err)).inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


def _reconcile_job(
    kube: Kube, namespace: str, name: str, at: datetime, levels: tuple[str, ...], admit: bool, watch_namespace: str | None,
    fabric: FabricProfile | None = None, max_quarantines_per_hour: int | None = None, coalesce: bool = False,
) -> planner.Plan | None:
    """:func:`reconcile_job` at time ``at``, read once for the whole pass."""
    lock = _lock_for(namespace, name)
    if coalesce:
        ran, done = RECONCILES.run((namespace, name), lock, lambda: _reconcile_locked(kube, namespace, name, at, levels, watch_namespace, fabric, max_quarantines_per_hour, admit))
        if not ran:
            return None
    else:
        with lock:
            done = _reconcile_locked(kube, namespace, name, at, levels, watch_namespace, fabric, max_quarantines_per_hour, admit)
    p, waits = done
    if waits and admit:
        admission_pass(kube, at, levels, watch_namespace, fabric)
    return p


def _reconcile_locked(
    kube: Kube, namespace: str, name: str, at: datetime, levels: tuple[str, ...], watch_namespace: str | None,
    fabric: FabricProfile | None, max_quarantines_per_hour: int | None, admit: bool = False,
) -> tuple[planner.Plan | None, bool]:
    """Read, plan and apply one job under its lock; returns the plan (None: the job is gone) and whether the job waits for admission.

    A new job (no status yet) that waits and whose plan only writes its first
    status is not applied when ``admit``: the admission
    pass that follows at once writes the job's first status itself (the placement
    with the Service and the pods, or the refusal), so a gang admitted on arrival
    costs one status write, not two, and no Service create before its pods
    (:func:`first_write_left_to_the_pass`). The job was just read into the
    operator's cache, so the pass lists it.
    """
    job = kube.read_job(namespace, name)
    if job is None or job["metadata"].get("deletionTimestamp"):
        return None, False
    pods = _snapshot_pods(kube, job)
    nodes = kube.list_nodes() if _needs_nodes(job, pods) else None
    grow_to = None
    if nodes is not None and resize.wants_to_grow(job):
        _, found = _waiting(kube, at, watch_namespace)
        queue = [request for _, _, request in found.waiting.values()]
        held = found.holds_for(planner.parse_job(job).spec.resources.gpu_resource_name)
        grow_to = resize.grow_size(job, nodes, kube.list_active_pods() + found.promised, levels, queue, held)
    p = planner.plan(job, pods, kube.get_service(namespace, name), at, nodes=nodes, grow_to=grow_to, fabric=fabric, quarantine_limit=max_quarantines_per_hour)
    waits = planner.gang_request(job, pods, at) is not None
    if admit and waits and first_write_left_to_the_pass(job, p):
        return p, True
    if not _apply_or_reject(kube, job, p, at):
        return p, False
    return p, waits


def first_write_left_to_the_pass(job: dict[str, Any], p: planner.Plan) -> bool:
    """Whether ``p`` is a new job's first plan that only writes its first status (pure; a waiting job has no Service).

    Such a plan is left to the admission pass that follows (:func:`_reconcile_locked`).

    Args:
        job: the TrainingJob as read; p: its plan.

    Returns:
        True when the job has no status yet and ``p`` creates no pod or other
        object, deletes, releases and quarantines nothing, and has no Event or log line.
    """
    if job.get("status") is not None:
        return False
    return not (p.create_pods or p.create_objects or p.delete_pods or p.ungate or p.force_delete_pods or p.quarantine or p.events or p.log or p.delete_job)


def admission_pass(
    kube: Kube, now: datetime | None = None, levels: tuple[str, ...] = DEFAULT_LEVELS, watch_namespace: str | None = None,
    fabric: FabricProfile | None = None,
) -> list[admission.Decision]:
    """Admit waiting gangs across all jobs in queue order, and apply the decisions of ready ones.

    Args:
        kube: API verbs.
        now: the current time (UTC); defaults to the wall clock.
        levels: the operator's topology levels, widest first.
        watch_namespace: admit only this namespace's jobs (an operator run with
            ``--namespace``); capacity is still counted over every namespace.
        fabric: the operator's fabric profile: each released rank gets its
            node's per-node values as pod annotations (:func:`with_node_values`).

    Returns:
        Every decision of the pass (also those of jobs not ready to be released),
        or ``[]`` when a pass that started after this call was made already ran.
    """
    global _passes_started
    seen = _passes_started
    with _scheduling_lock:
        if _passes_started > seen:
            return []
        _passes_started += 1
        started = time.monotonic()
        try:
            return _admission_pass(kube, now, levels, watch_namespace, fabric)
        finally:
            metrics.ADMISSION_PASS_SECONDS.observe(time.monotonic() - started)


def _admission_pass(
    kube: Kube, now: datetime | None, levels: tuple[str, ...], watch_namespace: str | None, fabric: FabricProfile | None = None
) -> list[admission.Decision]:
    """The body of :func:`admission_pass`, run under the scheduling lock."""
    at = _now(now)
    # Pods before jobs: the operator writes a job's status (an admission record, a restart's hold) before it creates
    # or deletes that job's pods, so a job read after its pods is never older than what the pods show.
    active = kube.list_active_pods()
    jobs, found = _waiting(kube, at, watch_namespace)
    found.wait_for_old_pods(active)
    waiting = found.waiting
    metrics.observe_jobs(jobs)
    requests: dict[str, list[GangRequest]] = defaultdict(list)
    for _, _, request in waiting.values():
        requests[request.gpu_resource].append(request)
    metrics.ADMISSION_QUEUE.set(len(waiting))
    if not waiting:
        return []  # holds matter only to a job that is being placed
    nodes = kube.list_nodes()
    active = active + found.promised  # the ledger: every bound or pinned pod, plus admitted ranks not created yet and ended ranks of live gangs
    metrics.observe_nodes(nodes)
    decisions: list[admission.Decision] = []
    for resource, group in sorted(requests.items()):
        snap = cluster_model.snapshot(nodes, active, resource, levels)
        decisions.extend(admission.schedule(group, snap, found.holds_for(resource)))
    by_name = {n["metadata"]["name"]: n for n in nodes}
    todo = [d for d in admission.apply_order(decisions) if waiting[d.job][1] and not already_refused(waiting[d.job][0], d.result)]

    fenced: list[str] = []

    def apply(decision: admission.Decision) -> None:
        job, _, request = waiting[decision.job]
        if fenced:
            fenced.append(decision.job)
            return
        try:
            _decide(kube, job, request, with_node_values(decision.result, fabric, by_name), at, fabric)
        except NotLeader:  # this operator may no longer write: drop the rest of the pass (docs/operator.md, "Leader fencing")
            fenced.append(decision.job)
        except Exception as err:  # isolated: the next pass decides this job again
            log.warning("%s: admission not applied, retried next pass: %s", decision.job, describe(err))

    # Admissions first, then refusals (a wave of refusal writes never delays a placed gang); within each, up to
    # DECIDE_CONCURRENCY jobs at once, each under its own lock. The pass still holds the scheduling lock until every
    # decision is written, so the next pass reads them all (the ledger rule above is unchanged).
    for _, group in groupby(todo, key=lambda d: isinstance(d.result, Refusal)):  # the two runs of apply_order
        each([lambda d=d: apply(d) for d in group], _DECISIONS)
    if fenced:
        log.info("admission pass dropped: this operator no longer leads; %d decision(s) not written (%s)", len(fenced), ", ".join(sorted(fenced)[:5]))
    return decisions


DECIDE_CONCURRENCY = 4
"""Jobs whose admission decisions one pass applies at once (each a status write, then its pods' creates and Events)."""

_DECISIONS = ThreadPoolExecutor(max_workers=DECIDE_CONCURRENCY, thread_name_prefix="railtrain-decide")
"""Its own pool, not :data:`_CALLS`: a decision's plan runs its per-pod calls on that one, and a pool whose threads
wait for their own pool can deadlock. 100 jobs of 8 pods admitted by one pass were applied one after the other (per
job a GET of the job and of its Service, a status write, the creates and two Events: about 500 sequential round
trips before the last job's pods; docs/bench-operator.md)."""


def already_refused(job: dict[str, Any], result: Placement | Refusal) -> bool:
    """Whether ``result`` is a refusal the job's Scheduled condition already states word for word (pure).

    Such a decision would write nothing, so the pass skips it, and with it the
    job's fresh reads (a GET, a pod LIST and a Service GET per waiting job and
    pass: at 500 waiting jobs that was the cost of a pass). A refusal that
    deletes a gang (:data:`~railtrain.operator.scheduling.placement.PINNED_NODE_UNAVAILABLE`)
    is never skipped. ``job`` is the cached object, which holds the operator's
    own last status write (write-through), so a changed refusal is never
    mistaken for an unchanged one.
    """
    if not isinstance(result, Refusal) or result.reason == PINNED_NODE_UNAVAILABLE:
        return False
    found = next((c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == "Scheduled"), None)
    return found is not None and found.get("status") == "False" and found.get("reason") == result.reason and found.get("message") == result.message


def _waiting(kube: Kube, at: datetime, watch_namespace: str | None) -> tuple[list[dict[str, Any]], ledger.Ledger]:
    """The jobs listed, and from them and their pods (read first) the queue, the promised pods and the holds
    (:func:`railtrain.operator.job.ledger.read`).

    Jobs in namespaces being deleted are left out (no pods can be created
    there), and so is a job the planner cannot read (one line: it never blocks
    the others' admission).
    """
    pods = ledger.by_job(kube.list_railtrain_pods())  # before the jobs (see _admission_pass)
    gone = kube.terminating_namespaces()
    jobs = [j for j in kube.list_jobs(watch_namespace) if j["metadata"].get("namespace") not in gone]
    found = ledger.read(jobs, pods, at)
    for name, what, err in found.problems:
        log.warning("%s %s: %s", name, what, describe(err))
    return jobs, found


def with_node_values(result: Placement | Refusal, fabric: FabricProfile | None, nodes: dict[str, dict[str, Any]]) -> Placement | Refusal:
    """``result`` with, per rank, the pod annotations its node gives: the Node's uid and the fabric's per-node values,
    and the warnings about those nodes (:func:`railtrain.operator.scheduling.placement.with_node_values`, pure)."""
    return placement_values(result, fabric, nodes)


def _decide(kube: Kube, seen: dict[str, Any], request: GangRequest, result: Placement | Refusal, now: datetime, fabric: FabricProfile | None = None) -> None:
    """Apply one admission decision to a job, if its gang still asks what the pass answered."""
    meta = seen["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    with _lock_for(namespace, name):
        job = kube.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        pods = _snapshot_pods(kube, job)
        if planner.gang_request(job, pods, now) != request:
            return  # changed since the pass listed it; the next pass decides again
        p = planner.plan(job, pods, kube.get_service(namespace, name), now, result, nodes=kube.list_nodes() if _needs_nodes(job, pods) else None, fabric=fabric)
        if not _apply_or_reject(kube, job, p, now):
            return
        for type_, reason, message in p.events:
            log.info("%s/%s %s: %s", namespace, name, reason, message)


def _apply_or_reject(kube: Kube, job: dict[str, Any], p: planner.Plan, now: datetime) -> bool:
    """Apply a plan; when the API server refuses one of its objects as invalid, fail the job instead (status, Warning Event).

    Returns:
        False when the job was failed here, or when the plan's status was not written (the job was deleted or
        changed since it was read: :func:`_write_status`), so nothing after it was done.

    Raises:
        railtrain.operator.kube.fence.NotLeader: this operator may no longer write; the rest of the plan is dropped.
    """
    try:
        return _apply(kube, job, p, now)
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
        return False


def _snapshot_pods(kube: Kube, job: dict[str, Any]) -> list[dict[str, Any]]:
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


def jobs_on_node(kube: Kube, node: str) -> list[tuple[str, str]]:
    """``(namespace, job name)`` of every TrainingJob with a pod bound to ``node``, sorted."""
    return sorted({(p["metadata"]["namespace"], (p["metadata"].get("labels") or {})[contract.LABEL_JOB_NAME]) for p in kube.list_railtrain_pods(node)})


def _needs_nodes(job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Whether this pass must see the Nodes: some pod is bound to one (node loss), some is pinned to one but
    not bound yet (a node unusable before binding), ranks are to be created from status.admission (their
    nodes' fabric values), or the job may grow."""
    admitted = planner.admission_record(job.get("status") or {})
    return resize.wants_to_grow(job) or (admitted is not None and not admitted.created) or any(
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

    outcome, _ = kubeclient.update_node(lambda: kube.get_node(node_name), kube.set_node_taints, change, attempts)
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


_CALLS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="railtrain-api")
"""Runs the independent per-pod calls of one plan at once (:func:`railtrain.operator.kube.verbs.each`: a gang's 8 deletes take one round trip, not 8)."""


def _apply(kube: Kube, job: dict[str, Any], p: planner.Plan, now: datetime) -> bool:
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
        each([lambda name=name: kube.delete_pod(namespace, name, p.uids.get(name)) for name in p.delete_pods], _CALLS)
        if p.create_pods:
            _announce(kube, job, p)  # GangPlaced/GangCreated once the pods exist, and off the gang's critical path
        return True
    kube.create_many(p.create_pods)
    each([lambda name=name: kube.delete_pod(namespace, name, p.uids.get(name)) for name in p.delete_pods], _CALLS)
    each([lambda name=name: kube.release_pod(namespace, name, p.pin.get(name), p.annotate.get(name)) for name in p.ungate], _CALLS)
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
