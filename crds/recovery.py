"""One failure decision (pure): a failed gang's evidence, the job's ``runPolicy`` and its counters in, what to do out.

Both sides that restart gangs call :func:`decide`, each feeding it from its
own evidence: the operator from pod status
(:func:`railtrain.operator.job.phases.verdict.rank_failure`), ``railtrain run
--local`` from each node's termination-message file
(:func:`railtrain.cli.local_recovery.local_failures`). So the verdict that
wins, the rank that is blamed, what ``spec.runPolicy.failurePolicy`` does with
it, the bounds and the sentence are the same by construction.

The rules, in order (docs/operator.md, "Recovery"):

1. **Blame.** A pod the kubelet ended for its node's sake (node-pressure
   eviction with a ``DisruptionTarget`` condition, shutdown, preemption) or
   refused to admit (``OutOf<resource>``, ``UnexpectedAdmissionError``) is
   blamed first; then the most specific verdict (:data:`PRECEDENCE`: one rank's
   finding takes its peers down with plain failures); among equals the rank
   where the failure began: killed by a signal, then finished first, then the
   lowest rank (:func:`blame_order`).
2. **Claims.** A verdict's ``nodes`` are a claim. Only nodes this gang's own
   pods ran on in the failed attempt (and that still exist, where that is
   known) may be quarantined or avoided; the rest are returned in
   :attr:`Decision.ignored` for a Warning Event.
3. **Separation.** ``hang`` and ``straggler`` name the node of a slow or stuck
   rank, which the rank's own work (rank 0 logs and evaluates) may explain. A
   node is quarantined for them only once verdicts named it with two different
   ranks on it (the next gang's ranks are rotated so the named rank lands
   elsewhere, :attr:`Decision.rotate`).
4. **Discrimination.** A verdict that names every node of a gang of two or more
   nodes tells none of them apart (two data-parallel replicas whose parameters
   differ, a finding on every rank): no node is quarantined or avoided for it,
   whatever ``quarantineAfter`` says; the suspects are still counted. Evidence
   must point at a node before the node is taken away (docs/health.md, "Two replicas").
5. **Bounds.** Job restarts spend ``backoffLimit`` and back off exponentially
   from ``restartBackoffSeconds`` (batch/v1 Job's pod failure backoff: 10 s
   doubling); infrastructure restarts spend ``maxInfrastructureRestarts`` and
   back off from ``infrastructureBackoffSeconds`` (:func:`infrastructure_backoff`
   for both: the first restart is immediate); quarantines are bounded per job
   (``failurePolicy.maxQuarantinesPerHour``: beyond it the job fails) and per
   cluster (the platform's bound, in :class:`Counters`: beyond it the node is
   only avoided by this job). A node whose pods this job lost to the
   infrastructure twice (:data:`NODE_FAILURES_TO_AVOID`), or whose kubelet
   refused a pod once, is avoided by the next gang.

This module imports neither kopf nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

from railtrain.crds import contract, reasons
from railtrain.crds.failure_policy import FailureAction
from railtrain.crds.times import format_time, parse_time_or_none

PRECEDENCE = (contract.VERDICT_USER_ERROR, contract.VERDICT_HARDWARE_SUSPECT, contract.VERDICT_STRAGGLER, contract.VERDICT_HANG, contract.VERDICT_RETRYABLE)
"""The gang's verdict is the first of these that any failed rank reported."""
SEPARATE_VERDICTS = frozenset({contract.VERDICT_HANG, contract.VERDICT_STRAGGLER})
"""Verdicts whose named node is quarantined only after a second, different rank was named on it (rule 3)."""
FAIL, RESTART_JOB, RESTART_INFRASTRUCTURE = "fail", "restart-job", "restart-infrastructure"
CAUSE_NODE, CAUSE_ADMISSION, CAUSE_LIMITS = "node", "admission", "limits"
""":attr:`Failure.cause`: the kubelet ended the pod for its node's sake / refused to admit it / evicted it for
exceeding its own limits (the job's failure: no ``DisruptionTarget`` condition, KEP-3329)."""
INFRASTRUCTURE_CAUSES = frozenset({CAUSE_NODE, CAUSE_ADMISSION})
QUARANTINE_WINDOW = timedelta(hours=1)
"""The sliding window of both quarantine bounds."""
NODE_FAILURES_TO_AVOID = 2
"""A node on which this job lost pods to the infrastructure this many times is avoided by its next gang."""
INFRASTRUCTURE_BACKOFF_CAP_SECONDS = 300
"""The longest wait before an infrastructure restart."""
REASON_QUARANTINED, REASON_AVOIDED, REASON_INFRA = reasons.NODE_QUARANTINED, reasons.NODE_AVOIDED, reasons.INFRASTRUCTURE_RESTART
REASON_QUARANTINE_LIMIT = reasons.QUARANTINE_LIMIT_EXCEEDED
REASON_INFRA_LIMIT = reasons.INFRASTRUCTURE_RESTART_LIMIT_EXCEEDED
REASON_EVICTED, REASON_REFUSED = reasons.RANK_EVICTED, reasons.ADMISSION_REFUSED
"""This module's short names for the reasons of :mod:`railtrain.crds.reasons` that its decisions carry."""


@dataclass(frozen=True)
class Failure:
    """What one failed rank left behind, read by either side.

    Attributes:
        rank: node rank (one pod, or one local node, per node rank).
        code: exit status of the trainer (container, or local node process).
        verdict: the verdict kind (:data:`railtrain.crds.contract.VERDICTS`).
        reason, message: the verdict's (or the kubelet's, or torchrun's) reason and sentence.
        reported: the trainer wrote the verdict (its reason is then part of the sentence).
        node: the node the rank ran on, a fact the reader knows ("" if never bound).
        nodes: the nodes the verdict names (a claim, checked by :func:`decide`).
        signalled: the rank was killed by a signal (it could not say why).
        finished: when it ended, as text that sorts in time order (RFC 3339 UTC; "" unknown, sorts last).
        cause: "" (the trainer's own exit), :data:`CAUSE_NODE`, :data:`CAUSE_ADMISSION` or :data:`CAUSE_LIMITS`.
        pod: the pod's name ("" for a local node).
        evidence: the verdict's evidence as short JSON text ("" if none).
    """

    rank: int
    code: int
    verdict: str
    reason: str
    message: str
    reported: bool = False
    node: str = ""
    nodes: tuple[str, ...] = ()
    signalled: bool = False
    finished: str = ""
    cause: str = ""
    pod: str = ""
    evidence: str = ""

    def detail(self) -> str:
        """The failure in one clause, e.g. ``"rank 1 exited with code 1: NoProgress: rank 3 stopped"``."""
        if self.cause == CAUSE_NODE:
            return f"pod {self.pod} (rank {self.rank}) on node {self.node} was ended by the kubelet ({self.reason}: {self.message})"
        if self.cause == CAUSE_ADMISSION:
            return f"the kubelet on node {self.node} refused pod {self.pod} (rank {self.rank}) ({self.reason}: {self.message})"
        if self.cause == CAUSE_LIMITS:
            return f"pod {self.pod} (rank {self.rank}) on node {self.node} was evicted by the kubelet for exceeding its own limits ({self.reason}: {self.message})"
        text = f"{self.reason}: {self.message}" if self.reported and not self.message.startswith(f"{self.reason}:") else self.message
        return f"rank {self.rank} exited with code {self.code}" + (f": {text}" if text else "")


def unreported(*, rank: int, code: int, reason: str = "Error", message: str = "", **more: Any) -> Failure:
    """A failed rank that left no verdict: ``user-error`` when it exited with code 2
    (:data:`~railtrain.crds.contract.EXIT_USER_ERROR`), else ``retryable``; the generic reason "Error" is not repeated.

    Args:
        rank, code: as :class:`Failure`; reason: the runtime's (``OOMKilled``, ``Error``); message: what it said, if anything.
        more: the other :class:`Failure` fields.
    """
    kind = contract.VERDICT_USER_ERROR if code == contract.EXIT_USER_ERROR else contract.VERDICT_RETRYABLE
    return Failure(rank=rank, code=code, verdict=kind, reason=reason, message=message or ("" if reason == "Error" else reason), **more)


@dataclass(frozen=True)
class Counters:
    """What the job (and the cluster) has spent so far: ``status`` fields as plain data.

    Attributes:
        job_restarts, infrastructure_restarts: ``status.jobRestarts`` / ``infrastructureRestarts``.
        suspects: ``status.suspects`` (``{"node", "verdict", "count", "ranks"?}``).
        quarantines: ``status.quarantines`` (``{"node", "verdict", "time"}``), this job's.
        avoid: ``status.avoidNodes``.
        node_failures: ``status.nodeFailures`` (``{"node", "count"}``): pods lost to the infrastructure per node.
        tainted: nodes that carry the quarantine taint now (never counted again).
        cluster_quarantines: nodes quarantined in the whole cluster within the last hour (what the API server stores).
        cluster_limit: the platform's bound on that number (operator flag), None for none.
        rank_shift: ``status.rankShift``: how far the next gang's ranks are rotated.
    """

    job_restarts: int = 0
    infrastructure_restarts: int = 0
    suspects: tuple[Mapping[str, Any], ...] = ()
    quarantines: tuple[Mapping[str, Any], ...] = ()
    avoid: tuple[str, ...] = ()
    node_failures: tuple[Mapping[str, Any], ...] = ()
    tainted: frozenset[str] = frozenset()
    cluster_quarantines: int = 0
    cluster_limit: int | None = None
    rank_shift: int = 0

    @classmethod
    def from_status(cls, status: Mapping[str, Any], **facts: Any) -> "Counters":
        """The counters a job's ``status`` holds, plus ``facts`` (``tainted``, ``cluster_quarantines``, ``cluster_limit``).
        A key whose value is None (a status patch's "remove") reads as absent."""
        return cls(
            job_restarts=int(status.get("jobRestarts") or 0), infrastructure_restarts=int(status.get("infrastructureRestarts") or 0),
            suspects=tuple(status.get("suspects") or ()), quarantines=tuple(status.get("quarantines") or ()),
            avoid=tuple(status.get("avoidNodes") or ()), node_failures=tuple(status.get("nodeFailures") or ()),
            rank_shift=int(status.get("rankShift") or 0), **facts,
        )  # fmt: skip

    def spent(self) -> dict[str, Any]:
        """The ``status`` fields a decision made in the pods needs (:mod:`railtrain.crds.supervisor`'s
        ``RAILTRAIN_RESTARTS_SPENT``, the coordinator's copy), JSON-ready: ``jobRestarts``, ``infrastructureRestarts``,
        ``suspects``, ``quarantines``, ``avoidNodes``, ``nodeFailures``; :meth:`from_status` reads it back. What only
        the operator knows (the taints, the cluster's quarantines) is left out: the operator applies it."""
        return {
            "jobRestarts": self.job_restarts, "infrastructureRestarts": self.infrastructure_restarts,
            "suspects": [dict(x) for x in self.suspects], "quarantines": [dict(x) for x in self.quarantines],
            "avoidNodes": list(self.avoid), "nodeFailures": [dict(x) for x in self.node_failures],
        }  # fmt: skip


@dataclass(frozen=True)
class GangFailure:
    """The evidence of one failed attempt.

    Attributes:
        failures: every failed rank (at least one).
        gang_nodes: rank → node of this gang's pods in the failed attempt (facts, not claims).
        existing: the nodes that exist now, or None when not known.
    """

    failures: tuple[Failure, ...]
    gang_nodes: Mapping[int, str] = field(default_factory=dict)
    existing: frozenset[str] | None = None


@dataclass(frozen=True)
class Decision:
    """What to do with a failed gang.

    Attributes:
        action: :data:`FAIL`, :data:`RESTART_JOB` or :data:`RESTART_INFRASTRUCTURE`.
        verdict: the gang's verdict; reason: the condition/Event reason; message: the sentence (the same on both sides).
        blamed: the failure that decided.
        quarantine: nodes to taint now; avoid: the new ``status.avoidNodes``.
        ignored: nodes the verdict named that this gang did not run on, or that do not exist.
        budget_spent: nodes due for quarantine that the cluster's bound kept untainted (avoided only).
        counters: the counters after this decision (write them to status).
        backoff_seconds: how long to wait before the next gang is admitted.
        path: how a restart restarts: ``"gang"`` (every pod recreated) unless :func:`railtrain.crds.inplace.decide_path`
            chose ``"in-place"`` (or ``"none"`` for a failure).
        what: a restart's ``message`` without its path clause ("; restarting the whole gang (counters)"): what
            happened and what it did to nodes, for a path other than the gang's to carry (empty for a failure).
    """

    action: str
    verdict: str
    reason: str
    message: str
    blamed: Failure
    quarantine: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    budget_spent: tuple[str, ...] = ()
    counters: Counters = field(default_factory=Counters)
    backoff_seconds: int = 0
    path: str = "gang"
    what: str = ""

    def status(self) -> dict[str, Any]:
        """The ``status`` fields this decision sets (counters, suspects, quarantines, avoided nodes, rank rotation)."""
        c = self.counters
        return {
            "jobRestarts": c.job_restarts, "infrastructureRestarts": c.infrastructure_restarts,
            "suspects": [dict(s) for s in c.suspects], "quarantines": [dict(q) for q in c.quarantines],
            "avoidNodes": list(c.avoid), "nodeFailures": [dict(n) for n in c.node_failures], "rankShift": c.rank_shift or None,
        }  # fmt: skip


def blame_order(f: Failure) -> tuple[int, int, bool, bool, str, int]:
    """Sort key of the failure that decides for the gang: smallest first (module docstring, rule 1)."""
    verdict = PRECEDENCE.index(f.verdict) if f.verdict in PRECEDENCE else len(PRECEDENCE)
    return 0 if f.cause in INFRASTRUCTURE_CAUSES else 1, verdict, not f.signalled, not f.finished, f.finished, f.rank


def infrastructure_backoff(restarts: int, base_seconds: int) -> int:
    """Seconds to wait before the ``restarts``-th restart of one kind (1-based): 0, then base, 2·base, 4·base ...

    capped at :data:`INFRASTRUCTURE_BACKOFF_CAP_SECONDS` (or ``base_seconds`` when larger). The first restart is
    immediate: a single node loss should cost no time; a loop of them backs off.
    """
    if restarts <= 1 or base_seconds <= 0:
        return 0
    return min(max(base_seconds, INFRASTRUCTURE_BACKOFF_CAP_SECONDS), base_seconds * 2 ** min(restarts - 2, 20))


def counters_text(c: Counters, backoff_limit: int, infra_limit: int) -> str:
    """``"job restarts 1/3, infrastructure restarts 2/10"``."""
    return f"job restarts {c.job_restarts}/{backoff_limit}, infrastructure restarts {c.infrastructure_restarts}/{infra_limit}"


def _count_node_failures(c: Counters, node: str) -> tuple[tuple[dict[str, Any], ...], int]:
    counts = {str(n["node"]): int(n["count"]) for n in c.node_failures}
    counts[node] = counts.get(node, 0) + 1
    return tuple({"node": n, "count": k} for n, k in sorted(counts.items())), counts[node]


def restart_infrastructure(run_policy: Any, counters: Counters, reason: str, what: str, *, node: str = "", bounded: bool = True) -> Decision:
    """An infrastructure restart not decided by a verdict (node lost, rank vanished, elastic grow), or its bound.

    Args:
        run_policy: the job's :class:`~railtrain.crds.api.RunPolicy`.
        counters: the counters before.
        reason: the condition reason of the restart; what: the sentence of what happened.
        node: the node the infrastructure failed on ("" for none): counted in ``nodeFailures``, avoided at
            :data:`NODE_FAILURES_TO_AVOID`.
        bounded: False for a restart the operator chooses (an elastic grow, bounded by its own interval):
            counted, but neither refused at ``maxInfrastructureRestarts`` nor delayed.

    Returns:
        The restart, or a Fail with :data:`REASON_INFRA_LIMIT` once ``maxInfrastructureRestarts`` are spent.
    """
    blamed = Failure(rank=-1, code=0, verdict=contract.VERDICT_RETRYABLE, reason=reason, message=what, node=node)
    return _infrastructure(run_policy, counters, blamed, reason, what, node=node, avoid_now=False, bounded=bounded)


def _infrastructure(run_policy: Any, c: Counters, blamed: Failure, reason: str, what: str, *, node: str, avoid_now: bool, bounded: bool = True, **more: Any) -> Decision:
    limit, backoff_limit = run_policy.max_infrastructure_restarts, run_policy.backoff_limit
    if bounded and c.infrastructure_restarts >= limit:
        message = f"{what}; runPolicy.maxInfrastructureRestarts={limit} infrastructure restarts used"
        return Decision(FAIL, blamed.verdict, REASON_INFRA_LIMIT, message, blamed, counters=c, **{k: v for k, v in more.items() if k in ("ignored",)})
    avoid = set(c.avoid)
    node_failures = c.node_failures
    if node:
        node_failures, times = _count_node_failures(c, node)
        if avoid_now or times >= NODE_FAILURES_TO_AVOID:
            avoid.add(node)
    after = replace(c, infrastructure_restarts=c.infrastructure_restarts + 1, avoid=tuple(sorted(avoid)), node_failures=node_failures)
    wait = infrastructure_backoff(after.infrastructure_restarts, run_policy.infrastructure_backoff_seconds) if bounded else 0
    pause = f", next gang after {wait} s" if wait else ""
    message = f"{what}; restarting the whole gang ({counters_text(after, backoff_limit, limit)}{pause})"
    return Decision(RESTART_INFRASTRUCTURE, blamed.verdict, reason, message, blamed, avoid=after.avoid, counters=after, backoff_seconds=wait, what=what, **more)


def _suspects(c: Counters, verdict: str, named: Sequence[str], ranks_on: Mapping[str, set[int]]) -> tuple[tuple[dict[str, Any], ...], dict[str, dict[str, Any]]]:
    table: dict[tuple[str, str], dict[str, Any]] = {(s["node"], s["verdict"]): dict(s) for s in c.suspects}
    for node in named:
        entry = table.setdefault((node, verdict), {"node": node, "verdict": verdict, "count": 0})
        entry["count"] = int(entry["count"]) + 1
        if verdict in SEPARATE_VERDICTS:
            entry["ranks"] = sorted(set(entry.get("ranks") or []) | ranks_on.get(node, set()))
    out = tuple(table[k] for k in sorted(table))
    return out, {node: table[(node, verdict)] for node in named}


def decide(failures: GangFailure, run_policy: Any, counters: Counters, now: datetime) -> Decision:
    """Decide what a failed gang leads to (the module docstring's rules).

    Args:
        failures: the failed attempt's evidence (at least one failure).
        run_policy: the job's :class:`~railtrain.crds.api.RunPolicy` (``failurePolicy``, ``backoffLimit``,
            ``maxInfrastructureRestarts``, ``infrastructureBackoffSeconds``).
        counters: what was spent before this failure.
        now: the current time (UTC, timezone-aware), for the quarantine windows.

    Returns:
        A :class:`Decision`; its ``counters`` are the ones to store.

    Raises:
        ValueError: ``failures`` holds no failure.
    """
    if not failures.failures:
        raise ValueError("decide needs at least one failed rank")
    f = min(failures.failures, key=blame_order)
    c, backoff_limit = counters, run_policy.backoff_limit
    if f.cause in INFRASTRUCTURE_CAUSES:
        reason = REASON_REFUSED if f.cause == CAUSE_ADMISSION else REASON_EVICTED
        return _infrastructure(run_policy, c, f, reason, f.detail(), node=f.node, avoid_now=f.cause == CAUSE_ADMISSION)
    detail, policy = f.detail(), run_policy.failure_policy
    rule = policy.rule(f.verdict)
    if rule.action == FailureAction.FAIL.value:
        if f.verdict == contract.VERDICT_USER_ERROR:
            return Decision(FAIL, f.verdict, reasons.USER_ERROR, detail + " (a configuration error: not retried)", f, counters=c)
        return Decision(FAIL, f.verdict, reasons.FAILURE_POLICY, f"{detail} (runPolicy.failurePolicy: {f.verdict} → Fail)", f, counters=c)
    ours = set(failures.gang_nodes.values()) - {""}
    claimed = sorted({n for n in f.nodes if n})
    named = [n for n in claimed if n in ours and (failures.existing is None or n in failures.existing)]
    ignored = tuple(n for n in claimed if n not in named)
    # rule 4: a verdict naming every node of a multi-node gang tells none apart (e.g. two replicas that disagree)
    undiscriminating = len(ours) > 1 and set(named) >= ours
    ranks_on: dict[str, set[int]] = {}
    for rank, node in failures.gang_nodes.items():
        ranks_on.setdefault(node, set()).add(rank)
    suspects, mine = _suspects(c, f.verdict, named, ranks_on)
    due = [] if undiscriminating else [
        n for n in named
        if rule.quarantine_after and int(mine[n]["count"]) >= rule.quarantine_after and n not in c.tainted
        and (f.verdict not in SEPARATE_VERDICTS or len(mine[n].get("ranks") or []) >= 2)
    ]  # fmt: skip
    recent = [q for q in c.quarantines if (t := parse_time_or_none(q.get("time", ""))) is not None and now - t < QUARANTINE_WINDOW]
    c = replace(c, suspects=suspects)
    if due and len(recent) + len(due) > policy.max_quarantines_per_hour:
        message = (
            f"{detail}; the {f.verdict} verdict names node(s) {', '.join(due)} for quarantine, but this job already quarantined "
            f"{len(recent)} node(s) in the last hour and runPolicy.failurePolicy.maxQuarantinesPerHour is {policy.max_quarantines_per_hour}"
        )
        return Decision(FAIL, f.verdict, REASON_QUARANTINE_LIMIT, message, f, ignored=ignored, counters=c)
    room = len(due) if c.cluster_limit is None else max(0, c.cluster_limit - c.cluster_quarantines)
    quarantine, budget_spent = tuple(due[:room]), tuple(due[room:])
    records = c.quarantines + tuple({"node": n, "verdict": f.verdict, "time": format_time(now)} for n in quarantine)
    avoid = set(c.avoid) | set(quarantine) | set(budget_spent) | (set(named) if rule.avoid_nodes and not undiscriminating else set())
    shift = c.rank_shift + 1 if f.verdict in SEPARATE_VERDICTS and named else c.rank_shift
    c = replace(c, quarantines=records, avoid=tuple(sorted(avoid)), rank_shift=shift)
    more = dict(quarantine=quarantine, ignored=ignored, budget_spent=budget_spent)
    if rule.action == FailureAction.RESTART.value:
        if c.job_restarts >= backoff_limit:
            return Decision(FAIL, f.verdict, reasons.BACKOFF_LIMIT_EXCEEDED, f"{detail}; runPolicy.backoffLimit={backoff_limit} restarts used", f, counters=c, avoid=c.avoid, **more)
        c = replace(c, job_restarts=c.job_restarts + 1)
        wait = infrastructure_backoff(c.job_restarts, run_policy.restart_backoff_seconds)
        pause = f", next gang after {wait} s" if wait else ""
        message = f"{detail}; restarting the whole gang ({counters_text(c, backoff_limit, run_policy.max_infrastructure_restarts)}{pause})"
        return Decision(RESTART_JOB, f.verdict, reasons.RESTARTING, message, f, avoid=c.avoid, counters=c, backoff_seconds=wait, what=detail, **more)
    if quarantine:
        reason, why = REASON_QUARANTINED, f"node(s) {', '.join(quarantine)} quarantined"
    elif budget_spent:
        reason = REASON_AVOIDED
        why = (f"node(s) {', '.join(budget_spent)} not quarantined: the cluster's bound of {c.cluster_limit} quarantines per hour is reached "
               f"({c.cluster_quarantines} in the last hour); avoided by this job")
    elif undiscriminating:
        reason = REASON_INFRA
        why = (f"the verdict names every node of the gang ({', '.join(named)}), which tells none of them apart: none quarantined or avoided; "
               "restart not counted against backoffLimit")
    elif rule.avoid_nodes and named:
        reason, why = REASON_AVOIDED, f"node(s) {', '.join(named)} avoided by this job"
    else:
        reason, why = REASON_INFRA, "restart not counted against backoffLimit"
    return _infrastructure(run_policy, c, f, reason, f"{detail}; {why}", node="", avoid_now=False, **more)
