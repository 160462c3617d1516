"""Rows that run on every pass of an active job and decide no phase: stale pods, the rendezvous Service, the admitted size.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.operator.job import render
from railtrain.operator.job.pods import admitted_nodes, is_gated, rank_of, restart_of
from railtrain.operator.job.records import admission_record, hold_record
from railtrain.operator.job.phases import ownership
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition, always


def _delete_stale(step: Step) -> None:
    step.delete([p for p in step.pods if restart_of(p) != step.restarts and not p["metadata"].get("deletionTimestamp")])


def _gang_after(step: Step) -> list[dict[str, Any]]:
    """The pods the current gang will have after this pass: its live pods not being deleted, plus those being created."""
    return [p for p in step.gang if p["metadata"]["name"] not in step.out.delete_pods] + step.out.create_pods


def service_change(step: Step) -> str:
    """What the rendezvous Service needs this pass (pure): ``"create"``, ``"delete"`` or "".

    The Service lives with the gang (issue 26, item 8: 400 queued jobs held 400 Services, with their Endpoints and
    EndpointSlices). It is created in the pass that creates the gang's first pod (written after the admission record,
    with the pods) or that finds a gang without it, and deleted when the job's gang is gone and the job holds no node:
    a job waiting for its first admission, re-queued after a gang timeout or ``Unschedulable``, or whose gang left for
    any other reason. A restarting gang whose ``status.hold`` is in force keeps it (its next gang is admitted on the
    held nodes at once). Only the job's own Service, read as an object, is ever deleted (its uid is the precondition);
    a Service someone else owns is reported (operator/job/phases/ownership.py) and never touched.
    """
    if step.job is None or ownership.service_in_the_way(step):
        return ""
    if _gang_after(step):
        return "" if step.service_exists else "create"
    if step.service_exists and step.service_uid and hold_record(step.state, step.now) is None:
        return "delete"
    return ""


def _service(step: Step) -> None:
    if service_change(step) == "create":
        step.out.create_service = render.render_service(step.job, step.meta.get("namespace", ""), step.meta.get("uid", ""))
    else:
        step.out.delete_service = step.service_uid


def _admitted_size(step: Step) -> None:
    record = admission_record(step.state)
    step.n = len(record.nodes) if record is not None else admitted_nodes(step.job.spec, step.gang)
    step.delete([p for p in step.gang if rank_of(p) >= step.n])  # an elastic gang's ranks above its admitted size
    step.gang = [p for p in step.gang if rank_of(p) < step.n]
    step.released = step.n if record is not None or any(not is_gated(p) for p in step.gang) else None
    if record is not None and not record.created and step.complete():  # every admitted rank's pod has been seen
        step.status["admission"] = record.model_copy(update={"created": True}).to_api()


DELETE_STALE = Transition("delete-stale-pods", ACTIVE, always, _delete_stale, "Pods of an earlier restart count are deleted.")
RENDEZVOUS_SERVICE = Transition(
    "rendezvous-service", ACTIVE, lambda s: bool(service_change(s)), _service,
    "The headless rendezvous Service lives with the gang: created with the gang's pods (or when a gang lacks it), deleted when "
    "the gang is gone and the job holds no node (waiting for admission or re-queued; a restart's status.hold keeps it).",
)
ADMITTED_SIZE = Transition(
    "admitted-size", ACTIVE, always, _admitted_size,
    "The gang size is the size of status.admission, else the admitted size a released pod carries, else spec.nodes; ranks above it are "
    "deleted; status.admission is marked created once every rank's pod has been seen.",
)
