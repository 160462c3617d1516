"""Waiting for the previous gang's pods to go away, naming them, with a bound for pods on lost nodes.

A rank's pod name (``<job>-<rank>``) is reused by every restart, so a new
gang's rank waits until the old pod of that name is gone. The Scheduled
condition names every pod it waits for and why it is still there. A pod
whose node is gone never finishes terminating (no kubelet confirms it), so:

* node object deleted: the pod is force-deleted (grace period 0)
  :data:`FORCE_DELETE_AFTER_SECONDS` after its deletion was requested;
* node not Ready: likewise, once the node has also been not Ready for
  :data:`NODE_LOST_AFTER_SECONDS` (the node lifecycle controller's default
  eviction delay), since a node that comes back would still run the old
  processes beside the new rank;
* a pod held by a finalizer is someone else's to release: it is reported,
  never force-removed (a force delete would not remove it anyway).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from railtrain.operator import conditions as cond
from railtrain.operator.gang import parse_time, rank_of, restart_of
from railtrain.operator.phases.step import Step
from railtrain.operator.phases.transition import ACTIVE, Transition

FORCE_DELETE_AFTER_SECONDS = 15
"""Seconds after its deletion was requested that a pod on a lost node is force-deleted."""
NODE_LOST_AFTER_SECONDS = 300
"""Seconds a node must have been not Ready to count as lost (kube-controller-manager's default pod eviction timeout)."""
REASON = "WaitingForOldPods"


def blocking(step: Step) -> list[dict[str, Any]]:
    """Pods of earlier gangs, or being deleted, that hold the name of a rank the current gang lacks, by name."""
    present = {rank_of(p) for p in step.gang}
    old = [p for p in step.pods if p["metadata"].get("deletionTimestamp") or restart_of(p) != step.restarts]
    return sorted((p for p in old if 0 <= rank_of(p) < step.n and rank_of(p) not in present), key=lambda p: p["metadata"]["name"])


def deletion_requested(pod: dict[str, Any]) -> datetime | None:
    """When the pod's deletion was requested: ``deletionTimestamp`` minus its grace period."""
    meta = pod["metadata"]
    at = parse_time(meta.get("deletionTimestamp"))
    return at - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0)) if at else None


def node_lost(step: Step, name: str) -> str | None:
    """Why node ``name`` counts as lost ("is gone", "has not been Ready since ..."), None when it is not."""
    if name not in step.nodes:
        return None
    node = step.nodes[name]
    if node is None:
        return "is gone"
    ready = cond.find((node.get("status") or {}).get("conditions") or [], "Ready")
    since = parse_time(ready.get("lastTransitionTime")) if ready else None
    if ready and ready.get("status") != "True" and since and step.now >= since + timedelta(seconds=NODE_LOST_AFTER_SECONDS):
        return f"has not been Ready since {ready['lastTransitionTime']}"
    return None


def _describe_and_decide(step: Step, pod: dict[str, Any]) -> str:
    meta, name = pod["metadata"], pod["metadata"]["name"]
    node = (pod.get("spec") or {}).get("nodeName")
    if not meta.get("deletionTimestamp"):
        return f"{name} (of restart {restart_of(pod)}, being deleted)"
    where = f" on node {node}" if node else ""
    text = f"{name} (Terminating since {cond.rfc3339(deletion_requested(pod))}{where}"
    if meta.get("finalizers"):
        return text + f", held by finalizer {', '.join(meta['finalizers'])}: not force-deleted, its owner must release it)"
    lost = node_lost(step, node) if node else None
    if not lost:
        return text + ")"
    due = deletion_requested(pod) + timedelta(seconds=FORCE_DELETE_AFTER_SECONDS)
    if step.now >= due:
        step.out.force_delete.append(name)
        step.out.uids[name] = meta.get("uid", "")
        step.out.events.append(("Warning", "ForceDeleted", f"force-deleted pod {name}: its node {node} {lost}, so no kubelet will confirm its deletion"))
        return text + f"; node {node} {lost}: force-deleting it)"
    return text + f"; node {node} {lost}: force-deleted at {cond.rfc3339(due)} if still there)"


def _waiting(step: Step) -> bool:
    return bool(blocking(step))


def _report(step: Step) -> None:
    pods = blocking(step)
    names = "; ".join(_describe_and_decide(step, p) for p in pods)
    step.set_condition(cond.SCHEDULED, False, REASON, f"waiting for {len(pods)} pod(s) of the previous gang to go away: {names}")


def _was_waiting(step: Step) -> bool:
    c = cond.find(step.conds, cond.SCHEDULED)
    return not blocking(step) and bool(c and c.get("reason") == REASON)


def _clear(step: Step) -> None:
    step.set_condition(cond.SCHEDULED, False, "OldPodsGone", "the previous gang's pods are gone; the new gang waits for admission")


WAITING_FOR_OLD_PODS = Transition(
    "waiting-for-old-pods", ACTIVE, _waiting, _report,
    "Pods of the previous gang hold ranks' names: Scheduled False (WaitingForOldPods) names each; pods on lost nodes are force-deleted after the bound, pods held by a finalizer are reported only.",
)
OLD_PODS_GONE = Transition("old-pods-gone", ACTIVE, _was_waiting, _clear, "The previous gang's pods are gone: Scheduled False (OldPodsGone).")
