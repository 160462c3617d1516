"""Node quarantine (pure): which nodes a verdict takes out of service, the taint that does it, and the bound.

A quarantined node carries the taint ``railtrain.dev/quarantined=<verdict>:NoSchedule``
(:data:`TAINT_KEY`): kube-scheduler keeps every pod without a toleration off
it (the Kubernetes taint convention; railtrain's pods never tolerate it) and
railtrain's placement never chooses it (:func:`railtrain.operator.cluster.snapshot`).
Pods already running there are not evicted (NoSchedule, not NoExecute): other
jobs on the node are not railtrain's to kill. Only an administrator clears the
taint (``railtrain node clear NODE`` or ``kubectl taint node NODE
railtrain.dev/quarantined-``).

Which nodes: those named by a verdict (``nodes`` of the termination message,
:mod:`railtrain.crds.contract`) whose rule quarantines them
(:class:`~railtrain.crds.failure_policy.FailurePolicyRule` ``quarantineAfter``:
the N-th time verdicts of this kind named the node in this job). The bound:
at most ``maxQuarantinesPerHour`` nodes per job in any sliding hour; a verdict
that would exceed it quarantines nothing and fails the job
(:data:`REASON_LIMIT`), so one job that breaks every node it lands on cannot
take half the cluster out of service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from railtrain.crds.failure_policy import FailurePolicy, FailurePolicyRule

TAINT_KEY = "railtrain.dev/quarantined"
"""Taint key of a quarantined node (value: the verdict that caused it)."""
TAINT_EFFECT = "NoSchedule"
WINDOW = timedelta(hours=1)
"""The sliding window of ``maxQuarantinesPerHour``."""
REASON_QUARANTINED = "NodeQuarantined"
"""Event reason on the Node and on the job when a node is quarantined."""
REASON_LIMIT = "QuarantineLimitExceeded"
"""Condition reason of a job failed because its verdicts would quarantine too many nodes."""
REASON_CLEARED = "QuarantineCleared"
"""Event reason on the Node when an administrator clears it with ``railtrain node clear``."""


def is_quarantined(node: Mapping[str, Any]) -> bool:
    """Whether ``node`` (a v1 Node dict) carries the quarantine taint."""
    return any(t.get("key") == TAINT_KEY for t in ((node.get("spec") or {}).get("taints") or []))


def taints_with(node: Mapping[str, Any], verdict: str) -> list[dict[str, Any]] | None:
    """The node's taints plus the quarantine taint, or None when it is already there.

    Args:
        verdict: the verdict kind, kept as the taint's value (a valid label value).
    """
    taints = list((node.get("spec") or {}).get("taints") or [])
    if is_quarantined(node):
        return None
    return taints + [{"key": TAINT_KEY, "value": verdict, "effect": TAINT_EFFECT}]


def taints_without(node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The node's taints without the quarantine taint, or None when it has none."""
    if not is_quarantined(node):
        return None
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY]


@dataclass
class Decision:
    """What one verdict does to nodes.

    Attributes:
        quarantine: nodes to taint now.
        avoid: nodes the job's next gangs avoid (quarantined ones included).
        suspects: the new ``status.suspects`` (counts per node and verdict).
        records: the new ``status.quarantines`` (with this decision's nodes).
        exceeded: "" or why the job must fail (:data:`REASON_LIMIT`); then nothing is quarantined.
    """

    quarantine: list[str] = field(default_factory=list)
    avoid: list[str] = field(default_factory=list)
    suspects: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    exceeded: str = ""


def _parse(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None


def decide(
    policy: FailurePolicy,
    rule: FailurePolicyRule,
    verdict: str,
    named: Iterable[str],
    status: Mapping[str, Any],
    already: Iterable[str],
    now: datetime,
) -> Decision:
    """Apply one verdict's rule to the nodes it named.

    Args:
        policy: the job's failure policy (for ``maxQuarantinesPerHour``).
        rule: the rule of ``verdict`` (:meth:`FailurePolicy.rule`).
        verdict: the verdict kind.
        named: node names the verdict named (empty strings and duplicates ignored).
        status: the job's status (``suspects``, ``quarantines``, ``avoidNodes``).
        already: nodes that carry the quarantine taint now (not counted again).
        now: the current time (UTC).

    Returns:
        A :class:`Decision`. Nodes are quarantined when their count for this
        verdict reaches ``rule.quarantineAfter`` (> 0); avoided when the rule
        says ``avoidNodes`` or they are quarantined.
    """
    nodes = sorted({n for n in named if n})
    counts = {(s["node"], s["verdict"]): int(s["count"]) for s in status.get("suspects") or []}
    for node in nodes:
        counts[(node, verdict)] = counts.get((node, verdict), 0) + 1
    suspects = [{"node": n, "verdict": v, "count": c} for (n, v), c in sorted(counts.items())]
    tainted = set(already)
    due = [n for n in nodes if rule.quarantine_after and counts[(n, verdict)] >= rule.quarantine_after and n not in tainted]
    records = list(status.get("quarantines") or [])
    recent = [r for r in records if (t := _parse(r.get("time", ""))) is not None and now - t < WINDOW]
    avoid = set(status.get("avoidNodes") or [])
    out = Decision(suspects=suspects, records=records)
    if due and len(recent) + len(due) > policy.max_quarantines_per_hour:
        out.exceeded = (
            f"the {verdict} verdict names node(s) {', '.join(due)} for quarantine, but this job already quarantined "
            f"{len(recent)} node(s) in the last hour and runPolicy.failurePolicy.maxQuarantinesPerHour is {policy.max_quarantines_per_hour}"
        )
        out.avoid = sorted(avoid)
        return out
    out.quarantine = due
    out.records = records + [{"node": n, "verdict": verdict, "time": now.strftime("%Y-%m-%dT%H:%M:%SZ")} for n in due]
    if rule.avoid_nodes:
        avoid |= set(nodes)
    out.avoid = sorted(avoid | set(due))
    return out
