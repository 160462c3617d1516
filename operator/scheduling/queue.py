"""Gang admission across jobs (pure): one pass over every waiting job, in queue order, on one ledger.

The operator calls :func:`schedule` with every job that waits for placement
(its gang is not fully released to nodes) and a snapshot whose free capacity is
already net of every bound or pinned pod. Jobs are taken in queue order
(:func:`queue_key`): a job that already holds part of its gang first (it is
mid-release), then higher ``spec.priority``, then earlier creationTimestamp,
then name. Each job that fits is placed on what earlier jobs left, and its
nodes are subtracted before the next job is tried, so within one pass no two
jobs are promised the same GPUs and no job ever holds part of the cluster while
waiting for the rest.

The admission rule (``docs/scheduling.md``): a later job may start ahead of an
earlier one only if it cannot delay an earlier job that fits now. Earlier jobs
that fit are placed first in the same pass, even when their pods are still
being created, so a later job sees only what they leave. An earlier job that
does not fit now does not block later ones (no head-of-line blocking): waiting
for it would leave GPUs idle with no promise that it will ever fit, as in
Kueue's BestEffortFIFO queueing. There is no preemption.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from railtrain.crds import reasons
from railtrain.operator.scheduling.snapshot import ClusterSnapshot
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.refusal import Refusal


AVOIDED = "avoided by this job (named by one of its verdicts)"
"""Why a node in a request's ``avoid`` set is not a candidate for that job."""


WAITING_FOR_RESTART = reasons.WAITING_FOR_RESTARTING_GANGS
"""Refusal reason (a Normal Event): the gang would fit but for nodes held for restarting gangs (:class:`Hold`)."""


@dataclass(frozen=True)
class Decision:
    """The pass's answer for one job: ``result`` is a :class:`Placement` or a :class:`Refusal`."""

    job: str
    result: Placement | Refusal


def apply_order(decisions: Sequence[Decision]) -> list[Decision]:
    """The order in which a pass writes its decisions: every admission first, then every refusal, each in queue order (pure).

    Both are computed on one snapshot, so the order changes no decision, only
    when it reaches the API server: an admission starts a gang (a restarted
    one among them, docs/scheduling.md "Restarts keep their nodes"), a
    refusal's status write only informs. At 10,000 GPUs a restart changed the
    refusal message of some 300 waiting jobs; written first, they delayed the
    restarted gang by their writes (docs/bench-operator.md).
    """
    return sorted(decisions, key=lambda d: isinstance(d.result, Refusal))


def queue_key(request: GangRequest) -> tuple[int, int, str, str]:
    """Sort key of the admission queue: partly pinned gangs, then priority (high first), creation time, name."""
    return (0 if request.fixed else 1, -request.priority, request.created, request.job)


@dataclass(frozen=True)
class Hold:
    """Capacity a restarting gang keeps until it is admitted again (``status.hold``, :func:`railtrain.operator.job.request.hold_of`).

    Attributes:
        nodes: the held nodes (one pod of the gang each).
        gpus_per_node: GPUs each pod requests.
        requests: each pod's other requests (cores, bytes, counts).
        gpu_resource: the extended resource name the GPUs are requested as (one admission pass per name).
    """

    nodes: tuple[str, ...]
    gpus_per_node: int
    requests: Mapping[str, float]
    gpu_resource: str = "nvidia.com/gpu"


def schedule(requests: Sequence[GangRequest], cluster: ClusterSnapshot, holds: Mapping[str, Hold] | None = None) -> list[Decision]:
    """Admit waiting gangs in queue order on one shared ledger of promised capacity.

    Args:
        requests: every job waiting for placement that requests the GPU
            resource ``cluster`` accounts (one pass per resource name).
        cluster: free capacity net of every bound or pinned pod.
        holds: ``namespace/name`` → the capacity that restarting job holds
            (its previous nodes). Every other job sees it as taken; the job
            itself sees it free (and :func:`place_gang` gives its ranks those
            nodes back first). Admitting the job replaces its hold.

    Returns:
        One :class:`Decision` per request, in queue order. A job that would fit
        the free capacity but not what earlier jobs of this pass left gets the
        refusal ``WaitingForEarlierJobs`` (a Normal Event), naming them; one
        that would fit but for the nodes restarting gangs hold gets
        :data:`WAITING_FOR_RESTART`, naming those gangs.
    """
    holds = holds or {}
    free = cluster
    for job, hold in holds.items():
        free = free.reserve(hold.nodes, hold.gpus_per_node, hold.requests, holder=job)
    ahead: list[GangRequest] = []
    out: list[Decision] = []
    for request in sorted(requests, key=queue_key):
        own = holds.get(request.job)
        view = free.release(own.nodes, own.gpus_per_node, own.requests, holder=request.job) if own else free
        result = place_gang(request, view.excluding(request.avoid, AVOIDED))
        if isinstance(result, Placement):
            new = [node for rank, node in enumerate(result.nodes) if rank not in request.fixed]
            free = view.reserve(new, request.gpus_per_node, request.needs.requests, holder=request.job)
            ahead.append(request)
        elif ahead and isinstance(place_gang(request, cluster.excluding(request.avoid, AVOIDED)), Placement):
            names = ", ".join(f"{r.job} (priority {r.priority})" for r in ahead[:3]) + (f" and {len(ahead) - 3} more" if len(ahead) > 3 else "")
            result = Refusal(
                reasons.WAITING_FOR_EARLIER_JOBS,
                f"the gang fits the free capacity, but it is promised to jobs ahead in the queue: {names}; "
                "it is admitted once they are placed if capacity is left",
                warning=False,
            )
        elif (holders := sorted(k for k in holds if k != request.job)) and isinstance(place_gang(request, cluster.excluding(request.avoid, AVOIDED)), Placement):
            names = ", ".join(holders[:3]) + (f" and {len(holders) - 3} more" if len(holders) > 3 else "")
            result = Refusal(
                WAITING_FOR_RESTART,
                f"the gang fits the free capacity, but part of it is held for restarting gangs until they are admitted again: {names}",
                warning=False,
            )
        out.append(Decision(request.job, result))
    return out
