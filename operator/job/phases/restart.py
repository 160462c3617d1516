"""One restart: every recovery row hands a :class:`~railtrain.crds.recovery.Decision` here, and this is the only place
that writes restart counters, backoff, quarantines and the restart's reason.

Every restart deletes every pod of the current gang and raises
``status.restarts`` (the restart count the next gang's pods carry), so the
survivors of a failure never wait in a broken rendezvous next to a
replacement. Restarts caused by the job (``status.jobRestarts``) spend
``runPolicy.backoffLimit``; restarts caused by the infrastructure
(``status.infrastructureRestarts``: a node lost, quarantined or avoided, a
rank's pod deleted, evicted, preempted or refused, an elastic grow) do not,
as JobSet's ``RestartJobSetAndIgnoreMaxRestarts`` action does not, but they
are bounded by ``runPolicy.maxInfrastructureRestarts`` and back off
exponentially (``status.requeueAfter``,
:func:`railtrain.crds.recovery.infrastructure_backoff`). The counters
themselves are computed once, by :func:`railtrain.crds.recovery.decide` and
:func:`railtrain.crds.recovery.restart_infrastructure`, which ``railtrain run
--local`` uses too.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from railtrain.crds.times import format_time
from railtrain.crds import recovery
from railtrain.crds import reasons
from railtrain.crds.api import HoldRecord
from railtrain.operator.job import conditions as cond
from railtrain.operator.scheduling import quarantine
from railtrain.operator.scheduling.snapshot import pod_node
from railtrain.crds.faults import spent_faults
from railtrain.operator.job.pods import rank_of, trainer_message
from railtrain.operator.job.records import stored_admission
from railtrain.operator.job.phases.step import Step

JOB_RESTARTS = "jobRestarts"
INFRA_RESTARTS = "infrastructureRestarts"


def counters(step: Step, **facts: Any) -> recovery.Counters:
    """The job's counters from the status being built, with the cluster facts of this pass.

    ``facts`` override (``tainted``...); by default the nodes carrying the quarantine taint and the
    cluster-wide quarantines of the last hour are read from the Nodes observed in this pass.
    """
    nodes = list((step.nodes or {}).values())
    known = dict(
        tainted=frozenset(n["metadata"]["name"] for n in nodes if quarantine.quarantined_by(n) is not None),
        cluster_quarantines=quarantine.recent_quarantines(nodes, step.now),
        cluster_limit=step.quarantine_limit,
    )
    return recovery.Counters.from_status(step.status, **(known | facts))


def log_line(step: Step, text: str) -> None:
    """Queue one operator log line for this job (the controller prefixes ``namespace/name``)."""
    step.out.log.append(text)


def claims(step: Step, d: recovery.Decision) -> None:
    """What decision ``d`` does to nodes besides the restart: a ``ClaimIgnored`` Warning for nodes the verdict named that
    the gang did not run on, and a quarantine (the taint, a ``NodeQuarantined`` Warning) of each node it quarantines.
    Used by :func:`apply` and by a replica group's replacement (:mod:`railtrain.operator.job.phases.groups`)."""
    if d.ignored:
        text = f"the {d.verdict} verdict of rank {d.blamed.rank} named node(s) {', '.join(d.ignored)}, which this gang did not run on or which do not exist: ignored"
        step.out.events.append(("Warning", reasons.CLAIM_IGNORED, text))
        log_line(step, f"{reasons.CLAIM_IGNORED}: {text}")
    f = d.blamed
    evidence = f"{f.verdict} verdict of rank {f.rank} ({f.reason}: {f.message})" + (f", evidence {f.evidence}" if f.evidence else "")
    for node in d.quarantine:
        step.out.quarantine.append((node, f.verdict, evidence))
        step.out.events.append(("Warning", reasons.NODE_QUARANTINED, quarantine.quarantined_sentence(node, f.verdict, evidence)))


def apply(step: Step, d: recovery.Decision) -> str:
    """Write decision ``d`` into the step: status counters, quarantines, Events, one log line; fail or restart.

    Returns:
        The next phase: Failed, or Restarting.
    """
    shift = step.state.rank_shift  # the rotation the failed gang was admitted with
    step.status.update(d.status())
    claims(step, d)
    f = d.blamed
    nodes = sorted(set(d.quarantine) | set(d.avoid) | ({f.node} if f.node else set()))
    log_line(step, f"{d.action} reason={d.reason} nodes={','.join(nodes) or '-'}: {d.message}")
    if d.action == recovery.FAIL:
        step.set_condition(cond.FAILED, True, d.reason, d.message, "Warning")
        return cond.FAILED
    step.status["hold"] = hold(step, d, shift)
    step.out.status_first = step.status["hold"] is not None  # the hold is in the ledger before the old pods start to leave
    step.status["restarts"] = step.restarts + 1
    step.status["succeededRanks"] = None
    spent = spent_faults_after(step)
    if spent != list(step.state.spent_faults):
        step.status["spentFaults"] = spent
    step.status["requeueAfter"] = format_time(step.now + timedelta(seconds=d.backoff_seconds)) if d.backoff_seconds else None
    step.delete(step.gang)
    step.set_condition(cond.RUNNING, False, d.reason, d.message)
    step.set_condition(cond.SCHEDULED, False, d.reason, d.message, "Warning")
    return cond.RESTARTING


def spent_faults_after(step: Step) -> list[str]:
    """``status.spentFaults`` once the failed gang restarts: those already spent, and the fault variables of
    ``spec.env`` the gang met (:func:`railtrain.crds.faults.spent_faults` on its trainers' termination messages: a
    fault at or before the furthest verdict's step, or every fault when no verdict names a step, e.g. a lost node), so
    the next gang's pods go without them, as ``railtrain run --local``'s next gang and the pod-side supervisor's next
    in-place attempt do. Returns the sorted variable names."""
    env = {v.name: v.value for v in step.job.spec.env}
    if not env:
        return list(step.state.spent_faults)
    met = spent_faults(env, [trainer_message(p) or None for p in step.gang])
    return sorted(set(step.state.spent_faults) | met)


def hold(step: Step, d: recovery.Decision, shift: int = 0) -> dict[str, Any] | None:
    """The ``status.hold`` of the gang that restarts after decision ``d``: the failed gang's nodes, kept for the next gang.

    A rank's node is its pod's, else the one its admission record or ``status.placement`` names (a pod
    that vanished). Nodes the decision quarantines or avoids, and the node the infrastructure failed
    on, are not held (""). The list is in placement order, before the rank rotation ``shift`` the
    failed gang was admitted with (rank ``r`` ran on ``nodes[(r + shift) % n]``), so the next gang's
    rotation (:func:`railtrain.operator.job.phases.admission.rank_shift`, raised by a hang or straggler
    verdict) moves each rank by exactly what the verdict added. The hold lasts until the next gang is
    admitted, at most the restart's backoff plus ``runPolicy.gangTimeoutSeconds``
    (:func:`railtrain.operator.job.records.hold_record`).

    Returns:
        The record's patch (:class:`~railtrain.crds.api.HoldRecord` as stored: ``restarts``, ``nodes``, ``until``), or None when no node is held.
    """
    state = step.state
    record = stored_admission(state)
    nodes: dict[int, str] = {e.rank: e.node for e in state.placement if e.node}
    if record is not None and record.restarts == step.restarts:
        nodes |= {r: n for r, n in enumerate(record.nodes) if n}
    nodes |= {rank_of(p): node for p in step.gang if (node := pod_node(p))}
    bad = set(d.quarantine) | set(d.avoid) | ({d.blamed.node} if d.blamed.cause in recovery.INFRASTRUCTURE_CAUSES else set())
    size = max(nodes, default=-1) + 1
    by_rank = [nodes.get(r, "") if nodes.get(r, "") not in bad else "" for r in range(size)]
    held = [by_rank[(i - shift) % size] for i in range(size)]
    if not any(held):
        return None
    until = step.now + timedelta(seconds=d.backoff_seconds + step.job.spec.run_policy.gang_timeout_seconds)
    return HoldRecord(restarts=step.restarts + 1, nodes=held, until=format_time(until)).to_api()


def restart_infrastructure(step: Step, reason: str, what: str, node: str = "") -> str:
    """An infrastructure restart not decided by a verdict (node lost, rank vanished, elastic grow), or the job Failed at its bound.

    Args:
        reason: the condition and Event reason; what: the sentence naming what happened.
        node: the node the infrastructure failed on ("" for none), counted in ``status.nodeFailures``.
    """
    return apply(step, recovery.restart_infrastructure(step.job.spec.run_policy, counters(step), reason, what, node=node))
