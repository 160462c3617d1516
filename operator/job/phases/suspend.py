"""Suspend and resume (``runPolicy.suspend``, as batch/v1 Job's ``spec.suspend``).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.phases.agreement import not_running_detail
from railtrain.operator.job.phases.housekeeping import service_change
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition


def _requested(step: Step) -> bool:
    return step.job.spec.run_policy.suspend


def _suspend(step: Step) -> str:
    step.delete(step.gang)
    if service_change(step) == "delete":  # a suspended job holds no node, so no rendezvous Service either
        step.out.delete_service = step.service_uid
    # batch/v1 Job semantics: suspending stops the activeDeadlineSeconds timer
    # and resuming restarts it; the timer counts from startTime, which is set
    # again when the resumed gang is first healthy.
    step.status["startTime"] = None
    step.set_condition(cond.SUSPENDED, True, reasons.SUSPENDED, "runPolicy.suspend is true: the gang is stopped", "Normal")
    step.set_condition(cond.RUNNING, False, reasons.SUSPENDED, "the job is suspended")
    step.set_condition(cond.SCHEDULED, False, reasons.SUSPENDED, "the gang is stopped; its nodes are free")
    # the stopped gang's nodes are free for other jobs: where it ran is no longer where it is
    step.status["placement"] = None
    step.status["topology"] = None
    return cond.SUSPENDED


def _was_suspended(step: Step) -> bool:
    return cond.find(step.conds, cond.SUSPENDED) is not None




def _resume(step: Step) -> None:
    """Say where a resumed job stands: waiting for admission (like a new job) until Scheduled is True again.

    Runs on every pass after a suspension (before the admission rows), so the
    messages follow the job: Suspended False says whether the job waits for
    admission or was admitted again; Running False, still the suspension's or
    the waiting one, becomes the waiting one, then which ranks are not yet running.
    """
    admitted = step.is_true(cond.SCHEDULED)
    said = "the job was admitted again" if admitted else "the job waits for admission"
    step.set_condition(cond.SUSPENDED, False, reasons.RESUMED, f"runPolicy.suspend is false: {said}", "Normal")
    running = step.condition(cond.RUNNING)
    if running is not None and running.status == "False" and running.reason in (reasons.SUSPENDED, reasons.RESUMED):
        if admitted:
            step.set_condition(cond.RUNNING, False, reasons.RANKS_NOT_RUNNING, not_running_detail(step))
        else:
            step.set_condition(cond.RUNNING, False, reasons.RESUMED, "resumed after a suspension: the job waits for admission")


SUSPEND = Transition("suspend", ACTIVE, _requested, _suspend, "runPolicy.suspend true: every pod (and the rendezvous Service) is deleted, startTime cleared (the deadline timer restarts on resume) and status.placement/topology cleared; phase Suspended.")
RESUME = Transition(
    "resume", ACTIVE, _was_suspended, _resume,
    "runPolicy.suspend false after a suspension: Suspended turns False and the job waits for admission like a new job (Running False says so) until admitted again.",
)
