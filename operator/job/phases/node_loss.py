"""Node loss: a Node deleted (or deleted and created again under the same name), or NotReady longer than
``runPolicy.nodeLostGraceSeconds``, under the gang.

The whole gang restarts on other nodes at once (reason ``NodeLost`` naming the
node), as an infrastructure restart: not after the pod garbage collector
removes the lost rank's pod (about 40 s on a local cluster), and not by
recreating only that rank next to survivors stuck in a broken rendezvous.

Pods on a lost node never finish terminating: their kubelet is gone and will
not confirm the deletion, and ranks are named ``<job>-<rank>``, so such a pod
would block its rank's next pod forever. Force-delete policy: every pod of
the job bound to a lost node is deleted with grace period 0 (the API object
goes at once; the container, if its node ever comes back, is killed by its
kubelet, which no longer finds the pod). Pods on nodes that are merely slow
to confirm are never force-deleted.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from railtrain.crds.times import parse_time
from railtrain.crds import reasons
from railtrain.crds import contract
from railtrain.operator.job.pods import rank_of
from railtrain.operator.job.phases.restart import restart_infrastructure
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import ACTIVE, ALL_PHASES, Transition

DEFAULT_GRACE_SECONDS = 30


def _grace(step: Step) -> timedelta:
    seconds = step.job.spec.run_policy.node_lost_grace_seconds if step.job else DEFAULT_GRACE_SECONDS
    return timedelta(seconds=seconds)


def node_lost(step: Step, name: str, placed_uid: str = "") -> str:
    """Why node ``name`` is lost ("" when it is not, or when nodes were not observed in this pass).

    A name is not an identity: a Node deleted and created again under the same name (within a second, before the
    pod garbage collector acts) is a new object, and what ran on the old one is gone. So when ``placed_uid`` (the
    Node's uid recorded on the rank's pod at placement, :data:`~railtrain.crds.contract.ANNOTATION_NODE_UID`) is
    given and differs from the Node's uid now, the node is lost as if deleted. A pod without the record (created
    by an operator before it) is judged by the name alone.

    Args:
        step: the pass (its ``nodes`` and ``now``).
        name: the node's name.
        placed_uid: the uid the rank was placed on ("" when not recorded).

    Returns:
        One clause naming why, or "".
    """
    if step.nodes is None or not name:
        return ""
    node = step.nodes.get(name)
    if node is None:
        return "the Node was deleted"
    uid = (node.get("metadata") or {}).get("uid") or ""
    if placed_uid and uid and uid != placed_uid:
        return f"the Node was deleted and created again under the same name (uid {placed_uid} when the rank was placed, {uid} now)"
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") == "True":
        return ""
    since = parse_time(ready.get("lastTransitionTime"))
    if since is None or step.now - since < _grace(step):
        return ""
    return f"the Node has been NotReady since {ready.get('lastTransitionTime')} ({ready.get('reason') or ready.get('status')})"


def _bound(pod: dict[str, Any]) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def placed_uid(pod: dict[str, Any]) -> str:
    """The uid of the Node the pod was placed on (:data:`~railtrain.crds.contract.ANNOTATION_NODE_UID`), "" when not recorded."""
    return str((pod["metadata"].get("annotations") or {}).get(contract.ANNOTATION_NODE_UID) or "")


def pod_node_lost(step: Step, pod: dict[str, Any]) -> str:
    """Why the node ``pod`` is bound to is lost (:func:`node_lost` with the uid recorded on the pod), "" when it is not."""
    return node_lost(step, _bound(pod), placed_uid(pod))


def _on_lost_nodes(step: Step) -> list[dict[str, Any]]:
    return [p for p in step.pods if pod_node_lost(step, p)]


def _force_delete(step: Step) -> None:
    step.out.force_delete_pods = sorted(set(step.out.force_delete_pods) | {p["metadata"]["name"] for p in _on_lost_nodes(step)})


def _unfinished(step: Step) -> list[dict[str, Any]]:
    """The gang's pods whose rank has not exited 0 (a finished rank's node may go: it holds nothing the gang needs)."""
    return [p for p in step.gang if rank_of(p) not in step.done]


def _gang_on_lost_node(step: Step) -> bool:
    return any(pod_node_lost(step, p) for p in _unfinished(step))


def _restart(step: Step) -> str:
    lost = {}
    for p in _unfinished(step):
        why = pod_node_lost(step, p)
        if why:
            lost.setdefault(_bound(p), (why, []))[1].append(f"{p['metadata']['name']} (rank {rank_of(p)})")
    parts = [f"node {node}: {why}; pods {', '.join(pods)}" for node, (why, pods) in sorted(lost.items())]
    return restart_infrastructure(step, reasons.NODE_LOST, f"{'; '.join(parts)}; the gang moves to other nodes", node=min(lost))


FORCE_DELETE_LOST = Transition(
    "force-delete-on-lost-nodes", ALL_PHASES, lambda s: bool(_on_lost_nodes(s)), _force_delete,
    "Every pod of the job bound to a lost node (deleted, or NotReady past runPolicy.nodeLostGraceSeconds) is force-deleted (grace period 0).",
)
NODE_LOST = Transition(
    "node-lost", ACTIVE, _gang_on_lost_node, _restart,
    "A rank's node is lost: the whole gang restarts on other nodes at once, reason NodeLost naming the node (an infrastructure restart).",
)
