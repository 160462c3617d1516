"""The Kueue half of an admission pass (pure): Kueue's jobs wait for their Workload, admitted ones are placed inside it first.

Both admission backends share one ledger, the snapshot of an admission pass
(:func:`railtrain.operator.job.admit.decide`). Per GPU resource, before
railtrain's own queue is scheduled:

* a Kueue job (:func:`railtrain.operator.job.workload.queue_name`) whose Workload
  is not admitted gets a refusal :data:`~railtrain.crds.reasons.WAITING_FOR_KUEUE`
  quoting Kueue's reason (its Scheduled condition; no pod exists);
* an admitted one is placed inside its assignment, ranks in rail order
  (:func:`railtrain.operator.scheduling.kueue.place_in_assignment`), and the nodes Kueue
  assigned to it are taken from the snapshot whether it could be placed now or
  not, so railtrain's own queue never takes capacity Kueue has admitted.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from railtrain.crds import reasons
from railtrain.operator.job.kueuestatus import KueueView, exceeds_quota, pending_sentence
from railtrain.operator.scheduling.kueue import assigned_nodes, place_in_assignment
from railtrain.operator.scheduling.placement import GangRequest, Placement
from railtrain.operator.scheduling.queue import Decision, queue_key
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class KueueAdmission:
    """What the pass knows of one Kueue job's Workload.

    Attributes:
        queue: the LocalQueue the job names.
        view: the Workload as read (:func:`railtrain.operator.job.kueuestatus.view`).
        node_labels: the admitted flavors' ``spec.nodeLabels`` together (empty until admitted).
        tolerations: the admitted flavors' ``spec.tolerations``.
    """

    queue: str
    view: KueueView = field(default_factory=KueueView)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def place(requests: Sequence[GangRequest], admissions: Mapping[str, KueueAdmission], cluster: ClusterSnapshot) -> tuple[list[Decision], ClusterSnapshot]:
    """Decide every Kueue job of one GPU resource (pure).

    Args:
        requests: the waiting Kueue jobs' requests.
        admissions: ``namespace/name`` → :class:`KueueAdmission` (a job missing here waits, its Workload unknown).
        cluster: the pass's snapshot for the resource.

    Returns:
        ``(decisions, cluster)``: one decision per request, in queue order, and the snapshot less what Kueue's
        admitted jobs take (the placed nodes, and every assigned node of one that could not be placed now).
    """
    out: list[Decision] = []
    for request in sorted(requests, key=queue_key):
        admission = admissions.get(request.job) or KueueAdmission(queue="?")
        view = admission.view
        if not view.admitted:
            out.append(Decision(request.job, Refusal(reasons.WAITING_FOR_KUEUE, pending_sentence(view, admission.queue), warning=exceeds_quota(view), permanent=exceeds_quota(view))))
            continue
        nodes = assigned_nodes(cluster, view.levels, view.domains) if view.domains else None
        request, fewer = within_admitted_count(request, view)
        if fewer is not None:
            out.append(Decision(request.job, fewer))
            continue
        result = place_in_assignment(request, cluster, nodes, admission.node_labels, admission.tolerations)
        taken = [n for r, n in enumerate(result.nodes) if r not in request.fixed] if isinstance(result, Placement) else list(nodes or ())
        cluster = cluster.reserve(taken, request.gpus_per_node, request.needs.requests, holder=request.job)
        out.append(Decision(request.job, result))
    return out, cluster


def within_admitted_count(request: GangRequest, view: KueueView) -> tuple[GangRequest, Refusal | None]:
    """``request`` held to the pod count Kueue admitted (pure): after a partial admission (an elastic job's
    ``minCount``, operator/job/workload.py) only gang sizes up to that count are placed, the largest first as always.

    Returns:
        ``(request, None)``, the request's sizes narrowed when Kueue admitted fewer than it asks; or ``(request,
        refusal)`` when no size the job allows is that small (the admitted count is below every size its
        parallelism allows), with reason :data:`~railtrain.crds.reasons.OUTSIDE_KUEUE_ASSIGNMENT`.
    """
    if not view.count or view.count >= max(request.sizes):
        return request, None
    sizes = tuple(c for c in request.sizes if c <= view.count)
    if not sizes:
        return request, Refusal(reasons.OUTSIDE_KUEUE_ASSIGNMENT, (
            f"Kueue admitted {view.count} pods, fewer than the smallest gang this job's parallelism allows ({min(request.sizes)} nodes); "
            "set spec.elastic.minNodes to a size the parallelism allows"))
    return replace(request, counts=sizes), None
