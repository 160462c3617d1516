"""All-or-nothing gang placement (pure): a node for every rank, or a reason why not.

A gang is placed only when every rank gets a distinct eligible node with
enough free accelerators; otherwise nothing is promised and the result says
why in words a person can act on. This is the gang-scheduling rule of
Kubernetes batch schedulers (the PodGroup ``minMember`` of the
scheduler-plugins coscheduling plugin and Volcano): partial placement of a
distributed job only holds GPUs idle while the job cannot start.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from railtrain.operator.cluster import ClusterSnapshot


@dataclass(frozen=True)
class GangRequest:
    """What one gang needs.

    Attributes:
        job: ``namespace/name`` of the job (for messages).
        nodes: number of ranks, one pod per distinct node.
        gpus_per_node: accelerators each pod requests (0 allowed).
        fixed: ranks already pinned to nodes (kept as they are).
    """

    job: str
    nodes: int
    gpus_per_node: int
    fixed: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """A node per rank. ``nodes[r]`` is the node of rank ``r``."""

    nodes: tuple[str, ...]
    reason: str = "GangPlaced"

    def message(self) -> str:
        """One line for Events and conditions."""
        return f"placed {len(self.nodes)} ranks on nodes " + ", ".join(self.nodes)


@dataclass(frozen=True)
class Refusal:
    """Why a gang cannot be placed now: ``reason`` is CamelCase, ``message`` a sentence."""

    reason: str
    message: str


def place_gang(request: GangRequest, cluster: ClusterSnapshot) -> Placement | Refusal:
    """Choose a distinct node for every rank, all or nothing.

    Args:
        request: the gang's needs; ranks in ``request.fixed`` keep their node.
        cluster: nodes with free capacity already net of every bound or pinned
            pod (including this gang's own pinned pods).

    Returns:
        :class:`Placement` with one node per rank in rank order, or
        :class:`Refusal` with reason ``Unschedulable`` and a message counting
        the nodes that fit against those needed.
    """
    need = request.gpus_per_node
    taken = set(request.fixed.values())
    candidates = [n for n in cluster.eligible() if n.free_gpus >= need and n.name not in taken]
    missing = [r for r in range(request.nodes) if r not in request.fixed]
    if len(candidates) < len(missing):
        why = Counter(n.why_ineligible for n in cluster.nodes.values() if not n.eligible)
        excluded = "".join(f", {count} {reason}" for reason, count in sorted(why.items()))
        return Refusal(
            "Unschedulable",
            f"gang needs {request.nodes} nodes with {need} free GPUs each; "
            f"{len(candidates) + len(taken)} of {len(cluster.nodes)} nodes fit now{excluded}",
        )
    # Best fit: prefer nodes left with the least free capacity, so whole nodes
    # stay free for larger gangs.
    candidates.sort(key=lambda n: (n.free_gpus - need, n.name))
    chosen = iter(candidates)
    nodes = tuple(request.fixed[r] if r in request.fixed else next(chosen).name for r in range(request.nodes))
    return Placement(nodes)
