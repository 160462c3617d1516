"""``runPolicy.activeDeadlineSeconds``: a job running past its deadline fails.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import timedelta

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition


def _passed(step: Step) -> bool:
    deadline = step.job.spec.run_policy.active_deadline_seconds
    started = step.state.start_time
    return bool(deadline and started and step.now >= started + timedelta(seconds=deadline))


def _fail(step: Step) -> str:
    deadline = step.job.spec.run_policy.active_deadline_seconds
    step.stop(step.gang)
    step.set_condition(cond.RUNNING, False, reasons.DEADLINE_EXCEEDED, "the job stopped")
    step.set_condition(cond.FAILED, True, reasons.DEADLINE_EXCEEDED, f"the job ran longer than runPolicy.activeDeadlineSeconds={deadline}", "Warning")
    return cond.FAILED


DEADLINE = Transition("deadline", ACTIVE, _passed, _fail, "Past runPolicy.activeDeadlineSeconds: the gang is stopped; phase Failed (DeadlineExceeded).")
