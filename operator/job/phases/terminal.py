"""Terminal phases and specs that cannot be read: a job that ended stays ended.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import current_gang
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition, always


def _stay(step: Step) -> str:
    if step.old_phase == cond.FAILED:  # a failed job's remaining ranks are stopped (idempotent)
        step.stop(current_gang(step.observed_job, step.pods))
    step.released = step.observed.admitted_nodes
    if not step.is_true(step.old_phase):  # a status written without its condition: repair the summary, keep the phase
        step.set_condition(step.old_phase, True, step.old_phase, f"status.phase is {step.old_phase}")
    return step.old_phase


def _invalid(step: Step) -> bool:
    return step.job is None


def _fail_invalid(step: Step) -> str:
    step.set_condition(cond.FAILED, True, reasons.INVALID_SPEC, f"spec does not match the TrainingJob API: {step.spec_error}", "Warning")
    return cond.FAILED


STAY_TERMINAL = Transition(
    "stay-terminal", cond.TERMINAL_PHASES, always, _stay,
    "Succeeded and Failed never change; a Failed job's unfinished pods are deleted.",
)
INVALID_SPEC = Transition(
    "invalid-spec", ACTIVE, _invalid, _fail_invalid,
    "A stored spec the models refuse fails the job with reason InvalidSpec.",
)
