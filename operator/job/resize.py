"""How large an elastic gang could be now (pure), for growing back once capacity returns.

The running gang's own pods are counted as free (a grow restarts the whole
gang, so its nodes are released first), every other pod holds its capacity,
and the grow takes its turn in the admission queue beside every waiting job
(:func:`railtrain.operator.scheduling.queue.schedule`, the pass that will admit the
restarted gang), at the largest admissible size it is left
(:meth:`railtrain.crds.api.TrainingJobSpec.node_counts`).

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

from railtrain.crds import contract
from railtrain.crds.api import TrainingJobSpec, TrainingJobStatus
from railtrain.crds.kueue import QUEUE_LABEL
from railtrain.operator.scheduling import snapshot as cluster_model
from railtrain.operator.scheduling.queue import Hold, schedule
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.job.stored import read_status
from railtrain.operator.job.request import admission_request
from railtrain.operator.scheduling.placement import GangRequest, Placement
from railtrain.operator.scheduling.topology import DEFAULT_LEVELS


def wants_to_grow(job: Observed | dict[str, Any]) -> bool:
    """Whether ``job`` (as observed, or as read) is a Running elastic job admitted below ``spec.nodes`` (cheap: the spec is
    read from the dict, not validated; the status through the model)."""
    seen = observed(job)
    spec, status = seen.obj.get("spec") or {}, seen.status
    admitted, nodes = status.admitted_nodes, spec.get("nodes", 1)
    if (seen.obj.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL):
        return False  # a Kueue job's size is its admission's: growing would take nodes outside its quota (docs/kueue.md)
    return bool(spec.get("elastic")) and status.phase == "Running" and admitted is not None and admitted < nodes


def grow_due(spec: TrainingJobSpec, status: TrainingJobStatus | Mapping[str, Any], now: datetime) -> bool:
    """Whether a grow may happen now by the clock (pure): ``spec.elastic.growIntervalSeconds`` have passed since the gang
    last started (``status.lastResizeTime``, else ``startTime``; neither: at once). The elastic row
    (:mod:`railtrain.operator.job.phases.elastic`) grows only then, so :func:`grow_size` is needed only then.

    Args:
        spec: the parsed spec of an elastic job (``spec.elastic`` set); status: its status (read through the model by
            :func:`~railtrain.operator.job.stored.read_status` when given as stored); now: UTC.
    """
    status = read_status(status)
    since = status.last_resize_time or status.start_time
    return since is None or now >= since + timedelta(seconds=spec.elastic.grow_interval_seconds)


def grow_size(
    job: Observed | dict[str, Any],
    nodes: list[dict[str, Any]],
    active: list[dict[str, Any]],
    levels: tuple[str, ...] = DEFAULT_LEVELS,
    queue: Sequence[GangRequest] = (),
    holds: Mapping[str, Hold] | None = None,
) -> int | None:
    """The gang size the admission pass would give the job now if its own pods were freed, or None when it gives none.

    The job's grow request (every admissible size, its own priority and
    creationTimestamp, nothing pinned) takes its turn in
    :func:`railtrain.operator.scheduling.queue.schedule` beside every job waiting in
    ``queue``, on one ledger: a waiting job of higher priority, or of equal
    priority that arrived earlier, is placed first and the grow gets only what
    it leaves (issue 15, kind 9). So a job never grows past a waiting job the
    queue puts first, and never restarts into a size the next admission pass
    would not give it.

    Args:
        job: the TrainingJob as observed in this pass (its spec parsed once), or as read.
        nodes: every v1 Node.
        active: every non-terminal pod of the cluster.
        levels: the operator's topology levels.
        queue: the requests of every job waiting for placement now (the job's own is ignored).
        holds: the nodes restarting jobs hold (``namespace/name`` → :class:`~railtrain.operator.scheduling.queue.Hold`):
            taken for the grow as for every other job.

    Returns:
        The number of nodes, or None when the queue leaves it no admissible size.
    """
    seen = observed(job)
    meta = seen.meta
    asked = seen.with_status(seen.status.model_copy(update={"phase": None, "admission": None}))  # as if the gang waited afresh
    entry = admission_request(asked, [], None)
    if entry is None:
        return None
    request = entry[0]
    others = [p for p in active if not (p["metadata"].get("namespace") == meta.get("namespace") and (p["metadata"].get("labels") or {}).get(contract.LABEL_JOB_NAME) == meta["name"])]
    snap = cluster_model.snapshot(nodes, others, seen.job.spec.resources.gpu_resource_name, levels)
    competing = [r for r in queue if r.job != request.job and r.gpu_resource == request.gpu_resource]
    placed = next(d.result for d in schedule([*competing, request], snap, {k: h for k, h in (holds or {}).items() if k != request.job}) if d.job == request.job)
    return len(placed.nodes) if isinstance(placed, Placement) else None
