"""A failed gang: the verdict decides (``spec.runPolicy.failurePolicy``), including quarantining the nodes it names.

Replaces the plain "restart while backoffLimit allows" rule. The gang's
verdict is the most specific one among its failed ranks' termination
messages (:mod:`railtrain.crds.contract`): ``user-error`` over
``hardware-suspect`` over ``straggler`` over ``hang`` over ``retryable``, since
one rank's finding takes the other ranks down with plain failures. A failed
rank without a verdict counts as ``user-error`` when it exited with code 2,
else ``retryable``. A pod the kubelet failed for the node's sake (status.reason
Evicted, Preempting, NodeShutdown, Terminated) is not the job's fault: an
infrastructure restart with reason ``RankEvicted``.

The rule of that verdict (:class:`~railtrain.crds.failure_policy.FailurePolicyRule`,
defaults in :data:`~railtrain.crds.failure_policy.DEFAULT_RULES`) gives the
action (Fail, Restart, RestartIgnoringBackoff) and which named nodes are
quarantined or avoided (:func:`railtrain.operator.quarantine.decide`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from railtrain.crds import contract
from railtrain.crds.failure_policy import FailureAction
from railtrain.crds.podtemplate import TRAINER
from railtrain.operator import conditions as cond
from railtrain.operator import quarantine
from railtrain.operator.gang import phase, rank_of
from railtrain.operator.phases.restart import JOB_RESTARTS, counters, restart_gang
from railtrain.operator.phases.step import Step
from railtrain.operator.phases.transition import ACTIVE, Transition

PRECEDENCE = (contract.VERDICT_USER_ERROR, contract.VERDICT_HARDWARE_SUSPECT, contract.VERDICT_STRAGGLER, contract.VERDICT_HANG, contract.VERDICT_RETRYABLE)
"""The gang's verdict is the first of these that any failed rank reported."""
NODE_FAILURE_REASONS = frozenset({"Evicted", "Preempting", "NodeShutdown", "Shutdown", "Terminated", "NodeLost", "UnexpectedAdmissionError"})
"""``status.reason`` values of a pod that the kubelet (not the job) ended."""


@dataclass(frozen=True)
class RankFailure:
    """What one failed rank reported.

    Attributes:
        rank: node rank; pod: pod name; node: its node ("" if never bound).
        code: exit code of the trainer container; verdict: the verdict kind;
        reason, message: the verdict's (or the kubelet's) reason and message;
        nodes: suspect nodes named; evidence: the verdict's evidence;
        finished_at: the container's ``state.terminated.finishedAt`` (RFC 3339, "" if unknown).
    """

    rank: int
    pod: str
    node: str
    code: int
    verdict: str
    reason: str
    message: str
    nodes: tuple[str, ...] = ()
    evidence: str = ""
    reported: bool = False
    finished_at: str = ""

    @property
    def signalled(self) -> bool:
        """Whether the container was killed by a signal (exit code 128 + N, the shell and container-runtime convention; e.g. 137 = SIGKILL, OOMKilled)."""
        return self.code > 128

    def detail(self) -> str:
        """``"rank 1 exited with code 1: NoProgress: rank 3 stopped"`` (the verdict's reason only when the trainer reported one)."""
        text = f"{self.reason}: {self.message}" if self.reported else self.message
        return f"rank {self.rank} exited with code {self.code}" + (f": {text}" if text else "")


def rank_failure(pod: dict[str, Any]) -> RankFailure:
    """Read one Failed pod: its trainer container's exit code and termination-message verdict."""
    meta, status = pod["metadata"], pod.get("status") or {}
    base = dict(rank=rank_of(pod), pod=meta["name"], node=(pod.get("spec") or {}).get("nodeName") or "")
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and cs.get("name") == TRAINER:  # a sidecar's exit says nothing about the rank
            code = int(term.get("exitCode", contract.EXIT_FAILED))
            raw = (term.get("message") or "").strip()
            v = contract.parse_termination_message(raw)
            if v:
                evidence = json.dumps(v["evidence"], sort_keys=True)[:300] if v["evidence"] else ""
                return RankFailure(code=code, verdict=v["verdict"], reason=v["reason"], message=v["message"], nodes=tuple(v["nodes"]), evidence=evidence, reported=True, finished_at=term.get("finishedAt") or "", **base)
            kind = contract.VERDICT_USER_ERROR if code == contract.EXIT_USER_ERROR else contract.VERDICT_RETRYABLE
            return RankFailure(code=code, verdict=kind, reason=term.get("reason") or "Error", message=raw or (term.get("reason") or ""), finished_at=term.get("finishedAt") or "", **base)
    return RankFailure(code=contract.EXIT_FAILED, verdict=contract.VERDICT_RETRYABLE, reason=status.get("reason") or "Failed", message=status.get("message", ""), **base)


def gang_failure(step: Step) -> RankFailure | None:
    """The failure that decides for the gang, or None when no rank Failed.

    The most specific verdict wins (:data:`PRECEDENCE`). Among equals the rank
    where the failure began is named, not its peers' symptoms (a killed rank
    makes the others fail with "connection closed by peer"): a rank killed by
    a signal first, then the one whose container finished first
    (``finishedAt``, RFC 3339 UTC, compared as text; unknown sorts last), then
    the lowest rank.
    """
    failures = [rank_failure(p) for p in step.gang if phase(p) == "Failed"]
    if not failures:
        return None
    return min(failures, key=_blame_order)


def _blame_order(f: RankFailure) -> tuple[int, bool, bool, str, int]:
    verdict = PRECEDENCE.index(f.verdict) if f.verdict in PRECEDENCE else len(PRECEDENCE)
    return verdict, not f.signalled, not f.finished_at, f.finished_at, f.rank


def _evicted(step: Step) -> list[dict[str, Any]]:
    return [p for p in step.gang if phase(p) == "Failed" and (p.get("status") or {}).get("reason") in NODE_FAILURE_REASONS]


def _any_failed(step: Step) -> bool:
    return any(phase(p) == "Failed" for p in step.gang)


def _fail(step: Step, reason: str, message: str) -> str:
    step.set_condition(cond.FAILED, True, reason, message, "Warning")
    return cond.FAILED


def _decide(step: Step) -> str:
    step.stop(step.gang)
    evicted = _evicted(step)
    if evicted:
        p = evicted[0]
        why = (p.get("status") or {}).get("reason")
        node = (p.get("spec") or {}).get("nodeName") or "its node"
        step.set_condition(cond.RUNNING, False, "PodFailed", f"pod {p['metadata']['name']} (rank {rank_of(p)}) was ended by the kubelet on {node} ({why})")
        return restart_gang(step, "RankEvicted", f"pod {p['metadata']['name']} (rank {rank_of(p)}) on node {node} was ended by the kubelet ({why}: {(p.get('status') or {}).get('message', '')}); restarting the whole gang ({_next(step, True)})", True)
    f = gang_failure(step)
    assert f is not None  # the row fires only when a rank Failed
    detail = f.detail()
    step.set_condition(cond.RUNNING, False, "PodFailed", detail)
    policy = step.job.spec.run_policy.failure_policy
    rule = policy.rule(f.verdict)
    if rule.action == FailureAction.FAIL.value:
        if f.verdict == contract.VERDICT_USER_ERROR:
            return _fail(step, "UserError", detail + " (a configuration error: not retried)")
        return _fail(step, "FailurePolicy", f"{detail} (runPolicy.failurePolicy: {f.verdict} → Fail)")
    already = {name for name, node in (step.nodes or {}).items() if quarantine.is_quarantined(node)}
    d = quarantine.decide(policy, rule, f.verdict, f.nodes, step.status, already, step.now)
    step.status["suspects"] = d.suspects
    if d.exceeded:
        return _fail(step, quarantine.REASON_LIMIT, d.exceeded)
    step.status["quarantines"], step.status["avoidNodes"] = d.records, d.avoid
    evidence = f"{f.verdict} verdict of rank {f.rank} ({f.reason}: {f.message})" + (f", evidence {f.evidence}" if f.evidence else "")
    for node in d.quarantine:
        step.out.quarantine.append((node, f.verdict, evidence))
        step.out.events.append(("Warning", quarantine.REASON_QUARANTINED, f"node {node} quarantined (taint {quarantine.TAINT_KEY}={f.verdict}:NoSchedule): {evidence}"))
    if rule.action == FailureAction.RESTART.value:
        limit = step.job.spec.run_policy.backoff_limit
        if int(step.status.get(JOB_RESTARTS, 0)) >= limit:
            return _fail(step, "BackoffLimitExceeded", f"{detail}; runPolicy.backoffLimit={limit} restarts used")
        return restart_gang(step, "Restarting", f"{detail}; restarting the gang ({_next(step, False)})", False)
    if d.quarantine:
        reason, why = quarantine.REASON_QUARANTINED, f"node(s) {', '.join(d.quarantine)} quarantined"
    elif rule.avoid_nodes and f.nodes:
        reason, why = "NodeAvoided", f"node(s) {', '.join(sorted(set(f.nodes)))} avoided by this job"
    else:
        reason, why = "InfrastructureRestart", "restart not counted against backoffLimit"
    return restart_gang(step, reason, f"{detail}; {why}; restarting the gang elsewhere ({_next(step, True)})", True)


def _next(step: Step, infrastructure: bool) -> str:
    """The counters as they will read after this restart."""
    key = "infrastructureRestarts" if infrastructure else JOB_RESTARTS
    step.status[key] = int(step.status.get(key, 0)) + 1
    text = counters(step)
    step.status[key] -= 1
    return text


GANG_FAILED = Transition(
    "gang-failed", ACTIVE, _any_failed, _decide,
    "A rank Failed: its verdict's runPolicy.failurePolicy rule fails the job or restarts the whole gang (a job restart spends backoffLimit, "
    "an infrastructure restart does not), quarantining or avoiding the nodes it names; a pod the kubelet ended (Evicted...) is an infrastructure restart.",
)
