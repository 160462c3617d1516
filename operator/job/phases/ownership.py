"""Pods in the way: a pod the job does not own that holds one of its ranks' names.

The operator acts only on pods whose controller ownerReference is the job's
uid (Kubernetes controller convention). A pod with a rank's name but another
owner, or none, is never adopted, deleted or counted: it is reported by the
Scheduled condition and a Warning Event naming it, and the rank waits until
the name is free.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import controller_uid
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition



def service_in_the_way(step: Step) -> bool:
    """Whether a Service the job does not own holds the rendezvous Service's name (the gang then waits: no pod is created)."""
    return any(o.get("kind") == "Service" for o in step.foreign)


def describe(pod: dict[str, Any]) -> str:
    """``Pod name (owned by Kind/name)`` or ``Service name (no controller ownerReference)``."""
    meta = pod["metadata"]
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller") and r.get("uid") == controller_uid(pod)), None)
    owner = f"owned by {ref.get('kind')}/{ref.get('name')}" if ref else "no controller ownerReference"
    return f"{pod.get('kind') or 'Pod'} {meta['name']} ({owner})"


def _in_the_way(step: Step) -> bool:
    return bool(step.foreign)


def _report(step: Step) -> None:
    names = ", ".join(describe(p) for p in step.foreign)
    step.set_condition(
        cond.SCHEDULED, False, reasons.SERVICE_NAME_TAKEN if service_in_the_way(step) else reasons.POD_NAME_TAKEN,
        f"objects not owned by this TrainingJob hold names it needs: {names}; the operator never adopts or deletes them, delete or rename them to let the gang start",
        "Warning",
    )


def _was_reported(step: Step) -> bool:
    c = cond.find(step.conds, cond.SCHEDULED)
    return not step.foreign and bool(c and c.get("reason") in (reasons.POD_NAME_TAKEN, reasons.SERVICE_NAME_TAKEN))


def _clear(step: Step) -> None:
    step.set_condition(cond.SCHEDULED, False, reasons.POD_NAMES_FREE, "the pods in the way are gone; the gang waits for admission", "Normal")


FOREIGN_PODS = Transition(
    "pods-in-the-way", ACTIVE, _in_the_way, _report,
    "A pod (or Service) the job does not own holds a rank's (or the rendezvous Service's) name: Scheduled False (PodNameTaken, ServiceNameTaken) and a Warning Event name it; it is never adopted.",
)
FOREIGN_PODS_GONE = Transition("pods-in-the-way-gone", ACTIVE, _was_reported, _clear, "The pods in the way are gone: Scheduled False (PodNamesFree).")
