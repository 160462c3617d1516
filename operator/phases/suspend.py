"""Suspend and resume (``runPolicy.suspend``, as batch/v1 Job's ``spec.suspend``)."""

from __future__ import annotations

from railtrain.operator import conditions as cond
from railtrain.operator.phases.step import Step
from railtrain.operator.phases.transition import ACTIVE, Transition


def _requested(step: Step) -> bool:
    return step.job.spec.run_policy.suspend


def _suspend(step: Step) -> str:
    step.delete(step.gang)
    # batch/v1 Job semantics: suspending stops the activeDeadlineSeconds timer
    # and resuming restarts it; the timer counts from startTime, which is set
    # again when the resumed gang is first healthy.
    step.status["startTime"] = None
    step.set_condition(cond.SUSPENDED, True, "Suspended", "runPolicy.suspend is true: the gang is stopped", "Normal")
    step.set_condition(cond.RUNNING, False, "Suspended", "the job is suspended")
    step.set_condition(cond.SCHEDULED, False, "Suspended", "the gang is stopped; its nodes are free")
    return cond.SUSPENDED


def _was_suspended(step: Step) -> bool:
    return cond.find(step.conds, cond.SUSPENDED) is not None


def _resume(step: Step) -> None:
    step.set_condition(cond.SUSPENDED, False, "Resumed", "runPolicy.suspend is false: the job is admitted again", "Normal")


SUSPEND = Transition("suspend", ACTIVE, _requested, _suspend, "runPolicy.suspend true: every pod is deleted and startTime cleared (the deadline timer restarts on resume); phase Suspended.")
RESUME = Transition(
    "resume", ACTIVE, _was_suspended, _resume,
    "runPolicy.suspend false after a suspension: Suspended turns False and the job is admitted again.",
)
