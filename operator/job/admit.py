"""One admission pass (pure): the jobs, pods and nodes as read in, every decision out, and which of them to write.

The operator's pass (:meth:`railtrain.operator.reconciler.Reconciler.admission_pass`) and ``railtrain plan``
(:func:`railtrain.cli.plan.plan`) both run it; neither has a copy of its steps:

1. the queue (:func:`read_queue`): the waiting jobs, the capacity promised to admitted and restarting gangs
   and the holds (:func:`railtrain.operator.job.ledger.read`), with a ready job whose old pod the active
   pods still show kept back (:meth:`~railtrain.operator.job.ledger.Ledger.wait_for_old_pods`);
2. the decisions (:func:`decide`): one snapshot and one :func:`railtrain.operator.scheduling.queue.schedule`
   per GPU resource name, on the active pods plus the promised ones;
3. the writes: in :func:`~railtrain.operator.scheduling.queue.apply_order`, the decisions of ready jobs
   that would change something (:func:`already_refused`), each placement with its nodes' annotations
   (:func:`railtrain.operator.scheduling.placement.with_node_values`).

Reading (which namespaces, which caches) and writing stay with the caller.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from railtrain.crds import kueue as kueue_names
from railtrain.crds import reasons
from railtrain.operator.job import kueueadmit, ledger
from railtrain.operator.job.kueueadmit import KueueAdmission
from railtrain.operator.job.workload import queue_name
from railtrain.operator.job.conditions import SCHEDULED, condition_of
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.scheduling.placement import PINNED_NODE_UNAVAILABLE, GangRequest, Placement, with_node_values
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.queue import Decision, apply_order, schedule
from railtrain.operator.scheduling.snapshot import ClusterSnapshot, snapshot

QUEUE_REQUIRED = (
    f"metadata.labels: this cluster admits TrainingJobs only through Kueue (the operator runs with --kueue-only); "
    f"add the label {kueue_names.QUEUE_LABEL} naming a LocalQueue of this namespace"
)
"""The sentence of a job refused for naming no LocalQueue (:attr:`~railtrain.operator.job.plansettings.PlanSettings.kueue_only`)."""


@dataclass(frozen=True)
class Admissions:
    """What one pass decided.

    Attributes:
        queue: the queue it read (waiting jobs, promised pods, holds, and the jobs it could not read).
        decisions: every decision, GPU resource names in sorted order, queue order within one.
        snapshots: GPU resource name → the snapshot its jobs were scheduled on.
        writes: the decisions to write, in apply order (admissions first): those of ready jobs that
            change something, each placement carrying its nodes' annotations and warnings.
    """

    queue: ledger.Ledger
    decisions: list[Decision] = field(default_factory=list)
    snapshots: dict[str, ClusterSnapshot] = field(default_factory=dict)
    writes: list[Decision] = field(default_factory=list)

    def requests(self, gpu_resource: str) -> list[GangRequest]:
        """The waiting jobs' requests for ``gpu_resource``, in the order the queue was read."""
        return [request for _, _, request in self.queue.waiting.values() if request.gpu_resource == gpu_resource]


def read_queue(jobs: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]], active: Iterable[dict[str, Any]], now: datetime | None) -> ledger.Ledger:
    """The queue of one pass (pure).

    Args:
        jobs: the TrainingJobs to admit from, as read (jobs in namespaces being deleted already left out).
        pods: every pod labelled with a job's name, read before ``jobs`` (a job read after its pods is
            never older than what they show).
        active: every non-terminal pod of the cluster (railtrain's and others').
        now: the time of the pass (UTC).

    Returns:
        The :class:`~railtrain.operator.job.ledger.Ledger`, with a ready job whose old pod ``active``
        still shows marked not ready, and such a holder left out of the queue.
    """
    found = ledger.read(jobs, ledger.by_job(pods), now)
    found.wait_for_old_pods(active)
    return found


def decide(
    queue: ledger.Ledger, active: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]], settings: PlanSettings,
    kueue: Mapping[str, KueueAdmission] | None = None,
) -> Admissions:
    """Schedule every waiting job of ``queue`` (pure).

    Args:
        queue: from :func:`read_queue`.
        active: every non-terminal pod (the promised pods of ``queue`` are added here).
        nodes: every v1 Node.
        settings: the topology levels, and the fabric profile whose per-node values placed ranks get.
        kueue: ``namespace/name`` → the Workload of each waiting job labelled ``kueue.x-k8s.io/queue-name``
            (:mod:`railtrain.operator.job.kueueadmit`: such jobs are decided first, inside Kueue's admission;
            one missing here waits for its Workload).

    Returns:
        The :class:`Admissions`.
    """
    requests: dict[str, list[GangRequest]] = defaultdict(list)
    kueues: dict[str, list[GangRequest]] = defaultdict(list)
    refused: list[Decision] = []
    for job, _, request in queue.waiting.values():
        labelled = queue_name(job)
        if settings.refused_without_queue(labelled):
            refused.append(Decision(request.job, Refusal(reasons.QUEUE_NAME_REQUIRED, QUEUE_REQUIRED, warning=True)))
            continue
        (kueues if settings.queue_of(labelled) else requests)[request.gpu_resource].append(request)  # a default queue's label is being written
    taken = [*active, *queue.promised]  # the ledger: every bound or pinned pod, plus admitted ranks not created yet and ended ranks of live gangs
    decisions: list[Decision] = refused
    snapshots: dict[str, ClusterSnapshot] = {}
    for resource in sorted(set(requests) | set(kueues)):
        theirs, snapshots[resource] = kueueadmit.place(kueues[resource], kueue or {}, snapshot(nodes, taken, resource, settings.levels))
        decisions.extend(theirs)  # Kueue's admitted capacity is taken before railtrain's own queue is placed
        decisions.extend(schedule(requests[resource], snapshots[resource], queue.holds_for(resource)))
    by_name = {n["metadata"]["name"]: n for n in nodes}
    writes = [
        Decision(d.job, with_node_values(d.result, settings.fabric, by_name))
        for d in apply_order(decisions)
        if queue.waiting[d.job][1] and not already_refused(queue.observed.get(d.job, queue.waiting[d.job][0]), d.result)
    ]
    return Admissions(queue, decisions, snapshots, writes)


def admission_pass(
    jobs: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]], active: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]],
    now: datetime | None, settings: PlanSettings,
) -> Admissions:
    """The whole pass on what was read (pure): :func:`read_queue`, then :func:`decide` (arguments as theirs)."""
    return decide(read_queue(jobs, pods, active, now), active, nodes, settings)


def already_refused(job: Observed | dict[str, Any], result: Placement | Refusal) -> bool:
    """Whether ``result`` is a refusal the job's Scheduled condition already states word for word (pure).

    Such a decision would write nothing, so the pass skips it, and with it the
    job's fresh reads (a GET, a pod LIST and a Service GET per waiting job and
    pass: at 500 waiting jobs that was the cost of a pass). A refusal that
    deletes a gang (:data:`~railtrain.operator.scheduling.placement.PINNED_NODE_UNAVAILABLE`)
    is never skipped. ``job`` is the cached object, which holds the operator's
    own last status write (write-through), so a changed refusal is never
    mistaken for an unchanged one.
    """
    if not isinstance(result, Refusal) or result.reason == PINNED_NODE_UNAVAILABLE:
        return False
    found = condition_of(observed(job).status, SCHEDULED)
    return found is not None and found.status == "False" and found.reason == result.reason and found.message == result.message
