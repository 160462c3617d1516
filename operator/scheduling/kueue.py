"""Placing a gang inside Kueue's admission (pure): its topology assignment decoded, the gang placed rail-aware within it.

Kueue admits a Workload with, per pod set, the flavors of its resources and,
with Topology Aware Scheduling (TAS), a ``topologyAssignment``: the domains
(node-label values at each of the assignment's levels, widest first) and how
many pods go to each. In ``kueue.x-k8s.io/v1beta2`` it is compressed into
slices (``apis/kueue/v1beta2/workload_types.go``, ``TopologyAssignment``):
each slice covers ``domainCount`` domains; each level's values are either one
``universal`` value for the whole slice or ``individual`` ``roots`` with an
optional common ``prefix`` and ``suffix``; pod counts are one ``universal``
number or ``individual`` per domain. :func:`expand` undoes that.

Kueue's own TAS ungater then hands hosts to pods in the order of a pod index
label and knows nothing of rails. railtrain instead keeps Kueue's choice of
nodes and orders ranks inside it as its own placement does
(:func:`railtrain.operator.scheduling.placement.place_gang`: single rail
layouts first, data-parallel peers on one leaf): :func:`inside` narrows the
snapshot to the assigned nodes, :func:`place_in_assignment` places the gang there.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from railtrain.crds import reasons
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.queue import AVOIDED
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.snapshot import ClusterSnapshot

OUTSIDE = "outside the nodes Kueue assigned to this job's Workload"
"""Why a node is ineligible in a gang's view narrowed to its Kueue assignment."""


def _values(level: Mapping[str, Any], count: int, where: str) -> list[str]:
    """The ``count`` values of one level of one slice (``universal`` or ``individual`` prefix + root + suffix)."""
    if level.get("universal") is not None:
        return [str(level["universal"])] * count
    each = level.get("individual") or {}
    roots = list(each.get("roots") or [])
    if len(roots) != count:
        raise ValueError(f"{where}.individual.roots has {len(roots)} values; domainCount is {count}")
    prefix, suffix = each.get("prefix") or "", each.get("suffix") or ""
    return [f"{prefix}{root}{suffix}" for root in roots]


def expand(assignment: Mapping[str, Any] | None) -> tuple[tuple[str, ...], list[tuple[tuple[str, ...], int]]]:
    """Decode a v1beta2 ``topologyAssignment`` (pure).

    Args:
        assignment: ``status.admission.podSetAssignments[i].topologyAssignment`` as read (None: no TAS).

    Returns:
        ``(levels, domains)``: the node-label keys, widest first, and per domain, in Kueue's order,
        ``(value at each level, pods)``. ``((), [])`` for None.

    Raises:
        ValueError: a slice that does not agree with itself (value or count lists of the wrong length), named.
    """
    if not assignment:
        return (), []
    levels = tuple(str(level) for level in assignment.get("levels") or [])
    domains: list[tuple[tuple[str, ...], int]] = []
    for i, piece in enumerate(assignment.get("slices") or []):
        count = int(piece.get("domainCount") or 0)
        per_level = piece.get("valuesPerLevel") or []
        if len(per_level) != len(levels):
            raise ValueError(f"topologyAssignment.slices[{i}].valuesPerLevel has {len(per_level)} entries for {len(levels)} levels")
        columns = [_values(level, count, f"topologyAssignment.slices[{i}].valuesPerLevel[{j}]") for j, level in enumerate(per_level)]
        pods = piece.get("podCounts") or {}
        if pods.get("universal") is not None:
            counts = [int(pods["universal"])] * count
        else:
            counts = [int(c) for c in pods.get("individual") or []]
            if len(counts) != count:
                raise ValueError(f"topologyAssignment.slices[{i}].podCounts.individual has {len(counts)} values; domainCount is {count}")
        domains.extend((tuple(col[d] for col in columns), counts[d]) for d in range(count))
    return levels, domains


def assigned_nodes(cluster: ClusterSnapshot, levels: Sequence[str], domains: Sequence[tuple[tuple[str, ...], int]]) -> dict[str, int]:
    """The nodes of ``cluster`` inside Kueue's assigned domains, each with the pods its domain was given (pure).

    A node is inside a domain when its label at every level equals the domain's value; with
    ``kubernetes.io/hostname`` as the lowest level each domain is one node.

    Returns:
        node name → pods of its domain (a domain wider than a node gives each of its nodes the domain's count).
    """
    out: dict[str, int] = {}
    for values, pods in domains:
        for node in cluster.nodes.values():
            if all(node.labels.get(level) == value for level, value in zip(levels, values)):
                out[node.name] = out.get(node.name, 0) + pods
    return out


def inside(cluster: ClusterSnapshot, nodes: Mapping[str, int] | None, node_labels: Mapping[str, str]) -> ClusterSnapshot:
    """``cluster`` with every node outside the admission ineligible (pure).

    Args:
        nodes: the assigned nodes (:func:`assigned_nodes`), or None when the flavor has no topology (any node of the flavor).
        node_labels: the admitted flavors' ``spec.nodeLabels`` together: a node lacking one is outside.
    """
    outside = [
        n.name for n in cluster.nodes.values()
        if (nodes is not None and n.name not in nodes) or any(n.labels.get(k) != v for k, v in node_labels.items())
    ]
    return cluster.excluding(outside, OUTSIDE)


def place_in_assignment(request: GangRequest, cluster: ClusterSnapshot, nodes: Mapping[str, int] | None,
                        node_labels: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]] = ()) -> Placement | Refusal:
    """Place ``request`` on the nodes Kueue admitted it to, ranks in railtrain's rail-aware order (pure).

    Args:
        request: the gang (one rank per node, as railtrain always runs it).
        cluster: the snapshot net of every bound or pinned pod and every promise.
        nodes: :func:`assigned_nodes` of the admission (None: no topology assignment).
        node_labels, tolerations: the admitted flavors' node labels and tolerations (the pods get both).

    Returns:
        A :class:`~railtrain.operator.scheduling.placement.Placement` inside the assignment, or a
        :class:`~railtrain.operator.scheduling.refusal.Refusal` with reason
        :data:`~railtrain.crds.reasons.OUTSIDE_KUEUE_ASSIGNMENT` saying why: Kueue put more than one pod
        on a node (railtrain runs one rank per node), or the assigned nodes cannot hold the gang now (one of them
        busy, or avoided by the job: ``request.avoid``, which its next Workload asks Kueue to leave out,
        :func:`railtrain.operator.job.workload.avoiding`).
    """
    crowded = sorted(name for name, pods in (nodes or {}).items() if pods > 1)
    if crowded:
        return Refusal(reasons.OUTSIDE_KUEUE_ASSIGNMENT, (
            f"Kueue's topology assignment puts more than one pod on node {crowded[0]}"
            + (f" (and {len(crowded) - 1} more)" if len(crowded) > 1 else "")
            + "; railtrain runs one rank per node: request a whole node's GPUs per rank, or use a ResourceFlavor whose nodes fit one rank each"
        ))
    needs = replace(request.needs, tolerations=tuple(request.needs.tolerations) + tuple(tolerations))
    narrowed = replace(request, needs=needs)  # the same topology request Kueue admitted it with (operator/job/workload.py)
    result = place_gang(narrowed, inside(cluster, nodes, node_labels).excluding(request.avoid, AVOIDED))
    if isinstance(result, Refusal):
        return Refusal(reasons.OUTSIDE_KUEUE_ASSIGNMENT, f"Kueue admitted the Workload, but its nodes cannot hold the gang now: {result.message}", warning=result.warning)
    return result
