"""A released gang kube-scheduler will not bind: re-placed at once, with the scheduler's words (issue 15, kind 8).

The operator pins every rank to a node and lifts the gang gate; kube-scheduler
then binds each pod or refuses it (pod condition ``PodScheduled=False``,
reason ``Unschedulable``, the message of its ``FailedScheduling`` Event). A
refusal happens when the pinned node became unusable between release and
binding (cordoned, tainted, NotReady, deleted) or when a pod needs what
placement does not model of that node (a PersistentVolume's node affinity, a
host port taken by another pod). Either way the pinned pod can never bind
there, so waiting for ``runPolicy.gangTimeoutSeconds`` only keeps the other
ranks' nodes idle: the whole gang is released at once and re-queued (phase
Pending), and the Scheduled condition carries the scheduler's message. A
refusal of the pod itself, which no other node would cure (a claim that does
not exist or is not bound yet: no node counted against the pinned one, see
:func:`about_the_node`), is left to the gang timeout, whose condition quotes
the scheduler too.

Bounds: the first re-place of a job is immediate; each further one waits
:func:`railtrain.operator.job.records.requeue_delay` of the job's ``status.requeues``
(10 s doubling to 600 s, shared with the gang timeout). A node the scheduler
refused although the operator's model finds it usable (what placement does not
model) is added to ``status.avoidNodes``, so the next placement of this job
does not pick it again; a node that is merely cordoned, tainted or gone needs
no such record, since placement already leaves it out.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

import re
from typing import Any

from railtrain.crds.labels import HOSTNAME
from railtrain.crds.times import format_time
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import is_gated, rank_of
from railtrain.operator.job.records import requeue_delay
from railtrain.operator.scheduling.nodefit import tolerates
from railtrain.operator.job.phases.step import Step, healthy
from railtrain.operator.job.phases.transition import ACTIVE, Transition



def pinned_node(pod: dict[str, Any]) -> str:
    """The node a released pod is pinned to (its ``kubernetes.io/hostname`` nodeSelector entry), "" when none."""
    return ((pod.get("spec") or {}).get("nodeSelector") or {}).get(HOSTNAME, "")


def scheduler_refusal(pod: dict[str, Any]) -> str:
    """kube-scheduler's message when it refused the pod (``PodScheduled=False``, reason ``Unschedulable``), else ""."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return " ".join(str(c.get("message") or "the scheduler refused it").split()).rstrip(".")
    return ""


_SELECTOR = "didn't match Pod's node affinity/selector"
_COUNTED = re.compile(r"\d+ node\(s\) ([^,.]+)")


def about_the_node(words: str) -> bool:
    """Whether kube-scheduler's refusal of a pinned pod names a reason of its pinned node.

    The scheduler counts the nodes each filter refused (``1 node(s) didn't match
    PersistentVolume's node affinity, 2 node(s) didn't match Pod's node
    affinity/selector``); for a pod pinned by nodeSelector every other node
    fails the selector, so any other counted reason is the pinned node's. A
    refusal of the pod itself (``pod has unbound immediate PersistentVolumeClaims``)
    counts no node and says nothing against it.
    """
    return any(reason.strip() != _SELECTOR for reason in _COUNTED.findall(words))


def node_unusable(node: dict[str, Any] | None, pod: dict[str, Any]) -> str:
    """Why kube-scheduler can no longer bind ``pod`` to ``node`` ("" when it can, by the node's own state).

    A deleted node, a cordoned one (``spec.unschedulable``), one not Ready, or a
    NoSchedule/NoExecute taint the pod does not tolerate (core/v1 Taint and
    Toleration semantics, as kube-scheduler's TaintToleration filter).
    """
    if node is None:
        return "the Node was deleted"
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "the Node was cordoned"
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in (pod.get("spec") or {}).get("tolerations") or []):
            return f"the Node has the taint {taint.get('key')}{'=' + taint['value'] if taint.get('value') else ''}:{taint.get('effect')}"
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        return "the Node is not Ready"
    return ""


def _refused(step: Step) -> list[tuple[dict[str, Any], str, str, str]]:
    """``(pod, node, our reason, scheduler's words)`` of every released, unbound rank that cannot bind."""
    out = []
    for p in step.gang:
        node = pinned_node(p)
        if is_gated(p) or (p.get("spec") or {}).get("nodeName") or not node or p["metadata"].get("deletionTimestamp"):
            continue
        ours = node_unusable(step.nodes.get(node), p) if step.nodes is not None else ""
        words = scheduler_refusal(p)
        if ours or (words and about_the_node(words)):
            out.append((p, node, ours, words))
    return out


def _observed(step: Step) -> bool:
    return bool(step.released) and not healthy(step) and bool(_refused(step))


def _replace(step: Step) -> str:
    refused = _refused(step)
    n = step.n
    parts = []
    for p, node, ours, words in refused:
        said = f"kube-scheduler: {words}" if words else "not bound yet"
        parts.append(f"pod {p['metadata']['name']} (rank {rank_of(p)}) on node {node}: {ours + '; ' if ours else ''}{said}")
    avoid = sorted({node for _, node, ours, words in refused if words and not ours})
    state = step.state
    if avoid:
        step.status["avoidNodes"] = sorted(set(state.avoid_nodes) | set(avoid))
    requeues = state.requeues + 1
    step.status["requeues"] = requeues
    after = format_time(step.now + requeue_delay(requeues - 1))
    if requeues > 1:
        step.status["requeueAfter"] = after
    else:
        step.status.pop("requeueAfter", None)
    step.delete(step.gang)
    step.released = None
    when = f"next admission attempt after {after}" if requeues > 1 else "re-placing it now"
    avoided = f"; this job avoids {', '.join(avoid)} from now on" if avoid else ""
    step.set_condition(cond.RUNNING, False, reasons.FAILED_SCHEDULING, f"{len(refused)} of {n} ranks could not be bound")
    step.set_condition(
        cond.SCHEDULED, False, reasons.FAILED_SCHEDULING,
        f"{'; '.join(parts)}; released all {n} nodes and re-queued, {when} (requeue {requeues}){avoided}",
        "Warning",
    )
    return cond.PENDING


UNSCHEDULABLE = Transition(
    "unschedulable", ACTIVE, _observed, _replace,
    "A released rank kube-scheduler refuses (PodScheduled=False Unschedulable), or whose pinned node became unusable before binding: "
    "the whole gang is released and re-queued at once (then with backoff), the scheduler's words in the Scheduled condition (phase Pending).",
)
