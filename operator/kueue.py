"""The runtime half of Kueue's external-framework protocol: the Workload of each Kueue job kept, read and answered.

A TrainingJob labelled ``kueue.x-k8s.io/queue-name`` is Kueue's to admit
(docs/kueue.md). The pure wings decide everything: the Workload it should have
(:mod:`railtrain.operator.job.workload`), where it stands and what it is owed
(:mod:`railtrain.operator.job.kueuestatus`), its placement inside the admission
(:mod:`railtrain.operator.job.kueueadmit`). Here, through the API edge
(:mod:`railtrain.operator.kube.kueue`):

* :func:`sync`, at each reconcile of a Kueue job: create its one Workload,
  replace it when the job changed while it waits or when its stopped gang must
  leave nodes of its admission that Kueue would not replace (avoided by a
  verdict, not quarantined: ``workload.avoided_in_assignment``), answer an eviction once the
  gang is stopped (the quota reservation cleared), keep its ``PodsReady``
  condition (Kueue's ``waitForPodsReady``), mark it Finished when the job
  ends and then drop railtrain's finalizer; returns the Workload's view;
* :func:`admissions`, once per admission pass: each waiting Kueue job's
  Workload with its admitted flavors' node labels and tolerations;
* :func:`dress`, before a plan creates a Kueue job's pods: the flavors' node
  selector and tolerations, and Kueue's workload annotation and pod-set label.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Mapping, Sequence

from railtrain.crds import contract
from railtrain.crds import kueue as names
from railtrain.crds import reasons
from railtrain.crds.times import format_time
from railtrain.operator.job import conditions as cond
from railtrain.operator.job import kueuestatus, workload
from railtrain.operator.job.kueueadmit import KueueAdmission
from railtrain.operator.job.kueuestatus import KueueView
from railtrain.operator.job.observed import Observed
from railtrain.operator.job.phases.step import Plan
from railtrain.operator.kube.errors import ApiError, Forbidden, Invalid, NotFound, WebhookFailed
from railtrain.operator.kube.kueue import KueueVerbs

log = logging.getLogger("railtrain.operator")

NOT_INSTALLED = (
    f"the Workload API ({names.GROUP}/{names.VERSION}) is not served on this cluster: Kueue is not installed; "
    f"install Kueue, or remove the {names.QUEUE_LABEL} label to use railtrain's own queue"
)


def not_answering(err: WebhookFailed) -> str:
    """The sentence of a Workload the API server could not admit because Kueue's webhook failed (Kueue down or restarting)."""
    which = f" {err.webhook}" if err.webhook else ""
    return (f"Kueue's admission webhook{which} does not answer ({err.message.rsplit(': ', 1)[-1]}): Kueue is down or restarting; "
            "the Workload is created when Kueue answers again")


def priority(verbs: KueueVerbs, job: dict[str, Any], seen: Observed) -> workload.Priority:
    """The Workload's priority: the job's WorkloadPriorityClass label, else the template's PriorityClass, else ``spec.priority``.

    A class that does not exist falls back to ``spec.priority`` (Kueue's own webhook then judges the Workload).
    """
    label = ((job["metadata"].get("labels") or {}).get(names.PRIORITY_LABEL))
    if label and (wpc := verbs.get_cluster_object(names.WORKLOAD_PRIORITY_CLASSES, label)) is not None:
        return workload.Priority(int(wpc.get("value") or 0), {"group": names.GROUP, "kind": "WorkloadPriorityClass", "name": label})
    pc_name = ((seen.pod0 or {}).get("spec") or {}).get("priorityClassName")
    if pc_name and (pc := verbs.get_priority_class(pc_name)) is not None:
        return workload.Priority(int(pc.get("value") or 0), {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc_name})
    return workload.Priority(int(seen.usable.spec.priority if seen.usable else 0))


def _live(job: dict[str, Any], pods: Sequence[dict[str, Any]]) -> bool:
    """Whether any pod the job owns still exists and has not ended (Kueue's ``IsActive``)."""
    uid = job["metadata"].get("uid")
    return any(
        any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or []) and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        for p in pods
    )


def sync(kube: Any, job: dict[str, Any], seen: Observed, levels: Sequence[str], pods: Sequence[dict[str, Any]], now: datetime) -> KueueView | None:
    """Keep a Kueue job's one Workload and answer it (see the module docstring); None when the job is not Kueue's.

    Returns:
        The Workload's view after this call's writes: :data:`~railtrain.operator.job.kueuestatus.MISSING` with a
        reason and sentence when it could not be created (Kueue not installed, refused by Kueue's webhook).

    Raises:
        railtrain.operator.kube.errors.ApiError: an API error other than those named (the next reconcile retries).
    """
    queue = workload.queue_name(job)
    if queue is None:
        return None
    verbs = KueueVerbs(kube)
    meta = job["metadata"]
    name = workload.workload_name(meta)
    stored = verbs.get_workload(meta["namespace"], name)
    phase = seen.status.phase
    if phase in cond.TERMINAL_PHASES:
        return _finish(verbs, seen, stored, phase == cond.SUCCEEDED, now, pods)
    if stored is not None and stored["metadata"].get("deletionTimestamp"):
        if not _live(job, pods):  # the gang is stopped: let the deletion finish (jobframework: stopJob, then RemoveFinalizer)
            verbs.remove_finalizer(stored)
        return kueuestatus.view(stored)
    if seen.usable is None or seen.pod0 is None:
        return kueuestatus.view(stored)  # the planner fails the job (InvalidSpec); no Workload for a spec that cannot become pods
    if workload.prebuilt_name(job) is not None:  # a MultiKueue worker: the manager's dispatcher made the Workload; adopt it
        if stored is None:
            return KueueView(name=name, reason=kueuestatus.PREBUILT, message=f"waiting for MultiKueue's Workload {name}, which stands for this job's copy on this worker cluster")
        current = kueuestatus.view(stored)
        if (ready := kueuestatus.pods_ready_status(stored, kueuestatus.gang_ready(stored, seen, list(pods)), now)) is not None:
            verbs.patch_workload_status(stored, ready)
        return current  # never replaced: its spec is the manager's, and MultiKueue keeps the two in step
    want = workload.desired(seen, levels, priority(verbs, job, seen))
    active = not seen.usable.spec.run_policy.suspend  # a suspended job's Workload is deactivated: its quota goes back to the queue
    if stored is None:
        want["spec"]["active"] = active  # not in the spec hash: suspending does not replace the Workload
        if not active:
            want["metadata"]["annotations"][names.DEACTIVATED_FOR_SUSPEND] = "true"
        return _create(verbs, want)
    was_active = (stored.get("spec") or {}).get("active") is not False
    ours = ((stored.get("metadata") or {}).get("annotations") or {}).get(names.DEACTIVATED_FOR_SUSPEND) == "true"
    if ((was_active and not active) or (not was_active and active and ours)) and verbs.set_active(stored, active):  # an admin's deactivation stays
        log.info("%s/%s: %s Workload %s (runPolicy.suspend is %s)", meta["namespace"], meta["name"], "reactivated" if active else "deactivated",
                 name, str(not active).lower())  # fmt: skip
        stored = verbs.get_workload(meta["namespace"], name) or stored
    current = kueuestatus.view(stored)
    avoided = workload.avoided_in_assignment(current.levels, current.domains, seen.status.avoid_nodes, [q.node for q in seen.status.quarantines])
    if avoided and current.reserved and not _live(job, pods) and not workload.equivalent(stored, want):
        # the gang stopped for a verdict that named nodes of its admission; Kueue sees nothing wrong with them (no
        # taint), so the job gives its admission back for one without them (the new Workload's node affinity)
        sentence = (f"node(s) {', '.join(avoided)} of Kueue's admission are avoided by this job (named by its verdicts); "
                    "its Workload is replaced so that Kueue admits it to other nodes")
        log.info("%s/%s: %s", meta["namespace"], meta["name"], sentence)
        release_workload(verbs, meta["namespace"], name, meta.get("uid"))  # not done: the next reconcile finishes the deletion
        return KueueView(name=name, reason=kueuestatus.REPLACED, message=sentence)
    if not workload.equivalent(stored, want) and not current.reserved:
        log.info("%s/%s: the job changed while waiting for Kueue; replacing Workload %s", meta["namespace"], meta["name"], name)
        release_workload(verbs, meta["namespace"], name, meta.get("uid"))
        return KueueView(name=name, reason=kueuestatus.REPLACED, message="the job changed while it waited; its Workload is being replaced")
    if current.state == kueuestatus.EVICTED and current.reserved and not _live(job, pods):
        patch = kueuestatus.requeued_status(stored, now)  # stopped: Kueue may queue it again
        after = {**stored, "status": {**(stored.get("status") or {}), **patch}}
        if (ready := kueuestatus.pods_ready_status(after, False, now)) is not None:
            patch["conditions"] = ready["conditions"]
        verbs.patch_workload_status(stored, patch)
    elif workload.managed_elsewhere(job):
        pass  # a MultiKueue manager: the worker's gang is MultiKueue's to report; no pods here
    elif (ready := kueuestatus.pods_ready_status(stored, kueuestatus.gang_ready(stored, seen, list(pods)), now)) is not None:
        verbs.patch_workload_status(stored, ready)  # PodsReady, for Kueue's waitForPodsReady (a lost race: the next reconcile)
    return current


def manager_side(kube: Any, job: dict[str, Any], seen: Observed, levels: Sequence[str], now: datetime) -> KueueView | None:
    """A job Kueue's MultiKueue runs on a worker cluster (``spec.managedBy``), on the manager: keep its Workload (created,
    replaced while it waits, Finished with its finalizer dropped when the status MultiKueue copied back is terminal)
    and nothing else: no pods, no Service, no status of its own. Without a queue label nothing would dispatch it: the
    job says so once (Scheduled False, :data:`~railtrain.crds.reasons.MULTIKUEUE_NEEDS_QUEUE`, a Warning Event).

    Returns:
        The Workload's view (:func:`sync`), or None without a queue label.
    """
    if workload.queue_name(job) is not None:
        return sync(kube, job, seen, levels, [], now)
    said = next((c for c in (job.get("status") or {}).get("conditions") or [] if c.get("reason") == reasons.MULTIKUEUE_NEEDS_QUEUE), None)
    if said is None:
        sentence = (f"spec.managedBy is {names.MULTIKUEUE_CONTROLLER}, which needs the label {names.QUEUE_LABEL} naming a LocalQueue: "
                    "MultiKueue dispatches only the jobs Kueue admits; delete the job and create it with the label")
        condition = {"type": cond.SCHEDULED, "status": "False", "reason": reasons.MULTIKUEUE_NEEDS_QUEUE, "message": sentence,
                     "lastTransitionTime": format_time(now)}  # fmt: skip
        if kube.patch_status(job["metadata"]["namespace"], job["metadata"]["name"], {"phase": cond.PENDING, "conditions": [condition]},
                             resource_version=job["metadata"].get("resourceVersion")):  # fmt: skip
            kube.emit_event(job, "Warning", reasons.MULTIKUEUE_NEEDS_QUEUE, sentence)
    return None


def _create(verbs: KueueVerbs, want: dict[str, Any]) -> KueueView:
    """Create the Workload; a refusal becomes a view with Kueue's (or the API server's) sentence."""
    try:
        made = verbs.create_workload(want)
    except NotFound:
        return KueueView(reason="KueueNotInstalled", message=NOT_INSTALLED)
    except Invalid as err:
        return KueueView(reason="WorkloadRefused", message=f"the API server refused the Workload: {err.message}")
    except WebhookFailed as err:
        return KueueView(reason="KueueNotAnswering", message=not_answering(err))
    return kueuestatus.view(made) if made is not None else KueueView(name=want["metadata"]["name"])


FINISH_TRIES = 5
"""Reads and guarded writes :func:`_finish` makes before it leaves a finished job's Workload to the next reconcile (each
lost race with Kueue's own status writes costs one)."""


def _finish(verbs: KueueVerbs, seen: Observed, stored: dict[str, Any] | None, succeeded: bool, now: datetime,
            pods: Sequence[dict[str, Any]]) -> KueueView:
    """A finished job's Workload (``seen``: the job as observed): ``Finished`` written, then railtrain's finalizer dropped
    (Kueue's ``jobframework`` order), both in this one call when no pod of the job is live.

    Both in one call, because no later reconcile is certain: a finished job's pods that already ended send no more
    events, and the resync skips a Succeeded job without a TTL (operator/resync.py). Writing ``Finished`` and waiting
    for a next pass to drop the finalizer left the Workload Finished with the finalizer forever (found by
    tests/kueue/test_kueue_cluster.py in two fresh-clone runs). The finalizer goes with the Workload read again after
    the status write (the write moved its resourceVersion); a pod still live keeps it until that pod's own event. A
    write that lost a race with Kueue's own status write (409: Kueue marks a new Workload Pending at about the same
    moment) reads the Workload again and tries again, up to :data:`FINISH_TRIES` times.
    """
    job = seen.obj
    if stored is None:
        return KueueView()
    ns, name = stored["metadata"]["namespace"], stored["metadata"]["name"]
    ended = cond.condition_of(seen.status, cond.SUCCEEDED if succeeded else cond.FAILED)
    current = kueuestatus.view(stored)
    for _ in range(FINISH_TRIES):  # Kueue writes the Workload's status too: a guarded write that lost the race reads it again
        if current.state == kueuestatus.FINISHED or stored["metadata"].get("deletionTimestamp"):
            if names.FINALIZER not in (stored["metadata"].get("finalizers") or []) or _live(job, pods) or verbs.remove_finalizer(stored):
                return current
        elif verbs.patch_workload_status(stored, kueuestatus.finished_status(stored, succeeded, ended.message if ended is not None else "", now)):
            current = KueueView(name=current.name, state=kueuestatus.FINISHED, reason="Succeeded" if succeeded else "Failed")
        stored = verbs.get_workload(ns, name)  # after a write (its resourceVersion moved) or a lost race
        if stored is None:
            return current
        if current.state != kueuestatus.FINISHED:
            current = kueuestatus.view(stored)
    log.warning("%s/%s: Workload %s still changing after %d tries to finish it; the next reconcile tries again", ns, job["metadata"]["name"], name, FINISH_TRIES)
    return current


def default_queue(kube: Any, job: dict[str, Any], seen: Observed, queue: str | None) -> bool:
    """Give a job that names no LocalQueue the operator's default one (``--kueue-default-queue``), by writing the label
    on it, as Kueue's own LocalQueue defaulting does for the jobs it manages; only before its first admission (a
    gang running under railtrain's own queue stays there). ``seen``: the job as observed.

    Returns:
        True when the label was written (the job's next event reconciles it as Kueue's), else False.
    """
    if queue is None or workload.queue_name(job) is not None:
        return False
    status = seen.status
    if status.admission is not None or status.placement or status.phase not in (None, cond.PENDING):
        return False
    if KueueVerbs(kube).label_queue(job, queue):
        log.info("%s/%s: labelled %s=%s (the operator's default LocalQueue)", job["metadata"]["namespace"], job["metadata"]["name"], names.QUEUE_LABEL, queue)
        return True
    return False


def admissions(kube: Any, waiting: Sequence[Observed | dict[str, Any]], unmade: Mapping[str, KueueView] | None = None) -> dict[str, KueueAdmission]:
    """``namespace/name`` → :class:`~railtrain.operator.job.kueueadmit.KueueAdmission` of each waiting Kueue job in ``waiting``.

    One GET of the Workload per waiting Kueue job, and one per admitted flavor; a job whose Workload cannot be
    read is left out (it waits this pass, with its Workload unknown). ``unmade``: ``namespace/name`` → the view
    :func:`sync` returned when it could not create a job's Workload (Kueue not installed or not answering, the
    Workload refused, or it is being replaced: :data:`~railtrain.operator.job.kueuestatus.REPLACED`); a job without a
    Workload, or whose Workload is being deleted, is shown that way, so its condition says why, not only that it waits.
    A Workload the job released stays until Kueue drops its own finalizer; read in that while as "being deleted", the
    reason (nodes of the admission avoided by the job) never reached the job's condition or Events (a fresh-clone run, stop 47).
    """
    verbs = KueueVerbs(kube)
    out: dict[str, KueueAdmission] = {}
    for each in waiting:
        job = each.obj if isinstance(each, Observed) else each
        queue = workload.queue_name(job)
        if queue is None:
            continue
        meta = job["metadata"]
        try:
            stored = verbs.get_workload(meta["namespace"], workload.workload_name(meta))
            v = kueuestatus.view(stored)
            if unmade and (stored is None or v.deleting):  # gone, or going (Kueue's own finalizer may hold it a while)
                v = unmade.get(f"{meta['namespace']}/{meta['name']}", v)
            labels, tolerations = flavor_terms(verbs, v)
        except (ApiError, ValueError) as err:
            log.warning("%s/%s: its Workload could not be read this pass: %s", meta["namespace"], meta["name"], err)
            continue
        out[f"{meta['namespace']}/{meta['name']}"] = KueueAdmission(queue, v, labels, tolerations)
    return out


def flavor_terms(verbs: KueueVerbs, v: KueueView) -> tuple[dict[str, str], tuple[dict[str, Any], ...]]:
    """The admitted flavors' ``spec.nodeLabels`` together and their ``spec.tolerations`` (empty until admitted)."""
    labels: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for flavor in sorted(set(v.flavors.values())) if v.admitted else ():
        spec = (verbs.get_cluster_object(names.RESOURCE_FLAVORS, flavor) or {}).get("spec") or {}
        labels.update(spec.get("nodeLabels") or {})
        tolerations.extend(t for t in spec.get("tolerations") or [] if t not in tolerations)
    return labels, tuple(tolerations)


def dress(kube: Any, job: dict[str, Any], plan: Plan) -> None:
    """Give the pods ``plan`` creates for a Kueue job what Kueue's admission asks of them (in place; nothing for other jobs)."""
    if not plan.create_pods or workload.queue_name(job) is None:
        return
    verbs = KueueVerbs(kube)
    name = workload.workload_name(job["metadata"])
    v = kueuestatus.view(verbs.get_workload(job["metadata"]["namespace"], name))
    labels, tolerations = flavor_terms(verbs, v)
    plan.create_pods[:] = [workload.dress_pod(p, name, labels, tolerations, v.topology) for p in plan.create_pods]


RELEASE_TRIES = 5
"""How many times :func:`release_workload` reads the Workload again after a write lost to a newer version (409)."""
ORPHAN_SWEEP_SECONDS = 30.0
"""How often the leader's resync looks for Workloads whose TrainingJob is gone (:func:`sweep`); the first leading pass always does."""


def release_workload(verbs: KueueVerbs, namespace: str, name: str, owner_uid: str | None = None) -> bool:
    """Drop railtrain's finalizer from the Workload ``namespace/name`` and delete it; returns whether it is released (or gone).

    Each write is guarded by the version read just before it; one lost to a newer version (Kueue writing the
    status, the garbage collector or the namespace controller deleting the Workload at the same moment) is
    retried on a fresh read, up to :data:`RELEASE_TRIES` times. ``owner_uid``: release only a Workload owned by
    that TrainingJob (never one of a job created since under the same name). API errors other than 404/409 raise
    (:class:`~railtrain.operator.kube.errors.ApiError`).
    """
    for _ in range(RELEASE_TRIES):
        stored = verbs.get_workload(namespace, name)
        if stored is None:
            return True
        meta = stored["metadata"]
        if owner_uid is not None and owner_uid not in {ref.get("uid") for ref in meta.get("ownerReferences") or []}:
            return True  # not the deleted job's Workload
        if names.FINALIZER in (meta.get("finalizers") or []) and not verbs.remove_finalizer(stored):
            continue  # changed since read: read it again
        if not meta.get("deletionTimestamp"):
            verbs.delete_workload(namespace, name, meta.get("uid", ""))
        return True
    return False


def release(kube: Any, job: dict[str, Any]) -> None:
    """A deleted Kueue job's Workload: railtrain's finalizer dropped and the Workload deleted (its gang's pods go by garbage collection).

    Without this the Workload, whose finalizer only its job's controller removes, would outlive the job, holding
    its quota and its namespace's deletion. An API error, or a Workload still changing after
    :data:`RELEASE_TRIES` reads, is logged, not raised: the job is gone and no event of it comes again, so the
    leader's resync finds such a Workload (:func:`sweep`).
    """
    if workload.queue_name(job) is None:
        return
    meta = job.get("metadata") or {}
    try:
        if not release_workload(KueueVerbs(kube), meta.get("namespace", ""), workload.workload_name(meta), meta.get("uid")):
            log.warning("%s/%s: its Workload kept changing; the resync releases it", meta.get("namespace"), meta.get("name"))
    except ApiError as err:
        log.warning("%s/%s: its Workload could not be released (the resync retries): %s", meta.get("namespace"), meta.get("name"), err)


def orphans(workloads: Sequence[dict[str, Any]], job_uids: set[str]) -> list[tuple[str, str, str, str]]:
    """The Workloads railtrain made whose TrainingJob is not among ``job_uids`` (pure).

    Takes Workloads as stored and the uids of the TrainingJobs that exist; returns ``(namespace, workload name,
    job name, job uid)`` for each Workload whose controller ownerReference is a TrainingJob with another uid.
    Workloads of other kinds' jobs (Kueue's own integrations) and MultiKueue's prebuilt ones not yet adopted
    (no owner) are never named.
    """
    found = []
    for wl in workloads:
        meta = wl.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "TrainingJob" and str(ref.get("apiVersion", "")).startswith(f"{contract.API_GROUP}/") and ref.get("uid") not in job_uids:
                found.append((meta.get("namespace", ""), meta.get("name", ""), ref.get("name", ""), ref.get("uid", "")))
                break
    return found


def sweep(kube: Any, jobs: Sequence[dict[str, Any]], namespace: str | None = None) -> int:
    """Release every Workload whose TrainingJob is gone (:func:`orphans`); returns how many it released.

    The job's own deletion releases its Workload (:func:`release`), but that event is missed when the operator
    was down or not leading, and a release can lose to the namespace being deleted at the same moment; such a
    Workload keeps railtrain's finalizer for good, holding its ClusterQueue's quota. Each orphan's job is read
    once more from the API server (a fresh GET) before its Workload goes, so a job the caller's list is
    behind on keeps its Workload. ``jobs``: the TrainingJobs listed (``namespace``: their namespace, None for
    all). Returns 0 without a word where there is nothing to sweep: Kueue not installed (404), or the operator
    not allowed to list Workloads (403: the chart installed with ``kueue.enabled`` false grants no Kueue verbs).
    Any other API error is logged (one line) and the sweep ends there; the next one retries. Never raises: the
    sweep must not stop the resync pass it runs in (its admission pass comes after it).
    """
    verbs = KueueVerbs(kube)
    try:
        stored = verbs.list_workloads(namespace)
    except (NotFound, Forbidden):
        return 0  # Kueue is not installed, or not this operator's to use
    except ApiError as err:
        log.warning("could not list Workloads to release those whose TrainingJob is gone (retried in %.0f s): %s", ORPHAN_SWEEP_SECONDS, err)
        return 0
    released = 0
    for ns, name, job_name, uid in orphans(stored, {j["metadata"].get("uid", "") for j in jobs}):
        try:
            now = kube.get_job(ns, job_name)
            if now is not None and now["metadata"].get("uid") == uid:
                continue  # the job exists: the list was behind
            if release_workload(verbs, ns, name, uid):
                released += 1
                log.info("%s: released Workload %s, whose TrainingJob %s is gone", ns, name, job_name)
        except ApiError as err:
            log.warning("%s: Workload %s, whose TrainingJob %s is gone, could not be released (retried in %.0f s): %s",
                        ns, name, job_name, ORPHAN_SWEEP_SECONDS, err)  # fmt: skip
            return released
    return released
