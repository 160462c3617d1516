"""The reconcile plan of one TrainingJob (pure): observed objects in, actions and status out.

The operator's loop is snapshot → plan → apply the difference → one status
write → Events (the controller pattern of the Kubernetes API conventions, as
JobSet and Kueue do it). Everything that decides lives here and in the phase
machine (:mod:`railtrain.operator.job.phases`, one policy per file, its rows in
priority order) and is tested without a cluster; :mod:`railtrain.operator.kube.verbs`
performs the actions.

Lifecycle of the gang (one per restart count, pods named ``<job>-<rank>``):

1. a job waits in the admission queue without any object of its own
   (:func:`gang_request`); the admission pass answers with a placement or a
   refusal (:mod:`railtrain.operator.job.phases.admission`);
2. a placement records ``status.admission`` and creates every rank pinned,
   with the headless rendezvous Service: the Service lives with the gang,
   and a job whose gang is gone and that holds no node waits without it
   (:mod:`railtrain.operator.job.phases.housekeeping`);
3. follow pod phases: all Running → Running; all Succeeded → Succeeded;
   a Failed pod → restart the whole gang (new restart count) while
   ``runPolicy.backoffLimit`` allows and the exit code is retryable, else Failed;
4. a released gang not fully Running within ``runPolicy.gangTimeoutSeconds``
   (measured from the Scheduled condition turning True) is deleted whole,
   its nodes freed, and the job re-queued after an exponential backoff
   (``status.requeues``, ``status.requeueAfter``).

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from railtrain.crds.times import format_time
from railtrain.operator.job import attempts
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import ended_pods, controller_uid, current_gang, in_the_way, owned, pod_phase, rank_names, rank_of, restart_of
from railtrain.operator.job.spares import job_spares
from railtrain.operator.job.request import promised_pods
from railtrain.operator.job.records import admission_record
from railtrain.operator.job.request import hold_of
from railtrain.operator.job.request import admission_request, gang_request
from railtrain.crds.api import TrainingJobStatus
from railtrain.operator.job.observed import Observed, observe_job, observed, parse_job
from railtrain.operator.job.stored import read_status
from railtrain.operator.job.phases import Plan, Step, advance
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.job.lighthouse import LighthouseSeen
from railtrain.operator.job.phases.step import StatusPatch, finished_ranks, placement_entries
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal

__all__ = ["Plan", "plan", "rejected_status", "REJECTED", "Observed", "observe_job", "parse_job", "admission_record", "promised_pods", "ended_pods", "hold_of", "admission_request", "gang_request", "current_gang", "status_patch", "missing_names"]


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns status ``old`` into ``new``.

    A merge patch keeps keys it does not mention, so every key of ``old``
    (at any depth of nested objects) missing from ``new`` is sent as null,
    which deletes it. Lists are replaced whole, as merge patches do.
    """
    out: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        out[key] = status_patch(before, value) if isinstance(value, dict) and isinstance(before, dict) else value
    out.update({key: None for key in old if key not in new})
    return out


def partial_status_patch(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of some status fields, each given whole: for every field of ``patch`` that is an object in both,
    the :func:`status_patch` from its stored value (so its nested keys that are gone are sent as null); fields
    ``patch`` does not name are left as stored (pure).

    Why: a merge patch keeps the nested keys it does not mention, so a field rewritten whole (``status.goodput``,
    whose ``lostSeconds`` causes come and go) would otherwise keep a cause after the new value left it out.
    """
    return {key: status_patch(old[key], value) if isinstance(value, dict) and isinstance(old.get(key), dict) else value
            for key, value in patch.items()}  # fmt: skip


def observe(
    obj: Observed | dict[str, Any], pods: list[dict[str, Any]], service_exists: dict[str, Any] | bool | None, now: datetime, placement: Placement | Refusal | None = None,
    nodes: list[dict[str, Any]] | None = None, grow_to: int | None = None, settings: PlanSettings = PlanSettings(), lighthouse: LighthouseSeen | None = None,
) -> Step:
    """The :class:`~railtrain.operator.job.phases.step.Step` a pass starts from (arguments as for :func:`plan`)."""
    seen = observed(obj)
    obj = seen.obj
    old = dict(obj.get("status") or {})  # as stored: the base of this pass's status patch (read through seen.status)
    status = StatusPatch({"restarts": 0, **old})
    mine = owned(obj, pods)
    step = Step(obj, None, mine, bool(service_exists), now, placement, old, status, list(old.get("conditions") or []), settings=settings, seen=seen)
    step.foreign = in_the_way(obj, pods)
    if isinstance(service_exists, dict) and controller_uid(service_exists) != obj["metadata"].get("uid"):
        step.foreign.insert(0, {"kind": "Service", **service_exists})
    elif isinstance(service_exists, dict):
        step.service_uid = str(service_exists["metadata"].get("uid") or "")
    step.job, step.spec_error = seen.usable, seen.spec_error
    step.nodes = {n["metadata"]["name"]: n for n in nodes} if nodes is not None else None
    step.grow_to = grow_to
    step.lighthouse = lighthouse
    step.gang = current_gang(seen, mine)
    step.spares_waiting = sum(1 for p in job_spares(obj, pods) if restart_of(p) == seen.status.restarts and pod_phase(p) == "Running" and not p["metadata"].get("deletionTimestamp"))
    step.status["succeededRanks"] = finished_ranks(seen.status, mine, seen.status.restarts)
    step.n = step.job.spec.nodes if step.job else 0
    return step


REJECTED = reasons.POD_REJECTED
"""Reason of the Failed condition of a job whose pods or Service the API server refuses as invalid (400/422)."""


def rejected_status(obj: dict[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """The status of a job whose objects the API server refuses as invalid: phase Failed, ``Failed=True`` reason :data:`REJECTED`.

    Such a refusal (e.g. "cannot be handled as a Pod" for a quantity the
    server cannot parse) repeats on every try, so the job ends rather than
    retrying; the next pass sees a Failed job and deletes any rank created
    before the refusal (:data:`~railtrain.operator.job.phases.terminal.STAY_TERMINAL`).

    Args:
        obj: the TrainingJob as read; message: the sentence for the condition (the server's words).
        now: current time (UTC).

    Returns:
        The whole new status (write it with :func:`status_patch`).
    """
    old = dict(obj.get("status") or {})
    generation = obj["metadata"].get("generation")
    conds, _ = cond.set_condition(list(old.get("conditions") or []), cond.FAILED, True, REJECTED, message, now, generation)
    return {**old, "phase": cond.FAILED, "conditions": conds, "observedGeneration": generation, "completionTime": old.get("completionTime") or format_time(now)}


def gang_ever_created(status: TrainingJobStatus | dict[str, Any] | None) -> bool:
    """Whether a job's status shows that a gang of it was ever admitted or created (pure).

    Args:
        status: the job's ``status``, read through the model or as stored (None: never written).

    Returns:
        False only for a job waiting for its first admission: phase Pending (or
        no status), and no admission record, placement, admitted size, hold,
        start time, succeeded rank, restart or requeue. Such a job owns no pod,
        so a rank's name missing from its label list can only be held by
        someone else's pod.
    """
    s = read_status(status)
    if s.phase not in (None, cond.PENDING):
        return True
    return any((s.admission, s.placement, s.admitted_nodes, s.hold, s.start_time, s.succeeded_ranks, s.restarts, s.requeues))


def missing_names(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[str]:
    """Rank pod names absent from ``pods``: the controller reads these by name, since a pod in the way need not carry the job's labels.

    A rank held by a pod of another name (a hot spare that took it, :mod:`railtrain.operator.job.spares`) is not
    missing: its ``<job>-<rank>`` name is not read on every reconcile while the spare holds it."""
    have = {p["metadata"]["name"] for p in pods}
    held = {rank_of(p) for p in owned(obj, pods)}
    return [name for rank, name in enumerate(rank_names(obj)) if name not in have and rank not in held]


def finish(step: Step, phase: str) -> Plan:
    """Write the phase, conditions, placement and times into the step's status and return its plan."""
    st, out = step.status, step.out
    st["phase"] = phase
    st["conditions"] = step.conds
    st["observedGeneration"] = step.meta.get("generation")
    staying = [p for p in current_gang(step.observed_job, step.pods) if p["metadata"]["name"] not in out.delete_pods]  # pods deleted now hold no node
    st["placement"] = placement_entries(staying, step.observed.placement, step.placed) or st.get("placement", [])
    st["admittedNodes"] = step.released
    if phase in cond.TERMINAL_PHASES and not st.get("completionTime"):
        st["completionTime"] = format_time(step.now)
    recorded = attempts.track(step.observed, st, step.now, step.meta.get("creationTimestamp"), step.state)  # status.goodput (operator/job/attempts.py)
    if recorded is not None:
        st["goodput"] = recorded
    out.status = {k: v for k, v in st.items() if v is not None}
    out.status_changed = out.status != step.old
    return out


def plan(
    obj: Observed | dict[str, Any], pods: list[dict[str, Any]], service_exists: dict[str, Any] | bool | None, now: datetime, placement: Placement | Refusal | None = None,
    nodes: list[dict[str, Any]] | None = None, grow_to: int | None = None, settings: PlanSettings = PlanSettings(), lighthouse: LighthouseSeen | None = None,
) -> Plan:
    """Compute the actions and the new status of one job: one pass of the phase machine.

    Args:
        obj: the TrainingJob as observed in this pass (:func:`~railtrain.operator.job.observed.observe_job`:
            its spec parsed and checked once), or as read from the API server (with metadata.uid,
            metadata.generation and status).
        pods: every pod labelled with this job's name, any restart count, plus
            any pod holding one of its ranks' names (:func:`missing_names`);
            only pods whose controller ownerReference is the job's uid are
            acted on, the others in the way of a rank are reported.
        service_exists: the rendezvous Service as read (None when it does not exist);
            a Service the job does not own is reported and the gang waits. A
            bool says only whether it exists (and that it is the job's).
        now: current time (UTC, timezone-aware).
        placement: the admission pass's answer for this job, when it was asked
            (:func:`gang_request` returned a request).
        nodes: every v1 Node, when read (node loss and quarantine are judged only then).
        grow_to: for an elastic gang below spec.nodes, the largest size that
            fits now (:func:`railtrain.operator.job.resize.grow_size`).
        settings: the operator's plan settings (:class:`~railtrain.operator.job.plansettings.PlanSettings`):
            its fabric profile, rendered into the pods it creates, and the platform's bound on nodes
            quarantined per hour (the defaults: no fabric variables, no bound).
        lighthouse: a job with ``spec.faultTolerance``: its Lighthouse pod and Service as read
            (:class:`~railtrain.operator.job.lighthouse.LighthouseSeen`); None: not read, nothing decided about them.

    Returns:
        A :class:`Plan`. It never raises on bad stored specs: those become phase
        Failed with reason InvalidSpec.
    """
    step = observe(obj, pods, service_exists, now, placement, nodes, grow_to, settings, lighthouse)
    phase, _ = advance(step)
    return finish(step, phase)
