"""Success: every rank of the gang exited 0.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition


def _all_succeeded(step: Step) -> bool:
    return step.complete() and all(p == "Succeeded" for p in step.phases())


def _succeed(step: Step) -> str:
    step.set_condition(cond.RUNNING, False, reasons.COMPLETED, "every rank exited 0")
    step.set_condition(cond.SUCCEEDED, True, reasons.COMPLETED, f"all {step.n} ranks exited 0", "Normal")
    return cond.SUCCEEDED


ALL_SUCCEEDED = Transition("all-succeeded", ACTIVE, _all_succeeded, _succeed, "Every rank of the gang Succeeded: phase Succeeded.")
