"""Creating the gated gang, applying the admission pass's answer, and following the gang to Running.

The admission pass (:mod:`railtrain.operator.admission`) answers a waiting
gang with a :class:`~railtrain.operator.placement.Placement`, applied here by
pinning each pod with a nodeSelector, setting its admitted gang size and
lifting every gate in the same patch (ranks above an elastic gang's admitted
size are deleted), or with a :class:`~railtrain.operator.placement.Refusal`,
kept as the Scheduled condition.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds import contract, fabric
from railtrain.operator import conditions as cond
from railtrain.operator import nvlink, render
from railtrain.operator.cluster import pod_node
from railtrain.operator.gang import is_gated, rank_of, restart_of
from railtrain.operator.phases import ownership
from railtrain.operator.phases.step import Step, healthy
from railtrain.operator.phases.transition import ACTIVE, Transition, always
from railtrain.operator.placement import PINNED_NODE_UNAVAILABLE, Placement, Refusal


FABRIC_DEVICE_MISSING = "FabricDeviceMissing"
"""Warning Event reason: the operator's fabric profile expects an RDMA device this multi-node job does not request
(:func:`railtrain.crds.fabric.device_problem`; emitted once, with the first gang)."""


def _create_missing(step: Step) -> None:
    if ownership.service_in_the_way(step):  # the rendezvous name would resolve to someone else's Service
        return
    present = {rank_of(p) for p in step.gang} | step.done
    blocked = {rank_of(p) for p in step.pods if p["metadata"].get("deletionTimestamp") or restart_of(p) != step.restarts}
    taken = {p["metadata"]["name"] for p in step.foreign}
    ns, uid = step.meta.get("namespace", ""), step.meta.get("uid", "")
    for rank in range(step.n):
        if rank not in present and rank not in blocked and contract.pod_name(step.meta["name"], rank) not in taken:
            step.out.create_pods.append(render.render_pod(step.job, ns, uid, rank, step.restarts, step.fabric))
    if step.out.create_pods and nvlink.wants(step.job):  # the IMEX channel every pod claims (kept if it exists)
        step.out.create_objects.append(nvlink.compute_domain(step.job, ns, render.owner_reference(step.meta["name"], uid)))
    if step.out.create_pods and not step.gang:
        step.out.events.append(("Normal", "GangCreated", f"created {len(step.out.create_pods)} gated pods and the rendezvous Service"))
        if step.restarts == 0 and (problem := fabric.device_problem(step.fabric, step.job.spec)):
            step.out.events.append(("Warning", FABRIC_DEVICE_MISSING, problem))


def _release(step: Step, placement: Placement, shift: int = 0) -> list[dict[str, Any]]:
    """Pin, annotate and ungate the gated pods of ranks below the admitted size; delete the ranks above it.

    Rank ``r`` goes to ``placement.nodes[(r + shift) % size]`` (:func:`rank_shift`).

    Returns:
        The gang as it will look after the actions (pinned copies, ranks above removed).
    """
    out, size = step.out, len(placement.nodes)
    annotations = render.gang_annotations(step.job.spec, size)
    after = []
    for p in step.gang:
        name, rank = p["metadata"]["name"], rank_of(p)
        if rank >= size:
            step.delete([p])
            continue
        if is_gated(p):
            if not pod_node(p):
                out.pin[name] = placement.nodes[(rank + shift) % size]
            where = (rank + shift) % size  # the placement's per-node annotations follow the node the rank goes to
            out.annotate[name] = {**annotations, **(placement.annotations[where] if where < len(placement.annotations) else {})}
            out.ungate.append(name)
        after.append(render.pin_to_node(p, out.pin[name]) if name in out.pin else p)
    return after


def rank_shift(step: Step, size: int) -> int:
    """How far this gang's ranks rotate over the placement's nodes: ``status.rankShift`` modulo the size, 0 when a rank is already pinned.

    A hang or straggler verdict raises ``status.rankShift`` (:mod:`railtrain.crds.recovery`, rule 3), so
    the named rank runs on another node next time and a fault that follows the node can be told from one
    that follows the rank. A cyclic rotation keeps the placement's ring order: neighbours stay neighbours.
    """
    if any(pod_node(p) for p in step.gang):
        return 0
    return int(step.status.get("rankShift") or 0) % max(1, size)


def _refused(step: Step) -> bool:
    return isinstance(step.placement, Refusal)


def _keep_refusal(step: Step) -> None:
    refusal = step.placement
    step.set_condition(cond.SCHEDULED, False, refusal.reason, refusal.message, "Warning" if refusal.warning else "Normal")
    if refusal.reason == PINNED_NODE_UNAVAILABLE:  # pinned pods cannot move: start the gang over
        step.delete(step.gang)


def _placed(step: Step) -> bool:
    return isinstance(step.placement, Placement)


def _apply_placement(step: Step) -> None:
    placement = step.placement
    shift = rank_shift(step, len(placement.nodes))
    step.gang = _release(step, placement, shift)
    step.n = step.released = len(placement.nodes)
    if len(placement.domains) == step.n:
        step.placed.update({rank: placement.domains[(rank + shift) % step.n] for rank in range(step.n)})
    step.set_condition(cond.SCHEDULED, True, placement.reason, placement.message(), "Normal")
    step.status["topology"] = {**placement.summary, "reason": placement.explanation}
    step.status["requeueAfter"] = None
    step.pods = [p for p in step.pods if restart_of(p) != step.restarts or p["metadata"].get("deletionTimestamp")] + step.gang


def _bound_without_pass(step: Step) -> bool:
    """Every rank has been released (e.g. by an operator that crashed before writing status) but Scheduled is not True."""
    return step.placement is None and step.complete() and not any(is_gated(p) for p in step.gang) and not step.is_true(cond.SCHEDULED)


def _mark_scheduled(step: Step) -> None:
    step.set_condition(cond.SCHEDULED, True, "GangPlaced", "every rank has a node")


def _run(step: Step) -> str:
    if not step.status.get("startTime"):
        step.status["startTime"] = cond.rfc3339(step.now)
    done = len(step.done & set(range(step.n)))
    if done:  # ranks may finish at different times: the gang is still healthy
        step.set_condition(cond.RUNNING, True, "RanksFinishing", f"{done} of {step.n} ranks exited 0; the other {step.n - done} are Running")
    else:
        step.set_condition(cond.RUNNING, True, "AllRanksRunning", f"all {step.n} ranks are Running", "Normal")
    return cond.RUNNING


def _wait(step: Step) -> str:
    return cond.RESTARTING if step.old_phase == cond.RESTARTING and not step.gang else cond.PENDING


CREATE_MISSING = Transition(
    "create-missing-ranks", ACTIVE, always, _create_missing,
    "Every rank below the gang size without a pod (and whose name is free) gets a gated pod.",
)
REFUSED = Transition("refused", ACTIVE, _refused, _keep_refusal, "The admission pass refused: Scheduled False with its reason; a gang pinned to a lost node is deleted.")
PLACED = Transition("placed", ACTIVE, _placed, _apply_placement, "The admission pass placed the gang: pin, annotate and ungate every rank; Scheduled True.")
BOUND = Transition("bound", ACTIVE, _bound_without_pass, _mark_scheduled, "Every rank released without a recorded placement: Scheduled True.")
HEALTHY = Transition(
    "healthy", ACTIVE, healthy, _run,
    "Every rank Running or Succeeded (not all Succeeded): phase Running, startTime set when first reached.",
)
WAITING = Transition("waiting", ACTIVE, always, _wait, "Otherwise the job waits: phase Pending (Restarting until a restarted gang's first pod exists).")
