"""A failed gang: its pods' status read as evidence for the one failure decision (:func:`railtrain.crds.recovery.decide`).

This module only reads: each Failed pod of the gang becomes a
:class:`~railtrain.crds.recovery.Failure` (:func:`rank_failure`), the gang's
nodes and the cluster's Nodes are the facts a verdict's claims are checked
against, and :func:`railtrain.operator.job.phases.restart.apply` writes the
decision. The rules (which verdict wins, whose failure it was, what
``spec.runPolicy.failurePolicy`` does, the bounds) live in
:mod:`railtrain.crds.recovery`, where ``railtrain run --local`` finds the same.

What the kubelet says about a pod it ended is read here (Kubernetes pod
status, KEP-3329 disruption conditions):

* ``status.reason`` Evicted **with** a ``DisruptionTarget`` condition (node
  pressure), or Preempting, NodeShutdown, Shutdown, Terminated, NodeLost: the
  node's doing, an infrastructure restart (``RankEvicted``);
* ``status.reason`` Evicted **without** ``DisruptionTarget``: the kubelet
  evicted the pod for exceeding its own limits (ephemeral storage, memory):
  the job's failure (``retryable``, spends ``backoffLimit``);
* ``status.reason`` ``OutOf<resource>``, ``UnexpectedAdmissionError``,
  NodeAffinity, NodeSelectorMismatch...: the kubelet refused to admit it, an
  infrastructure restart that avoids the node (``AdmissionRefused``).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

import json
from typing import Any

from railtrain.crds import contract, recovery
from railtrain.crds import inplace as crds_inplace
from railtrain.crds.podtemplate import TRAINER
from railtrain.crds.times import parse_time_or_none
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job import inplace
from railtrain.operator.job.pods import phase, rank_of, trainer_message
from railtrain.operator.job.phases.restart import apply, counters
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition
from railtrain.operator.scheduling import quarantine

PRECEDENCE = recovery.PRECEDENCE
NODE_FAILURE_REASONS = frozenset({"Preempting", "NodeShutdown", "Shutdown", "Terminated", "NodeLost"})
"""``status.reason`` values of a pod that the kubelet ended for its node's sake (Evicted is read with its condition)."""
ADMISSION_REASONS = frozenset({"UnexpectedAdmissionError", "NodeAffinity", "NodeSelectorMismatch", "NodeName", "NodePorts", "InvalidNodeInfo", "PodOSNotSupported"})
"""``status.reason`` values of a pod the kubelet refused to admit (besides ``OutOf<resource>``)."""


def _disrupted(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or [])


def kubelet_cause(pod: dict[str, Any]) -> str:
    """Why the kubelet ended a Failed pod: :data:`~railtrain.crds.recovery.CAUSE_NODE`, :data:`~railtrain.crds.recovery.CAUSE_ADMISSION`,
    :data:`~railtrain.crds.recovery.CAUSE_LIMITS`, or "" (its trainer exited)."""
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    if reason.startswith("OutOf") or reason in ADMISSION_REASONS:
        return recovery.CAUSE_ADMISSION
    if reason in NODE_FAILURE_REASONS or (reason == "Evicted" and _disrupted(status)):
        return recovery.CAUSE_NODE
    if reason == "Evicted":
        return recovery.CAUSE_LIMITS
    return ""


def rank_failure(pod: dict[str, Any]) -> recovery.Failure:
    """Read one Failed pod as evidence: its trainer container's exit code and verdict, or what the kubelet said.

    Args:
        pod: a v1 Pod dict in phase Failed.

    Returns:
        A :class:`~railtrain.crds.recovery.Failure`; a container killed by a signal (exit code 128 + N, the
        container-runtime convention: 137 = SIGKILL, OOMKilled) is ``signalled``.
    """
    meta, status = pod["metadata"], pod.get("status") or {}
    base = dict(rank=rank_of(pod), pod=meta["name"], node=(pod.get("spec") or {}).get("nodeName") or "")
    cause = kubelet_cause(pod)
    if cause:
        return recovery.Failure(code=contract.EXIT_FAILED, verdict=contract.VERDICT_RETRYABLE, reason=status.get("reason") or "Failed", message=status.get("message", ""), cause=cause, **base)
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and cs.get("name") == TRAINER:  # a sidecar's exit says nothing about the rank
            code = int(term.get("exitCode", contract.EXIT_FAILED))
            raw, finished = (term.get("message") or "").strip(), term.get("finishedAt") or ""
            raw = "" if raw and contract.parse_termination_message(raw) is None and crds_inplace.ledger_in_message(raw) else raw  # only the supervisor's ledger
            v = contract.parse_termination_message(raw)
            if v:
                evidence = json.dumps(v["evidence"], sort_keys=True)[:300] if v["evidence"] else ""
                return recovery.Failure(code=code, verdict=v["verdict"], reason=v["reason"], message=v["message"], nodes=tuple(v["nodes"]), evidence=evidence,
                                        reported=True, finished=finished, signalled=code > 128, **base)  # fmt: skip
            return recovery.unreported(code=code, reason=term.get("reason") or "Error", message=raw, finished=finished, signalled=code > 128, **base)
    return recovery.Failure(code=contract.EXIT_FAILED, verdict=contract.VERDICT_RETRYABLE, reason=status.get("reason") or "Failed", message=status.get("message", ""), **base)


def gang_failure(step: Step) -> recovery.GangFailure:
    """The evidence of the failed attempt: every Failed rank, the nodes the gang's pods ran on, the nodes that exist."""
    failed = [p for p in step.gang if phase(p) == "Failed"]
    stopped = {rank_of(p) for p in failed if crds_inplace.stopped_in_message(trainer_message(p))}
    failures = crds_inplace.without_stopped(tuple(rank_failure(p) for p in failed), stopped)  # a supervisor stopped them for a peer
    ran = {rank_of(p): node for p in step.gang if (node := (p.get("spec") or {}).get("nodeName"))}
    return recovery.GangFailure(failures, ran, frozenset(step.nodes) if step.nodes is not None else None)


STOPPED_WAIT_SECONDS = 30
"""How long the operator waits for the rank to blame once only ranks that their supervisors stopped for a peer's
failure have ended (the supervisors of one gang exit together after their final decision; a failing rank's pod
that stays Running longer than this is not waited for)."""


def _any_failed(step: Step) -> bool:
    failed = [p for p in step.gang if phase(p) == "Failed"]
    if not failed or any(not crds_inplace.stopped_in_message(trainer_message(p)) for p in failed):
        return bool(failed)
    if all(phase(p) in ("Failed", "Succeeded") for p in step.gang):
        return True
    ended = [t for p in failed if (t := parse_time_or_none(_trainer_finished(p))) is not None]
    return not ended or (step.now - min(ended)).total_seconds() >= STOPPED_WAIT_SECONDS


def _trainer_finished(pod: dict[str, Any]) -> str:
    return next((((cs.get("state") or {}).get("terminated") or {}).get("finishedAt") or "" for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("name") == TRAINER), "")


def count_in_place(step: Step) -> None:
    """Count the in-place restarts the failed gang's termination messages report and the operator has not counted
    (:mod:`railtrain.operator.job.inplace`) before deciding: one job-wide budget for both paths."""
    ledger = inplace.gang_ledger(step.gang, step.restarts)
    counted = inplace.count(step.status, ledger, step.job.spec.run_policy, step.now, step.job.metadata.creation_timestamp) if ledger else None
    if counted is None or ledger is None:
        return
    c = counters(step)  # nodes the gang left for a verdict (a hot spare took their ranks) and the progress reader did not quarantine yet
    taint, records, kept = inplace.to_quarantine(step.status, ledger, step.now, c.tainted, c.cluster_quarantines, c.cluster_limit)
    patch, sentence = counted
    step.status.update(patch)
    if records:
        step.status["quarantines"] = [*(step.status.get("quarantines") or ()), *records]
    for node, verdict, evidence in taint:
        step.out.quarantine.append((node, verdict, evidence))
        step.out.events.append(("Warning", reasons.NODE_QUARANTINED, quarantine.quarantined_sentence(node, verdict, evidence, spare=True)))
    step.out.events += [("Warning", reasons.NODE_QUARANTINED, text) for text in kept]
    step.out.events.append(("Normal", inplace.IN_PLACE_RESTART, sentence))
    step.out.log.append(f"in-place reason={inplace.IN_PLACE_RESTART}: {sentence}")


def _decide(step: Step) -> str:
    step.stop(step.gang)
    count_in_place(step)
    d = recovery.decide(gang_failure(step), step.job.spec.run_policy, counters(step), step.now)
    step.set_condition(cond.RUNNING, False, reasons.POD_FAILED, d.blamed.detail())
    return apply(step, d)


GANG_FAILED = Transition(
    "gang-failed", ACTIVE, _any_failed, _decide,
    "A rank Failed: railtrain.crds.recovery.decide applies its verdict's runPolicy.failurePolicy rule (fail, or restart the whole gang as a job "
    "restart that spends backoffLimit or an infrastructure restart that does not), quarantining or avoiding the nodes it names that this gang ran on; "
    "a pod the kubelet ended for its node's sake or refused is an infrastructure restart.",
)
