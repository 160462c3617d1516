"""Where a Kueue job's Workload stands (pure): pending with Kueue's reason, admitted to which nodes, evicted, finished; and the status writes railtrain owes it.

:func:`view` reads a ``kueue.x-k8s.io/v1beta2`` Workload (as stored; None when
there is none) into a :class:`KueueView`: its state from the conditions Kueue
writes (``QuotaReserved``, ``Admitted``, ``Evicted``, ``Finished``;
``apis/kueue/v1beta2/workload_types.go``), Kueue's own reason and message while
it waits, and, once admitted, the ClusterQueue, the flavor of each resource
and the decoded topology assignment
(:func:`railtrain.operator.scheduling.kueue.expand`).

What the owning controller writes back (as Kueue's ``jobframework`` does):
after an eviction, once the gang is stopped, :func:`requeued_status` (the
``Requeued`` condition, the quota reservation cleared: ``QuotaReserved`` False
reason ``Pending``, ``Admitted`` False, no ``admission``), so Kueue queues it
again; when the job ends, :func:`finished_status` (``Finished`` True, reason
``Succeeded`` or ``Failed``); all along, :func:`pods_ready_status` keeps the
``PodsReady`` condition that Kueue's ``waitForPodsReady`` waits for
(:func:`gang_ready` says whether the admitted pod count is ready).

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from railtrain.crds import contract, reasons
from railtrain.crds.times import format_time
from railtrain.operator.job.conditions import SCHEDULED, true_of
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.scheduling.kueue import expand
from railtrain.operator.scheduling.refusal import Refusal

MISSING, PENDING, ADMITTED, EVICTED, FINISHED = "Missing", "Pending", "Admitted", "Evicted", "Finished"
PREBUILT = "WaitingForPrebuiltWorkload"
"""The reason of a :data:`MISSING` view on a MultiKueue worker cluster: the Workload the dispatcher builds is not there yet."""
REPLACED = "Replaced"
"""The reason of a :data:`MISSING` view whose Workload railtrain just deleted to create a new one (operator/kueue.py)."""
"""The states of :class:`KueueView` (a Workload with quota reserved but admission checks still open is Pending)."""


@dataclass(frozen=True)
class KueueView:
    """One Workload as the operator acts on it.

    Attributes:
        name: the Workload's name ("" when missing).
        state: one of :data:`MISSING`, :data:`PENDING`, :data:`ADMITTED`, :data:`EVICTED`, :data:`FINISHED`.
        reason, message: Kueue's words for the state (the Evicted or QuotaReserved condition's), "" when none.
        cluster_queue: the ClusterQueue that admitted it ("" unless admitted).
        flavors: resource name → ResourceFlavor name of the admitted pod set.
        levels, domains: the decoded topology assignment (:func:`railtrain.operator.scheduling.kueue.expand`); empty without TAS.
        reserved: whether ``status.admission`` is set (quota still reserved).
        deleting: the Workload has a deletionTimestamp.
        topology: its pod set's ``topologyRequest`` (empty without one).
        count: the pods admitted (the admission's pod-set count: below ``spec.podSets[0].count`` after a partial
            admission of an elastic job's ``minCount``); 0 unless admitted.
    """

    name: str = ""
    state: str = MISSING
    reason: str = ""
    message: str = ""
    cluster_queue: str = ""
    flavors: Mapping[str, str] = field(default_factory=dict)
    levels: tuple[str, ...] = ()
    domains: tuple[tuple[tuple[str, ...], int], ...] = ()
    reserved: bool = False
    deleting: bool = False
    topology: Mapping[str, Any] = field(default_factory=dict)
    count: int = 0

    @property
    def admitted(self) -> bool:
        """Whether Kueue admitted the Workload and has not evicted it."""
        return self.state == ADMITTED


def condition(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The Workload's condition of ``type_``, or None."""
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def _true(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    found = condition(workload, type_)
    return found if found is not None and found.get("status") == "True" else None


def view(workload: Mapping[str, Any] | None) -> KueueView:
    """Read a Workload as stored (pure; None: there is none).

    Raises:
        ValueError: an admitted Workload whose topology assignment does not decode (named).
    """
    if not workload:
        return KueueView()
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    podset = next(iter((workload.get("spec") or {}).get("podSets") or []), {})
    base = {"name": str(meta.get("name", "")), "reserved": bool(status.get("admission")), "deleting": bool(meta.get("deletionTimestamp")),
            "topology": dict(podset.get("topologyRequest") or {})}
    if (done := _true(workload, "Finished")) is not None:
        return KueueView(state=FINISHED, reason=str(done.get("reason", "")), message=str(done.get("message", "")), **base)
    if base["deleting"]:
        return KueueView(state=EVICTED, reason="WorkloadDeleted", message="the Workload is being deleted", **base)
    active = (workload.get("spec") or {}).get("active") is not False
    if (evicted := _true(workload, "Evicted")) is not None and not (evicted.get("reason") == "Deactivated" and active):
        # (a Deactivated eviction of a Workload active again is over: Kueue requeued it and leaves Evicted True until
        # its next admission; it waits like any pending Workload)
        return KueueView(state=EVICTED, reason=str(evicted.get("reason", "")), message=str(evicted.get("message", "")), **base)
    admission = status.get("admission") or {}
    if _true(workload, "Admitted") is not None and admission:
        assignment = next(iter(admission.get("podSetAssignments") or []), {})
        levels, domains = expand(assignment.get("topologyAssignment"))
        return KueueView(state=ADMITTED, cluster_queue=str(admission.get("clusterQueue", "")), flavors=dict(assignment.get("flavors") or {}),
                         levels=levels, domains=tuple(domains), count=admitted_count(workload), **base)
    if (workload.get("spec") or {}).get("active") is False:
        return KueueView(state=PENDING, reason="Inactive", message="the Workload is deactivated (spec.active is false)", **base)
    waiting = condition(workload, "QuotaReserved") or {}
    if waiting.get("status") == "True":
        checks = [c for c in status.get("admissionChecks") or [] if c.get("state") != "Ready"]
        said = "; ".join(f"{c.get('name')}: {c.get('state')} {c.get('message', '')}".strip() for c in checks)
        return KueueView(state=PENDING, reason="AdmissionChecks", message=f"quota is reserved; waiting for admission checks ({said or 'none named'})", **base)
    return KueueView(state=PENDING, reason=str(waiting.get("reason", "")), message=str(waiting.get("message", "")), **base)


def pending_sentence(v: KueueView, queue: str) -> str:
    """The Scheduled condition's message for a job Kueue has not admitted (pure): the Workload, the LocalQueue, and Kueue's own words."""
    if v.state == MISSING:
        if v.reason in (REPLACED, PREBUILT):  # deleted to make a new one, or MultiKueue's not there yet: its sentence says why
            return f"{v.message} (LocalQueue {queue})"
        if v.message:  # its creation failed (operator/kueue.py, _create): say why
            return f"its Workload in LocalQueue {queue} cannot be created yet: {v.message}"
        return f"waiting for its Workload in LocalQueue {queue} to be created"
    said = f"{v.reason}: {v.message}" if v.reason and v.message else (v.message or v.reason or "Kueue has not considered it yet")
    if v.state == EVICTED:
        return f"Kueue evicted Workload {v.name} (LocalQueue {queue}): {said}; waiting to be admitted again"
    waiting = f"waiting for Kueue to admit Workload {v.name} from LocalQueue {queue}: {said}"
    if exceeds_quota(v):
        return (f"{waiting}. {contract.NEVER_FITS} LocalQueue {queue}'s ClusterQueue as its quota is: the request is more than "
                "its maximum capacity, borrowing included; ask for fewer nodes or a larger quota (it stays queued in case the quota grows)")
    return waiting


def exceeds_quota(v: KueueView) -> bool:
    """Whether Kueue's pending message says the job's request is more than its ClusterQueue's maximum capacity
    (nominal quota plus what it may borrow in its cohort) and names no way to wait for it (pure).

    Kueue's flavor assigner (v0.17 ``flavorassigner.go``, ``fitsResourceQuota``) says ``> maximum capacity`` for a
    flavor that can never hold the request and ``insufficient unused quota`` for one where waiting or preemption can
    help; only a message with the first and none of the second (nor a topology or preemption remark) counts.
    """
    text = v.message
    return (v.state == PENDING and "> maximum capacity" in text
            and not any(hope in text for hope in ("insufficient unused quota", "topology", "preempt")))


def _set(conditions: list[dict[str, Any]], type_: str, status: bool, reason: str, message: str, now: datetime, generation: Any) -> list[dict[str, Any]]:
    """``conditions`` with ``type_`` set (lastTransitionTime kept unless the status changes)."""
    value = "True" if status else "False"
    old = next((c for c in conditions if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value and old.get("lastTransitionTime") else format_time(now)
    new = {"type": type_, "status": value, "reason": reason, "message": message[:32768], "lastTransitionTime": since}
    if generation is not None:
        new["observedGeneration"] = generation
    return [c for c in conditions if c.get("type") != type_] + [new]


def requeued_status(workload: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The status an evicted Workload gets once its gang is stopped (pure; a merge-patch body for ``workloads/status``).

    ``Requeued`` is True for an eviction by preemption or node failures (Kueue queues it again at once), False
    otherwise (e.g. deactivated); the quota reservation is cleared: ``QuotaReserved`` False reason ``Pending``
    with the eviction's message, ``Admitted`` False, ``admission`` removed (Kueue's
    ``workload.UnsetQuotaReservationWithCondition``).
    """
    evicted = _true(workload, "Evicted") or {}
    reason, message = str(evicted.get("reason", "Evicted")), str(evicted.get("message", "evicted"))
    gen = (workload.get("metadata") or {}).get("generation")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    conds = _set(conds, "Requeued", reason in ("Preempted", "NodeFailures"), reason, message, now, gen)
    conds = _set(conds, "QuotaReserved", False, "Pending", message, now, gen)
    if condition(workload, "Admitted") is not None:
        conds = _set(conds, "Admitted", False, "NoReservation", "The workload has no reservation", now, gen)
    return {"conditions": conds, "admission": None}


def finished_status(workload: Mapping[str, Any], succeeded: bool, message: str, now: datetime) -> dict[str, Any]:
    """The status of a Workload whose job ended (pure): ``Finished`` True, reason ``Succeeded`` or ``Failed``, the job's sentence."""
    gen = (workload.get("metadata") or {}).get("generation")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    return {"conditions": _set(conds, "Finished", True, "Succeeded" if succeeded else "Failed", message or "the job ended", now, gen)}


PODS_READY = "PodsReady"
"""The Workload condition Kueue's ``waitForPodsReady`` reads (``apis/kueue/v1beta2/workload_types.go``, ``WorkloadPodsReady``)."""

WAIT_FOR_START, WAIT_FOR_RECOVERY, STARTED, RECOVERED = "WaitForStart", "WaitForRecovery", "Started", "Recovered"
"""``PodsReady``'s reasons, as Kueue's own job integrations write them (v0.17 ``jobframework``)."""


def _owned_live(obj: Observed | Mapping[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    uid = (observed(obj).obj.get("metadata") or {}).get("uid")
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
            and any(r.get("uid") == uid and r.get("controller") for r in (p.get("metadata") or {}).get("ownerReferences") or [])]


def admitted_count(workload: Mapping[str, Any]) -> int:
    """The pods the Workload stands for: its admission's pod-set counts when admitted (a partial admission counts what
    was admitted), else its ``spec.podSets`` counts (pure; 0 for a Workload without pod sets)."""
    assigned = ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    if assigned and all(a.get("count") is not None for a in assigned):
        return sum(int(a["count"]) for a in assigned)
    return sum(int(ps.get("count") or 0) for ps in (workload.get("spec") or {}).get("podSets") or [])


def gang_ready(workload: Mapping[str, Any], obj: Observed | Mapping[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Kueue's ``PodsReady`` test for a job (pure): at least :func:`admitted_count` of the job's own pods (controller
    owner, not being deleted) are Ready or have Succeeded. ``obj``: the TrainingJob as observed or as read; ``pods``:
    its pods (others are ignored). Rule: ``WorkloadPodsReady`` in Kueue's ``workload_types.go``."""
    want = admitted_count(workload)
    placed = observed(obj).status.admitted_nodes
    if placed:  # an elastic gang placed below the admitted count (a count its parallelism allows) is whole at its size
        want = min(want, placed)
    ready = 0
    for p in _owned_live(obj, pods):
        status = p.get("status") or {}
        if status.get("phase") == "Succeeded" or any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
            ready += 1
    return want > 0 and ready >= want


def pods_ready_status(workload: Mapping[str, Any], ready: bool, now: datetime) -> dict[str, Any] | None:
    """The ``PodsReady`` condition the Workload must carry now (pure): a merge-patch body for ``workloads/status``, or
    None when the condition already says it (same status and reason).

    Kueue's rules for its own integrations (``generatePodsReadyCondition`` in v0.17's ``jobframework``), which
    ``waitForPodsReady`` then enforces (evicting an admitted Workload whose condition is not True within its timeout,
    or False for longer than its recovery timeout): not admitted, False :data:`WAIT_FOR_START`; ready, True
    :data:`STARTED` (:data:`RECOVERED` after a recovery); not ready after having been ready (the gang restarts), False
    :data:`WAIT_FOR_RECOVERY` until ready again; otherwise False :data:`WAIT_FOR_START`.

    Args:
        workload: the Workload as stored; ready: :func:`gang_ready` of its job; now: the write's time.
    """
    old = condition(workload, PODS_READY)
    old_reason = (old or {}).get("reason")
    n = admitted_count(workload)
    if not view(workload).admitted:
        status, reason, message = False, WAIT_FOR_START, "the Workload is not admitted; its pods have not started"
    elif ready:
        status, reason = True, RECOVERED if old_reason in (WAIT_FOR_RECOVERY, RECOVERED) else STARTED
        message = f"all {n} pods of the gang are ready and the job is running"
    elif old is not None and (old.get("status") == "True" or old_reason == WAIT_FOR_RECOVERY):
        status, reason, message = False, WAIT_FOR_RECOVERY, f"a pod of the gang failed or was replaced; waiting for all {n} pods to be ready again"
    else:
        status, reason, message = False, WAIT_FOR_START, f"not all {n} pods of the gang are ready yet"
    if old is not None and old.get("status") == ("True" if status else "False") and old_reason == reason:
        return None
    gen = (workload.get("metadata") or {}).get("generation")
    conds = list((workload.get("status") or {}).get("conditions") or [])
    return {"conditions": _set(conds, PODS_READY, status, reason, message, now, gen)}


def stop_for(v: KueueView | None, queue: str, obj: Observed | Mapping[str, Any], pods: list[dict[str, Any]]) -> Refusal | None:
    """The order to stop a Kueue job's gang, when its Workload no longer admits it (pure).

    Args:
        v: the Workload's view (None: the job is not Kueue's).
        queue: the LocalQueue the job names.
        obj: the TrainingJob as observed in this pass, or as read; pods: its pods.

    Returns:
        A :class:`~railtrain.operator.scheduling.refusal.Refusal` with reason
        :data:`~railtrain.crds.reasons.EVICTED_BY_KUEUE` (the planner's ``kueue-evicted`` row stops the whole gang
        on it, :mod:`railtrain.operator.job.phases.kueue`) when the Workload is evicted, deleted, deactivated or
        gone while the job holds nodes (Scheduled True, or a pod of it not being deleted); None otherwise.
    """
    if v is None or v.admitted or v.state == FINISHED:
        return None
    live = [p for p in _owned_live(obj, pods) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if not true_of(observed(obj).status, SCHEDULED) and not live:
        return None
    return Refusal(reasons.EVICTED_BY_KUEUE, pending_sentence(v, queue), warning=True)
