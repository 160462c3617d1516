"""A vanished rank: a released gang's pod deleted, evicted or preempted while the other ranks run.

Recreating only that rank next to the survivors leaves a static torchrun
world waiting in a rendezvous that never completes. A vanished rank is a gang
failure: the whole gang restarts (an infrastructure restart), with reason
``RankVanished`` naming the pod and, where the API tells, what removed it:
the pod's ``DisruptionTarget`` condition (Kubernetes pod disruption
conditions) while it terminates, else "deleted".

Only a gang whose Scheduled condition is True counts: the operator's own
deletions (a restart, a gang timeout, a suspension, an elastic shrink)
first turn Scheduled False or change the restart count.

With hot spares (``spec.spares``, ``runPolicy.restartInPlace``) and a spare
pod waiting, a rank whose pod is still terminating is not vanished yet: its
supervisor, told to stop, has told the gang's coordinator it is leaving and
stays until a spare took its rank (crds/supervisor.py: ``LINGER_SECONDS``),
and the progress reader then labels the spare with the rank. Once the pod is
gone and no pod carries its rank, it has vanished as before.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import is_gated, rank_of, restart_of
from railtrain.operator.job.records import admission_record
from railtrain.operator.job.phases.restart import restart_infrastructure
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition

DISRUPTIONS = {
    "PreemptionByScheduler": "preempted by the scheduler",
    "PreemptionByKubeScheduler": "preempted by the scheduler",
    "EvictionByEvictionAPI": "evicted (Eviction API, e.g. a node drain)",
    "DeletionByTaintManager": "deleted by the taint manager (a NoExecute taint on its node)",
    "DeletionByPodGC": "deleted by the pod garbage collector",
    "TerminationByKubelet": "terminated by the kubelet (node pressure or shutdown)",
}
"""``DisruptionTarget`` condition reasons → what removed the pod."""


def removed_by(pod: dict[str, Any]) -> str:
    """What removed a terminating pod, from its DisruptionTarget condition; "deleted" when the API does not say."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return DISRUPTIONS.get(c.get("reason", ""), f"disrupted ({c.get('reason')}: {c.get('message', '')})")
    return "deleted"


def vanished(step: Step) -> list[tuple[int, str]]:
    """``(rank, description)`` of every rank below the gang size whose pod is gone or being deleted, in a released gang."""
    if step.released is None or not step.is_true(cond.SCHEDULED):
        return []
    record = admission_record(step.state)
    if record is not None and not record.created:
        return []  # admitted ranks still being created (or to be created after an operator crash): not vanished
    job = step.meta["name"]
    live = {rank_of(p) for p in step.gang} | step.done  # a rank that exited 0 is complete, whatever removed its pod
    terminating = {rank_of(p): p for p in step.pods if restart_of(p) == step.restarts and p["metadata"].get("deletionTimestamp")}
    out = []
    for rank in range(step.n):
        if rank in live or rank in step.held():
            continue
        pod = terminating.get(rank)
        name = pod["metadata"]["name"] if pod else f"{job}-{rank}"
        out.append((rank, f"pod {name} (rank {rank}) was {removed_by(pod) if pod else 'deleted'}"))
    return out


def _any_vanished(step: Step) -> bool:
    return bool(vanished(step)) and any(not is_gated(p) for p in step.gang)


def _restart(step: Step) -> str:
    gone = "; ".join(d for _, d in vanished(step))
    return restart_infrastructure(step, reasons.RANK_VANISHED, f"{gone} while the gang ran")




def _gang_gone(step: Step) -> bool:
    """Whether an admission record is in force and already created, but the gang has no released pod left (pure).

    An admitted gang's pods are created pinned and ungated from ``status.admission``, so a gang under a created
    record with no released pod left is gone: its ranks' pods were removed, and the status that should have said why
    was not written (the operator's own suspend, gang timeout or restart whose status write was refused with 409
    after its deletions: the write is dropped, the deletions are not), or someone removed every pod at once. Ranks
    that exited 0 do not count as gone: a gang all of whose ranks exited 0 is the success row's.
    """
    record = admission_record(step.state)
    if record is None or not record.created or any(not is_gated(p) for p in step.gang):
        return False
    size = len(record.nodes)
    return not all(r in step.done for r in range(size))


def _void_admission(step: Step) -> None:
    """Void the record: the job waits for admission again, and no pass creates gated pods under a record.

    No admission pass releases a job whose record is in force (:func:`railtrain.operator.job.request.admission_request`),
    so a missing rank created under it (gated, by ``create-missing-ranks``) was never released: the job stayed
    Pending behind a scheduling gate forever. With Scheduled False the job takes its turn in the queue like a new
    one, and a gated pod left over from such a pass is released by that admission.
    """
    step.status["admission"] = None
    step.status["placement"] = None
    step.status["topology"] = None
    step.set_condition(
        cond.SCHEDULED, False, reasons.GANG_GONE,
        "every pod of the admitted gang is gone without a recorded reason; the job waits for admission again", "Normal",
    )


RANK_VANISHED = Transition(
    "rank-vanished", ACTIVE, _any_vanished, _restart,
    "A released rank's pod was deleted, evicted or preempted: the whole gang restarts, reason RankVanished naming the pod and what removed it.",
)
GANG_GONE = Transition(
    "admitted-gang-gone", ACTIVE, _gang_gone, _void_admission,
    "status.admission is in force and created but the gang has no released pod left (a status write refused after its "
    "deletions, or every pod removed at once): the record is voided and Scheduled False (GangGone), so the job waits for "
    "admission again instead of getting gated pods no pass releases.",
)
