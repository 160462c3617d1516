"""Kueue's eviction: a Kueue job whose Workload no longer admits it stops its whole gang and waits to be admitted again.

The runtime reads the job's Workload and, when Kueue has evicted it (preempted,
deactivated, deleted, ...) while the job holds nodes, hands the planner a
refusal with reason :data:`~railtrain.crds.reasons.EVICTED_BY_KUEUE`
(:func:`railtrain.operator.job.kueuestatus.stop_for`). This row then deletes
every pod of the gang at once (Kueue's ``stopJob``: a gang is never left half
running), voids the admission (Scheduled False, which ends the record's force),
and says Kueue's reason in the condition and a Warning Event. The restart
counter is not raised: no backoffLimit is spent on Kueue's decision. Once the
pods are gone the runtime clears the Workload's quota reservation so Kueue can
queue it again (:func:`railtrain.operator.job.kueuestatus.requeued_status`).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition
from railtrain.operator.scheduling.refusal import Refusal


def _evicted(step: Step) -> bool:
    return isinstance(step.placement, Refusal) and step.placement.reason == reasons.EVICTED_BY_KUEUE


def _stop(step: Step) -> str:
    message = step.placement.message
    step.delete([p for p in step.gang if not p["metadata"].get("deletionTimestamp")])
    step.released = None  # every node is freed: no admitted gang any more
    if step.is_true(cond.RUNNING):
        step.set_condition(cond.RUNNING, False, reasons.EVICTED_BY_KUEUE, message)
    step.set_condition(cond.SCHEDULED, False, reasons.EVICTED_BY_KUEUE, message, "Warning")
    step.out.log.append(f"stopped the whole gang: {message}")
    return cond.PENDING


KUEUE_EVICTED = Transition(
    "kueue-evicted", ACTIVE, _evicted, _stop,
    "Kueue evicted the job's Workload while it held nodes: every pod of the gang is deleted, Scheduled False with Kueue's reason (phase Pending).",
)
