"""An immutable snapshot of the cluster's nodes and free accelerators (pure).

Built from plain Node and Pod dicts as the API server returns them (camelCase
JSON). Capacity is accounted the way kube-scheduler's NodeResourcesFit plugin
does: a node's free amount is its ``status.allocatable`` minus the requests of
every non-terminal pod bound to it. railtrain also subtracts pods that are
pinned to a node by ``nodeSelector`` but not yet bound (gated or waiting for the
scheduler): those are capacity promised to a gang, and counting them is what
keeps two gangs from being admitted onto the same GPUs.

Each node also carries its position in the network, read from the topology
levels the operator is configured with (:mod:`railtrain.operator.scheduling.topology`),
and its number of rails: the NICs of a rail-optimized fabric, NIC ``i`` on the
leaf switch of rail ``i`` (label :data:`RAILS_LABEL`, defaulting to the node's
GPU count, one NIC per GPU as on DGX/HGX systems).

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from railtrain.crds.contract import LABEL_JOB_NAME as JOB_LABEL
from railtrain.crds.labels import HOSTNAME
from railtrain.crds.quantity import parse_quantity  # noqa: F401  (re-exported: the one quantity parser)
from railtrain.operator.scheduling import quarantine
from railtrain.operator.scheduling.topology import DEFAULT_LEVELS, level_value

QUARANTINE_LABEL = quarantine.LABEL_KEY
"""Nodes carrying this label (any value but "false") are never chosen."""
QUARANTINE_TAINT = quarantine.TAINT_KEY
"""Nodes carrying this taint (set by the operator on a verdict, :mod:`railtrain.operator.scheduling.quarantine`) are never chosen.
Both are read by the one test :func:`railtrain.operator.scheduling.quarantine.quarantined_by`."""
RAILS_LABEL = "railtrain.dev/rails"
"""Node label: rails (NICs on distinct rail leaf switches) of the node; default: its GPU count."""

_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeInfo:
    """One node as placement sees it.

    Attributes:
        name: node name (equals its ``kubernetes.io/hostname`` label on kubelet-managed nodes).
        labels: all node labels (topology levels are read from here).
        gpus: allocatable accelerators of the requested resource.
        free_gpus: ``gpus`` minus the requests of bound or pinned, non-terminal pods.
        eligible: False when the node is cordoned, NotReady, quarantined or carries
            a NoSchedule/NoExecute taint.
        why_ineligible: a short reason when not eligible.
        domains: the node's value at each topology level of the snapshot
            (same order as :attr:`ClusterSnapshot.levels`), None where the node
            lacks the label.
        rails: rails of the node (label :data:`RAILS_LABEL`, else ``gpus``).
        taints: the node's NoSchedule/NoExecute taints (a gang's tolerations are
            matched against them by :func:`railtrain.operator.scheduling.nodefit.restrict`).
        allocatable: every resource's allocatable amount (cores, bytes, counts).
        free: ``allocatable`` minus the requests of bound or pinned, non-terminal pods.
        blocked: why no pod may land here whatever it tolerates (cordoned,
            quarantined, NotReady), "" otherwise.
        short: set by :func:`~railtrain.operator.scheduling.nodefit.restrict`: which of a
            gang's requests the node lacks free right now ("" when they fit).
        holders: who holds the node's GPUs now, sorted: ``namespace/job`` of each TrainingJob with a
            bound or pinned pod there, or with GPUs promised or held there in an admission pass
            (:meth:`ClusterSnapshot.reserve`), ``pod namespace/name`` of any other pod requesting GPUs.
    """

    name: str
    labels: Mapping[str, str]
    gpus: int
    free_gpus: int
    eligible: bool = True
    why_ineligible: str = ""
    domains: tuple[str | None, ...] = ()
    rails: int = 0
    taints: tuple[Mapping[str, Any], ...] = ()
    allocatable: Mapping[str, float] = field(default_factory=dict)
    free: Mapping[str, float] = field(default_factory=dict)
    blocked: str = ""
    short: str = ""
    holders: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterSnapshot:
    """All nodes at one moment, keyed by name; build it with :func:`snapshot`.

    Attributes:
        nodes: node name → :class:`NodeInfo`.
        levels: topology levels, widest first, that ``NodeInfo.domains`` follows.
    """

    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    levels: tuple[str, ...] = DEFAULT_LEVELS

    def eligible(self) -> list[NodeInfo]:
        """Eligible nodes, sorted by name for determinism."""
        return sorted((n for n in self.nodes.values() if n.eligible), key=lambda n: n.name)

    def excluding(self, names: Iterable[str], why: str) -> "ClusterSnapshot":
        """A copy in which the eligible nodes among ``names`` are ineligible for reason ``why`` (unknown names are ignored).

        The reason is also the node's ``blocked`` reason, so a gang's own view
        (:func:`railtrain.operator.scheduling.nodefit.restrict`) keeps it out whatever the gang tolerates.
        """
        hit = {n: replace(self.nodes[n], eligible=False, why_ineligible=why, blocked=why) for n in names if n in self.nodes and self.nodes[n].eligible}
        return ClusterSnapshot({**self.nodes, **hit}, self.levels) if hit else self

    def reserve(self, nodes: Iterable[str], gpus_per_node: int, requests: Mapping[str, float] | None = None, holder: str = "") -> "ClusterSnapshot":
        """A copy with ``gpus_per_node`` fewer free GPUs, and ``requests`` less of each other resource, on each of ``nodes`` (may go below 0).

        Used by the admission pass to hand capacity promised to one job to no
        other job of the same pass. ``holder`` (``namespace/job``, as
        :func:`snapshot` names a job's pods) joins each node's ``holders`` when
        GPUs are taken, so capacity promised in the pass or held for a restart
        is named exactly as the same capacity is once the job's pods exist, and
        a waiting refusal's message does not change when they are created.
        Unknown node names are ignored.
        """
        taken = {name: self.nodes[name] for name in nodes if name in self.nodes}
        extra = dict(requests or {})
        updated = {
            name: replace(
                n,
                free_gpus=n.free_gpus - gpus_per_node,
                free={**n.free, **{k: n.free.get(k, 0.0) - v for k, v in extra.items()}},
                holders=_named(n.holders, holder, gpus_per_node),
            )
            for name, n in taken.items()
        }
        return ClusterSnapshot({**self.nodes, **updated}, self.levels)

    def release(self, nodes: Iterable[str], gpus_per_node: int, requests: Mapping[str, float] | None = None, holder: str = "") -> "ClusterSnapshot":
        """The inverse of :meth:`reserve`: a copy with ``gpus_per_node`` and ``requests`` given back on each of ``nodes``.

        :meth:`reserve` does not clamp at zero (an over-committed node goes
        negative), so a hold released here never shows more free than there is.
        Used by the admission pass to give a restarting gang back the nodes it
        holds (``status.hold``) in its own view; ``holder`` leaves those nodes'
        ``holders`` (a job never waits for itself). Unknown node names are ignored.
        """
        return self.reserve(nodes, -gpus_per_node, {k: -v for k, v in (requests or {}).items()}, holder)


def _named(holders: tuple[str, ...], holder: str, gpus: int) -> tuple[str, ...]:
    """``holders`` with ``holder`` added (``gpus`` > 0) or removed (``gpus`` < 0), sorted and without repeats."""
    if not holder or not gpus:
        return holders
    return tuple(sorted(set(holders) | {holder})) if gpus > 0 else tuple(h for h in holders if h != holder)


def _node_ineligibility(node: Mapping[str, Any], tolerated: str = "") -> str:
    """Why no gang pod may land on ``node`` ("" when it may).

    ``tolerated`` is the GPU resource name: railtrain's pods tolerate a
    NoSchedule taint of that key, as the ExtendedResourceToleration admission
    plugin does for pods requesting an extended resource (GKE and AKS taint
    GPU nodes ``nvidia.com/gpu=present:NoSchedule``); see
    :func:`railtrain.operator.job.render.gang_tolerations`.
    """
    spec = node.get("spec", {}) or {}
    if spec.get("unschedulable"):
        return "cordoned"
    why = quarantine.quarantined_by(node)
    if why == "label":
        return "quarantined"
    if why is not None:
        return f"quarantined ({'by an administrator' if why == 'administrator' else why})"
    for taint in spec.get("taints", []) or []:
        if taint.get("effect") == "NoSchedule" and tolerated and taint.get("key") == tolerated:
            continue
        if taint.get("effect") in ("NoSchedule", "NoExecute"):
            return untolerated(taint)
    conditions = (node.get("status", {}) or {}).get("conditions", []) or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if not ready or ready.get("status") != "True":
        return "NotReady"
    return ""


def untolerated(taint: Mapping[str, Any]) -> str:
    """The ineligibility reason of a node whose ``taint`` a gang does not tolerate."""
    return f"with the untolerated taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod holds capacity on: ``spec.nodeName`` if bound, else its pinned hostname, else None."""
    spec = pod.get("spec", {}) or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)


def _container_requests(container: Mapping[str, Any]) -> dict[str, float]:
    res = container.get("resources", {}) or {}
    # A limit without a request defaults the request to the limit (core/v1 defaulting).
    amounts = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: parse_quantity(v) for k, v in amounts.items()}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """A pod's effective request of every resource, as kube-scheduler computes it.

    The larger of (the sum over containers plus restartable "sidecar" init
    containers) and (each regular init container plus the sidecars started
    before it); ``spec.overhead`` is added. Requests fall back to limits.
    """
    spec = pod.get("spec", {}) or {}
    total: dict[str, float] = {}
    for c in spec.get("containers", []) or []:
        for k, v in _container_requests(c).items():
            total[k] = total.get(k, 0.0) + v
    sidecars: dict[str, float] = {}
    peak: dict[str, float] = {}
    for c in spec.get("initContainers", []) or []:
        amounts = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in amounts.items():
                sidecars[k] = sidecars.get(k, 0.0) + v
                total[k] = total.get(k, 0.0) + v
        else:
            for k, v in amounts.items():
                peak[k] = max(peak.get(k, 0.0), v + sidecars.get(k, 0.0))
    out = {k: max(total.get(k, 0.0), peak.get(k, 0.0)) for k in {*total, *peak}}
    for k, v in (spec.get("overhead") or {}).items():
        out[k] = out.get(k, 0.0) + parse_quantity(v)
    return out


def format_quantity(resource: str, amount: float) -> str:
    """``amount`` of ``resource`` for a message: binary units for memory and storage, plain numbers else."""
    if resource == "memory" or resource.endswith("storage") or resource.startswith("hugepages-"):
        for suffix, mult in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= mult:
                return f"{amount / mult:g}{suffix}"
    return f"{amount:g}"


def _rails(labels: Mapping[str, str], gpus: int) -> int:
    try:
        rails = int(labels.get(RAILS_LABEL, ""))
    except ValueError:
        return gpus
    return rails if rails > 0 else gpus


def _holder(pod: Mapping[str, Any]) -> str:
    """Who a pod holds capacity for: ``namespace/job`` for a TrainingJob's rank, else ``pod namespace/name``."""
    meta = pod.get("metadata", {}) or {}
    job = (meta.get("labels") or {}).get(JOB_LABEL)
    return f"{meta.get('namespace', '')}/{job}" if job else f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"


def snapshot(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    gpu_resource: str = "nvidia.com/gpu",
    levels: tuple[str, ...] = DEFAULT_LEVELS,
) -> ClusterSnapshot:
    """Build a :class:`ClusterSnapshot` from API objects.

    Args:
        nodes: v1 Node dicts.
        pods: v1 Pod dicts from every namespace (railtrain's and others').
        gpu_resource: extended resource name to account.
        levels: topology levels (node label keys), widest first.

    Returns:
        The snapshot. Pods in phase Succeeded/Failed hold nothing; a pod being
        deleted still holds its GPUs until its phase says it is terminal.
    """
    used: dict[str, dict[str, float]] = {}
    holders: dict[str, set[str]] = {}
    for pod in pods:
        if (pod.get("status", {}) or {}).get("phase") in _TERMINAL:
            continue
        node = pod_node(pod)
        if node:
            held = used.setdefault(node, {})
            requests = pod_requests(pod)
            for k, v in requests.items():
                held[k] = held.get(k, 0.0) + v
            if requests.get(gpu_resource):
                holders.setdefault(node, set()).add(_holder(pod))
    out = {}
    for node in nodes:
        meta = node.get("metadata", {}) or {}
        name = meta["name"]
        alloc = {k: parse_quantity(v) for k, v in ((node.get("status", {}) or {}).get("allocatable", {}) or {}).items()}
        gpus = int(alloc.get(gpu_resource, 0))
        held = used.get(name, {})
        why = _node_ineligibility(node, gpu_resource)
        spec = node.get("spec", {}) or {}
        taints = tuple(t for t in spec.get("taints", []) or [] if t.get("effect") in ("NoSchedule", "NoExecute"))
        labels = dict(meta.get("labels", {}) or {})
        out[name] = NodeInfo(
            name=name,
            labels=labels,
            gpus=gpus,
            free_gpus=max(0, gpus - int(held.get(gpu_resource, 0))),
            eligible=not why,
            why_ineligible=why,
            domains=tuple(level_value(labels, level) for level in levels),
            rails=_rails(labels, gpus),
            taints=taints,
            allocatable=alloc,
            free={k: v - held.get(k, 0.0) for k, v in alloc.items()},
            # Taints are matched per gang (nodefit.restrict); the quarantine taint blocks every gang.
            blocked=_node_ineligibility({**node, "spec": {**spec, "taints": [t for t in spec.get("taints", []) or [] if t.get("key") == QUARANTINE_TAINT]}}),
            holders=tuple(sorted(holders.get(name, ()))),
        )
    return ClusterSnapshot(out, tuple(levels))
