"""Rows that run on every pass of an active job and decide no phase: stale pods, the Service, the admitted size."""

from __future__ import annotations

from railtrain.operator import render
from railtrain.operator.gang import admission_record, admitted_nodes, is_gated, rank_of, restart_of
from railtrain.operator.phases.step import Step
from railtrain.operator.phases.transition import ACTIVE, Transition, always


def _delete_stale(step: Step) -> None:
    step.delete([p for p in step.pods if restart_of(p) != step.restarts and not p["metadata"].get("deletionTimestamp")])


def _no_service(step: Step) -> bool:
    return not step.service_exists


def _create_service(step: Step) -> None:
    step.out.create_service = render.render_service(step.job, step.meta.get("namespace", ""), step.meta.get("uid", ""))


def _admitted_size(step: Step) -> None:
    record = admission_record(step.status)
    step.n = len(record["nodes"]) if record is not None else admitted_nodes(step.job.spec, step.gang)
    step.delete([p for p in step.gang if rank_of(p) >= step.n])  # an elastic gang's ranks above its admitted size
    step.gang = [p for p in step.gang if rank_of(p) < step.n]
    step.released = step.n if record is not None or any(not is_gated(p) for p in step.gang) else None
    if record is not None and not record.get("created") and step.complete():  # every admitted rank's pod has been seen
        step.status["admission"] = {**record, "created": True}


DELETE_STALE = Transition("delete-stale-pods", ACTIVE, always, _delete_stale, "Pods of an earlier restart count are deleted.")
CREATE_SERVICE = Transition("create-service", ACTIVE, _no_service, _create_service, "The headless rendezvous Service is created when missing.")
ADMITTED_SIZE = Transition(
    "admitted-size", ACTIVE, always, _admitted_size,
    "The gang size is the size of status.admission, else the admitted size a released pod carries, else spec.nodes; ranks above it are "
    "deleted; status.admission is marked created once every rank's pod has been seen.",
)
