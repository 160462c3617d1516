"""Waiting for the previous gang's pods to go away, naming each and why it is still there.

A rank's pod name (``<job>-<rank>``) is reused by every restart, so a new
gang's rank waits until the old pod of that name is gone. The Scheduled
condition names every pod it waits for: since when it is Terminating, on
which node, and what holds it:

* a pod on a lost node (Node deleted, or NotReady longer than
  ``runPolicy.nodeLostGraceSeconds``) never finishes terminating, since no
  kubelet confirms it; the node-loss policy (:mod:`.node_loss`) force-deletes
  it (grace period 0) in the first pass that sees the node lost, and this row
  says so while it waits;
* a pod held by a finalizer is someone else's to release: it is reported,
  never force-removed (a force delete would not remove it anyway).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from railtrain.crds.times import format_time, parse_time
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import rank_of, restart_of
from railtrain.operator.job.phases.node_loss import pod_node_lost
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, Transition



def blocking(step: Step) -> list[dict[str, Any]]:
    """Pods of earlier gangs, or being deleted, that hold the name of a rank the current gang lacks, by name."""
    present = {rank_of(p) for p in step.gang} | step.held()
    old = [p for p in step.pods if p["metadata"].get("deletionTimestamp") or restart_of(p) != step.restarts]
    return sorted((p for p in old if 0 <= rank_of(p) < step.n and rank_of(p) not in present), key=lambda p: p["metadata"]["name"])


def deletion_requested(pod: dict[str, Any]) -> datetime | None:
    """When the pod's deletion was requested: ``deletionTimestamp`` minus its grace period."""
    meta = pod["metadata"]
    at = parse_time(meta.get("deletionTimestamp"))
    return at - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0)) if at else None


def describe(step: Step, pod: dict[str, Any]) -> str:
    """One pod the gang waits for, e.g. ``llm-1 (Terminating since 2026-11-29T12:00:00Z on node b, held by finalizer x)``."""
    meta, name = pod["metadata"], pod["metadata"]["name"]
    node = (pod.get("spec") or {}).get("nodeName")
    if not meta.get("deletionTimestamp"):
        return f"{name} (of restart {restart_of(pod)}, being deleted)"
    where = f" on node {node}" if node else ""
    text = f"{name} (Terminating since {format_time(deletion_requested(pod))}{where}"
    if meta.get("finalizers"):
        return text + f", held by finalizer {', '.join(meta['finalizers'])}: not force-deleted, its owner must release it)"
    lost = pod_node_lost(step, pod) if node else ""
    if lost:
        return text + f"; {lost}: the node-loss policy force-deletes it)"
    return text + ")"


def _waiting(step: Step) -> bool:
    return bool(blocking(step))


def _report(step: Step) -> None:
    pods = blocking(step)
    names = "; ".join(describe(step, p) for p in pods)
    step.set_condition(cond.SCHEDULED, False, reasons.WAITING_FOR_OLD_PODS, f"waiting for {len(pods)} pod(s) of the previous gang to go away: {names}")


def _was_waiting(step: Step) -> bool:
    c = cond.find(step.conds, cond.SCHEDULED)
    return not blocking(step) and bool(c and c.get("reason") == reasons.WAITING_FOR_OLD_PODS)


def _clear(step: Step) -> None:
    step.set_condition(cond.SCHEDULED, False, reasons.OLD_PODS_GONE, "the previous gang's pods are gone; the new gang waits for admission")


WAITING_FOR_OLD_PODS = Transition(
    "waiting-for-old-pods", ACTIVE, _waiting, _report,
    "Pods of the previous gang hold ranks' names: Scheduled False (WaitingForOldPods) names each, its node and what holds it (a finalizer is reported, never force-removed).",
)
OLD_PODS_GONE = Transition("old-pods-gone", ACTIVE, _was_waiting, _clear, "The previous gang's pods are gone: Scheduled False (OldPodsGone).")
