"""Which nodes a gang's pods may use, and what each pod takes from a node (pure).

kube-scheduler binds a pod only to a node that passes its filters; a gang
admitted onto nodes its pods cannot use would sit Pending until the gang
timeout. Placement therefore applies the same filters first, with the rules of
the Kubernetes scheduler plugins they mirror:

* NodeAffinity: every ``nodeSelector`` label must match, and one of the
  ``requiredDuringSchedulingIgnoredDuringExecution`` node selector terms must
  (expressions ANDed within a term, terms ORed; an empty term matches nothing;
  operators In, NotIn, Exists, DoesNotExist, Gt, Lt; ``matchFields`` on
  ``metadata.name``);
* TaintToleration: every NoSchedule/NoExecute taint must be tolerated (empty
  key with Exists tolerates everything; an empty effect matches every effect);
* NodeResourcesFit: a pod's request is the larger of its biggest init
  container and the sum of its containers plus restartable (sidecar) init
  containers; a node fits when its allocatable minus what bound or pinned pods
  hold covers it, for every resource the pod names.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from railtrain.operator.scheduling.snapshot import ClusterSnapshot, NodeInfo, format_quantity, pod_requests, untolerated


@dataclass(frozen=True)
class PodNeeds:
    """What one pod of a gang needs from a node, besides its accelerators.

    Attributes:
        requests: resource name → amount per pod (cores for ``cpu``, bytes for
            ``memory``, device counts for extended resources such as ``rdma/ib``);
            the accelerator resource is left out (``GangRequest.gpus_per_node``).
        node_selector: labels the node must carry (``spec.nodeSelector``).
        terms: required node affinity terms (ORed); empty means any node.
        tolerations: the pod's tolerations.
    """

    requests: Mapping[str, float] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    terms: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()


def pod_needs(pod: Mapping[str, Any], gpu_resource: str) -> PodNeeds:
    """The :class:`PodNeeds` of a rendered (unpinned) pod manifest."""
    spec = pod.get("spec", {}) or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    requests = {k: v for k, v in pod_requests(pod).items() if k != gpu_resource and v > 0}
    return PodNeeds(requests, dict(spec.get("nodeSelector") or {}), tuple(affinity.get("nodeSelectorTerms") or ()), tuple(spec.get("tolerations") or ()))


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (core/v1 Toleration semantics)."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return op == "Exists"
    if toleration.get("key") != taint.get("key"):
        return False
    return op == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def _requirement(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: Mapping[str, Any], node: NodeInfo) -> bool:
    """Whether one node selector term matches ``node`` (an empty term matches nothing)."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    by_field = {"metadata.name": node.name}
    return all(_requirement(r, node.labels) for r in exprs) and all(_requirement(r, by_field) for r in fields)


def _implicit(gpu_resource: str) -> dict[str, str]:
    """The toleration every rendered pod carries (:func:`railtrain.operator.job.render.gang_tolerations`)."""
    return {"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}


def _unfit(needs: PodNeeds, node: NodeInfo, tolerations: tuple[Mapping[str, Any], ...], requests: list[tuple[str, float]]) -> str:
    if any(node.labels.get(k) != v for k, v in needs.node_selector.items()):
        return "not matching spec.template.spec.nodeSelector"
    if needs.terms and not any(term_matches(t, node) for t in needs.terms):
        return "not matching the required node affinity"
    for taint in node.taints:
        if not any(tolerates(t, taint) for t in tolerations):
            return untolerated(taint)
    for name, amount in requests:
        if node.allocatable.get(name, 0.0) < amount:
            return f"with less than {format_quantity(name, amount)} {name} allocatable"
    return ""


def _busy(node: NodeInfo, requests: list[tuple[str, float]]) -> str:
    for name, amount in requests:
        if node.free.get(name, 0.0) < amount:
            return f"with less than {format_quantity(name, amount)} {name} free"
    return ""


def busy(needs: PodNeeds, node: NodeInfo) -> str:
    """Which requested resource ``node`` lacks free right now ("" when every request fits)."""
    return _busy(node, sorted(needs.requests.items()))


def _with(node: NodeInfo, **fields: Any) -> NodeInfo:
    """A copy of ``node`` with ``fields`` changed; a shallow copy, several times cheaper than ``dataclasses.replace`` (no ``__init__``)."""
    out = object.__new__(NodeInfo)
    out.__dict__.update(node.__dict__, **fields)
    return out


def restrict(cluster: ClusterSnapshot, needs: PodNeeds, gpu_resource: str) -> ClusterSnapshot:
    """The cluster as one gang sees it: nodes its pods can never use are ineligible, busy ones marked ``short``.

    Args:
        cluster: a snapshot from :func:`railtrain.operator.scheduling.snapshot.snapshot`
            (its eligibility assumes only the accelerator toleration).
        needs: what each pod of the gang needs.
        gpu_resource: the accelerator resource name (its NoSchedule taint is tolerated).

    Returns:
        A snapshot with the same nodes: ``eligible``/``why_ineligible`` recomputed
        from the node's own state (cordoned, quarantined, NotReady) and why the gang's pods can never use
        it (node selector, required affinity, taints with the accelerator's NoSchedule taint tolerated as
        the rendered pods do, allocatable amounts); ``short`` from :func:`busy`. ``cluster`` itself when the
        gang needs nothing beyond GPUs and the accelerator toleration (what
        the snapshot already assumed).
    """
    implicit = _implicit(gpu_resource)
    if not (needs.node_selector or needs.terms or needs.requests) and all(t == implicit for t in needs.tolerations):
        return cluster  # what the snapshot assumed: eligibility is already the gang's
    tolerations = (implicit, *needs.tolerations)
    requests = sorted(needs.requests.items())
    changed = {}
    for name, node in cluster.nodes.items():
        why = node.blocked or _unfit(needs, node, tolerations, requests)
        short = "" if why else _busy(node, requests)
        if (not why, why, short) != (node.eligible, node.why_ineligible, node.short):
            changed[name] = _with(node, eligible=not why, why_ineligible=why, short=short)
    return ClusterSnapshot({**cluster.nodes, **changed}, cluster.levels) if changed else cluster
