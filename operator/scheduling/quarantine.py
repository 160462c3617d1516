"""Node quarantine (pure): which nodes a verdict takes out of service, the taint that does it, and the bound.

A quarantined node carries the taint ``railtrain.dev/quarantined=<verdict>:NoSchedule``
(:data:`TAINT_KEY`): kube-scheduler keeps every pod without a toleration off
it (the Kubernetes taint convention; railtrain's pods never tolerate it) and
railtrain's placement never chooses it (:func:`railtrain.operator.scheduling.snapshot.snapshot`).
Pods already running there are not evicted (NoSchedule, not NoExecute): other
jobs on the node are not railtrain's to kill. Only an administrator clears the
taint (``railtrain node clear NODE`` or ``kubectl taint node NODE
railtrain.dev/quarantined-``).

Which nodes: those named by a verdict (``nodes`` of the termination message,
:mod:`railtrain.crds.contract`) whose rule quarantines them
(:class:`~railtrain.crds.failure_policy.FailurePolicyRule` ``quarantineAfter``:
the N-th time verdicts of this kind named the node in this job), among the
nodes the gang's own pods ran on (:mod:`railtrain.crds.recovery` decides). The
bounds: the platform's, at most ``--max-quarantines-per-hour`` nodes in the
whole cluster (counted from the :data:`ANNOTATION_AT` annotations the API
server stores), and the job's ``maxQuarantinesPerHour``, which can only lower
it; a verdict beyond the job's bound quarantines nothing and fails the job
(reason :data:`~railtrain.crds.reasons.QUARANTINE_LIMIT_EXCEEDED`); beyond the cluster's, the node is only avoided by the job.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping

from railtrain.crds.times import parse_time_or_none
from railtrain.crds.recovery import QUARANTINE_WINDOW

TAINT_KEY = "railtrain.dev/quarantined"
"""Taint key of a quarantined node (value: the verdict that caused it)."""
TAINT_EFFECT = "NoSchedule"
LABEL_KEY = "railtrain.dev/quarantined"
"""Node label an administrator may set (any value but "false") to keep railtrain off a node; the same test as the taint."""
ANNOTATION_AT = "railtrain.dev/quarantined-at"
"""Node annotation the operator writes with the taint: when (RFC 3339), so the cluster-wide bound survives operator restarts."""
WINDOW = QUARANTINE_WINDOW
"""The sliding window of both quarantine bounds."""


def quarantined_sentence(node: str, verdict: str, evidence: str, spare: bool = False) -> str:
    """The ``NodeQuarantined`` Warning's sentence for ``node`` tainted for ``verdict`` (``evidence``: the verdict's
    rank, reason, message); ``spare``: a hot spare took the rank the node held (no gang restart). One sentence for
    every path that quarantines (a gang restart's decision, the progress reader, a spare takeover's count)."""
    return f"node {node} quarantined (taint {TAINT_KEY}={verdict}:NoSchedule): {evidence}" + ("; a hot spare took its rank" if spare else "")


def quarantined_by(node: Mapping[str, Any]) -> str | None:
    """Why ``node`` (a v1 Node dict) is quarantined, or None when it is not: the one test that placement,
    ``railtrain node list``, ``railtrain node clear`` and the metrics all use.

    Returns:
        The quarantine taint's value (the verdict; "administrator" when empty), else ``"label"`` when the
        :data:`LABEL_KEY` label is set to anything but "false", else None.
    """
    taint = next((t for t in ((node.get("spec") or {}).get("taints") or []) if t.get("key") == TAINT_KEY), None)
    if taint is not None:
        return taint.get("value") or "administrator"
    if (((node.get("metadata") or {}).get("labels") or {}).get(LABEL_KEY, "false")) != "false":
        return "label"
    return None


def is_quarantined(node: Mapping[str, Any]) -> bool:
    """Whether ``node`` is quarantined (:func:`quarantined_by` is not None)."""
    return quarantined_by(node) is not None


def recent_quarantines(nodes: Iterable[Mapping[str, Any]], now: datetime) -> int:
    """How many of ``nodes`` the operator quarantined within the last hour (taint present, :data:`ANNOTATION_AT` within :data:`WINDOW`).

    Read from what the API server stores, so the cluster-wide bound holds across operator restarts.
    """
    count = 0
    for node in nodes:
        stamp = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_AT, "")
        at = parse_time_or_none(stamp)
        if at is None:
            continue
        if quarantined_by(node) is not None and now - at < WINDOW:
            count += 1
    return count


def taints_with(node: Mapping[str, Any], verdict: str) -> list[dict[str, Any]] | None:
    """The node's taints plus the quarantine taint, or None when it is already there.

    Args:
        verdict: the verdict kind, kept as the taint's value (a valid label value).
    """
    taints = list((node.get("spec") or {}).get("taints") or [])
    if any(t.get("key") == TAINT_KEY for t in taints):
        return None
    return taints + [{"key": TAINT_KEY, "value": verdict, "effect": TAINT_EFFECT}]


def taints_without(node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The node's taints without the quarantine taint, or None when it has none."""
    if not any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or []):
        return None
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY]
