"""Admitting and creating the gang, applying the admission pass's answer, and following the gang to Running.

Admit before creating: a gang with no pod yet is placed from its spec alone.
The admission pass (:mod:`railtrain.operator.scheduling.queue`) answers it with a
:class:`~railtrain.operator.scheduling.placement.Placement`, applied here by recording
the placement in ``status.admission`` (written first) and creating every rank
already pinned, annotated and ungated: one write per pod. Until every rank's
pod has been seen, a pass creates the missing ranks from that record (an
operator that crashed between the status write and the creates).

A gang that already has pods without a record (gated by an earlier operator
version) keeps the older path: missing ranks are created gated, and the
placement pins, annotates and ungates each pod in one patch (ranks above an
elastic gang's admitted size are deleted). A refusal is kept as the Scheduled
condition.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds.times import format_time
from railtrain.crds import contract, fabric
from railtrain.crds import reasons
from railtrain.crds.api import AdmissionRecord
from railtrain.operator.job import conditions as cond
from railtrain.operator.job import nvlink
from railtrain.operator.job import binding, render
from railtrain.operator.job import inplace as job_inplace
from railtrain.operator.scheduling.snapshot import pod_node
from railtrain.operator.job.pods import is_gated, rank_of, restart_of
from railtrain.operator.job.records import admission_record
from railtrain.operator.job.phases import ownership
from railtrain.operator.job.phases.step import Step, healthy
from railtrain.operator.job.phases.transition import ACTIVE, Transition, always
from railtrain.operator.scheduling.placement import PINNED_NODE_UNAVAILABLE, Placement, node_annotations
from railtrain.operator.scheduling.refusal import Refusal




def _create_missing(step: Step) -> None:
    if ownership.service_in_the_way(step):  # the rendezvous name would resolve to someone else's Service
        return
    record = admission_record(step.state)
    if record is None and not step.gang and not step.done:
        return  # admit before creating: the pass places the gang from its spec, then its pods are created pinned
    present = {rank_of(p) for p in step.gang} | step.done
    blocked = {rank_of(p) for p in step.pods if p["metadata"].get("deletionTimestamp") or restart_of(p) != step.restarts}
    taken = {p["metadata"]["name"] for p in step.foreign}
    ns, uid = step.meta.get("namespace", ""), step.meta.get("uid", "")
    nodes = record.nodes if record is not None and not record.created else None
    spent = job_inplace.spent_of(step.status)
    for rank in range(len(nodes) if nodes is not None else step.n):
        if rank not in present and rank not in blocked and contract.pod_name(step.meta["name"], rank) not in taken:
            pod = job_inplace.with_spent(render.render_pod(step.job, ns, uid, rank, step.restarts, step.fabric), spent)
            if nodes is not None:  # an admitted rank whose create did not happen yet (e.g. the operator crashed after the record)
                pod = binding.admitted_pod(pod, nodes[rank], _rank_annotations(step, len(nodes), nodes[rank]))
            step.out.create_pods.append(pod)
    _with_gang_objects(step, "gated pods" if nodes is None else "pods pinned to their admitted nodes")


def _rank_annotations(step: Step, size: int, node: str) -> dict[str, str]:
    """The annotations of a rank of an admitted gang of ``size`` on ``node``: the gang's size and parallelism, the node's uid and fabric values."""
    return {**render.gang_annotations(step.job.spec, size), **node_annotations(step.fabric, (step.nodes or {}).get(node))}


def _with_gang_objects(step: Step, what: str) -> None:
    """Add the ComputeDomain (NVLink jobs) next to the pods being created, and the GangCreated Event for a new gang."""
    ns, uid = step.meta.get("namespace", ""), step.meta.get("uid", "")
    if step.out.create_pods and nvlink.wants(step.job):  # the IMEX channel every pod claims (kept if it exists)
        step.out.create_objects.append(nvlink.compute_domain(step.job, ns, render.owner_reference(step.meta["name"], uid)))
    if step.out.create_pods and not step.gang:
        step.out.events.append(("Normal", reasons.GANG_CREATED, f"created {len(step.out.create_pods)} {what} and the rendezvous Service"))
        if step.restarts == 0 and (problem := fabric.device_problem(step.fabric, step.job.spec)):
            step.out.events.append(("Warning", reasons.FABRIC_DEVICE_MISSING, problem))


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
        after.append(binding.pin_to_node(p, out.pin[name]) if name in out.pin else p)
    return after


def rank_shift(step: Step, size: int) -> int:
    """How far this gang's ranks rotate over the placement's nodes: ``status.rankShift`` modulo the size, 0 when a rank is already pinned.

    A hang or straggler verdict raises ``status.rankShift`` (:mod:`railtrain.crds.recovery`, rule 3), so
    the named rank runs on another node next time and a fault that follows the node can be told from one
    that follows the rank. A cyclic rotation keeps the placement's ring order: neighbours stay neighbours.
    """
    if any(pod_node(p) for p in step.gang):
        return 0
    return step.state.rank_shift % max(1, size)


def _refused(step: Step) -> bool:
    return isinstance(step.placement, Refusal)


def _keep_refusal(step: Step) -> None:
    refusal = step.placement
    step.set_condition(cond.SCHEDULED, False, refusal.reason, refusal.message, "Warning" if refusal.warning else "Normal")
    if refusal.reason == PINNED_NODE_UNAVAILABLE:  # pinned pods cannot move: start the gang over
        step.delete(step.gang)


def _placed(step: Step) -> bool:
    return isinstance(step.placement, Placement) and not step.foreign  # a name in the way: nothing is created, so nothing is promised


def _admit(step: Step, placement: Placement, shift: int) -> list[dict[str, Any]]:
    """Admit a gang that has no pod yet: record the placement in ``status.admission`` and create every rank pinned and ungated.

    The plan writes the status before the pods (``status_first``): from then on
    the record holds the nodes in every admission pass's ledger, and a crash
    before the last create is repaired from it (:func:`_create_missing`).

    Returns:
        The gang as it will look after the creates.
    """
    size, ns, uid = len(placement.nodes), step.meta.get("namespace", ""), step.meta.get("uid", "")
    nodes = [placement.nodes[(rank + shift) % size] for rank in range(size)]
    step.status["admission"] = AdmissionRecord(restarts=step.restarts, nodes=nodes, created=False).to_api()
    gang = []
    spent = job_inplace.spent_of(step.status)
    for rank, node in enumerate(nodes):
        where = (rank + shift) % size  # the placement's per-node annotations follow the node the rank goes to
        extra = placement.annotations[where] if where < len(placement.annotations) else {}
        pod = job_inplace.with_spent(render.render_pod(step.job, ns, uid, rank, step.restarts, step.fabric), spent)
        gang.append(binding.admitted_pod(pod, node, {**render.gang_annotations(step.job.spec, size), **extra}))
    step.out.create_pods = gang
    step.out.status_first = True
    _with_gang_objects(step, "pods pinned to their admitted nodes")
    return gang


def _apply_placement(step: Step) -> None:
    placement = step.placement
    shift = rank_shift(step, len(placement.nodes))
    fresh = not step.gang and not step.done and not step.out.create_pods
    step.gang = _admit(step, placement, shift) if fresh else _release(step, placement, shift)
    step.n = step.released = len(placement.nodes)
    if len(placement.domains) == step.n:
        step.placed.update({rank: placement.domains[(rank + shift) % step.n] for rank in range(step.n)})
    step.set_condition(cond.SCHEDULED, True, placement.reason, placement.message(), "Normal")
    step.out.events.extend(("Warning", reasons.FABRIC_NODE_VALUE_INVALID, warning) for warning in placement.warnings)
    step.status["topology"] = {**placement.summary, "reason": placement.explanation}
    step.status["requeueAfter"] = None
    step.status["hold"] = None  # the admission replaces a restarting gang's hold
    step.pods = [p for p in step.pods if restart_of(p) != step.restarts or p["metadata"].get("deletionTimestamp")] + step.gang


def _bound_without_pass(step: Step) -> bool:
    """Every rank has been released (e.g. by an operator that crashed before writing status) but Scheduled is not True."""
    return step.placement is None and step.complete() and not any(is_gated(p) for p in step.gang) and not step.is_true(cond.SCHEDULED)


def _mark_scheduled(step: Step) -> None:
    step.set_condition(cond.SCHEDULED, True, reasons.GANG_PLACED, "every rank has a node")


def _run(step: Step) -> str:
    if step.state.start_time is None:
        step.status["startTime"] = format_time(step.now)
    done = len(step.done & set(range(step.n)))
    if done:  # ranks may finish at different times: the gang is still healthy
        step.set_condition(cond.RUNNING, True, reasons.RANKS_FINISHING, f"{done} of {step.n} ranks exited 0; the other {step.n - done} are Running")
    else:
        step.set_condition(cond.RUNNING, True, reasons.ALL_RANKS_RUNNING, f"all {step.n} ranks are Running", "Normal")
    return cond.RUNNING


def _wait(step: Step) -> str:
    return cond.RESTARTING if step.old_phase == cond.RESTARTING and not step.gang else cond.PENDING


CREATE_MISSING = Transition(
    "create-missing-ranks", ACTIVE, always, _create_missing,
    "A gang without any pod and without an admitted placement waits for the admission pass; an admitted gang's missing ranks are created "
    "pinned and ungated from status.admission; an older gated gang's missing ranks get gated pods.",
)
REFUSED = Transition("refused", ACTIVE, _refused, _keep_refusal, "The admission pass refused: Scheduled False with its reason; a gang pinned to a lost node is deleted.")
PLACED = Transition(
    "placed", ACTIVE, _placed, _apply_placement,
    "The admission pass placed the gang: a gang without pods gets status.admission (written first) and every rank created pinned and ungated; "
    "a gated gang's ranks are pinned, annotated and ungated; Scheduled True.",
)
BOUND = Transition("bound", ACTIVE, _bound_without_pass, _mark_scheduled, "Every rank released without a recorded placement: Scheduled True.")
HEALTHY = Transition(
    "healthy", ACTIVE, healthy, _run,
    "Every rank Running or Succeeded (not all Succeeded): phase Running, startTime set when first reached.",
)
WAITING = Transition("waiting", ACTIVE, always, _wait, "Otherwise the job waits: phase Pending (Restarting until a restarted gang's first pod exists).")
