"""Choosing nodes inside the topology tree (pure): tightest domain first, best fit, compact fill.

The cluster is a tree: the root is the whole cluster, below it one domain per
value of the widest level, and so on down to single nodes. A domain is
identified by its *path*, the node's values of every level down to its own
(:func:`node_path`), so domains nest even when label values repeat.

:func:`search` is the algorithm of Kueue's topology-aware scheduling (KEP-2724,
"BestFit"), which railtrain follows:

1. find the narrowest level at which some single domain has enough candidate
   nodes (walking up from the deepest level; a *required* level caps the walk);
2. among those domains take the best fit, the one left with the fewest free
   GPUs afterwards, so that large holes stay for large gangs; if filling it
   fails, try the next one (it never fails on counts, but a caller's extra
   constraint might);
3. inside the chosen domain descend level by level: if one child fits the rest
   of the gang, take the best-fitting child; otherwise take the largest children
   whole and finish with the best-fitting child for the remainder, so the gang
   touches as few sub-domains as possible.

Nodes come back in depth-first order of the domains they sit in, so consecutive
ranks share the narrowest domain possible (same rack, then same block), which
keeps pipeline stages, assigned as contiguous rank ranges, on contiguous nodes.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from railtrain.operator.scheduling.snapshot import NodeInfo

Path = tuple[str, ...]
CLUSTER = -1
"""Depth of the root domain (the whole cluster)."""


UNKNOWN = "\0?"
"""The value of a wider level a node lacks while it carries a narrower one (:func:`node_path`)."""


def node_path(node: NodeInfo, depth: int | None = None) -> Path:
    """The node's domain path down to level index ``depth``: its value at every level, widest first.

    A node without the label of level ``depth`` itself is a domain of its own at that level (its value
    becomes ``"\\0<node name>"``), so it never groups with others there: a gang that must share a rack
    never counts unlabelled nodes as one rack. A node without the label of a *wider* level gets
    :data:`UNKNOWN` there, so nodes that share the narrower value group by it: the ``nvidia`` preset on
    nodes with the GPU operator's ``nvidia.com/gpu.clique`` but no Topograph labels (no core, spine or
    leaf) still finds two nodes of one clique together (issue 26, item 6: they were each a domain of
    their own at the core level, and so at every level under it, and a job that needed one clique waited
    forever). Grouping by the whole path still keeps apart two racks of the same name in two known blocks.

    Args:
        node: a node of a snapshot; ``node.domains`` follows the snapshot's levels.
        depth: cut the path after this level index (``CLUSTER`` gives ``()``; None: the deepest level).
    """
    last = len(node.domains) - 1 if depth is None else depth
    return tuple(
        v if v is not None else (f"\0{node.name}" if i == last else UNKNOWN)
        for i, v in enumerate(node.domains[: last + 1])
    )


@dataclass(frozen=True)
class Choice:
    """Nodes chosen for a gang.

    Attributes:
        nodes: the chosen nodes in rank order (depth-first over domains).
        depth: index of the narrowest level whose one domain holds every node
            of the gang (fixed ones included); ``CLUSTER`` when none does.
        domain: the path of that domain (``()`` for the cluster).
        candidates: how many domains of that level could hold the gang.
        largest: per level index, the most candidate nodes any single domain
            (containing the fixed nodes) offered; used to explain spans.
    """

    nodes: tuple[NodeInfo, ...]
    depth: int
    domain: Path
    candidates: int
    largest: dict[int, int]


def _groups(nodes: Iterable[NodeInfo], depth: int) -> dict[Path, list[NodeInfo]]:
    out: dict[Path, list[NodeInfo]] = {}
    for n in nodes:
        out.setdefault(node_path(n, depth), []).append(n)
    return out


def _leftover(nodes: Sequence[NodeInfo], k: int, need: int) -> tuple[int, int]:
    """Best-fit key of a domain taking ``k`` nodes: free GPUs left, then candidate nodes left."""
    return (sum(n.free_gpus for n in nodes) - k * need, len(nodes) - k)


def fill(nodes: Sequence[NodeInfo], k: int, depth: int, levels: int, need: int) -> list[NodeInfo]:
    """Pick ``k`` of ``nodes`` (all inside one domain at ``depth``) touching as few sub-domains as possible.

    Args:
        nodes: candidate nodes of one domain at level index ``depth``.
        k: how many to pick, ``0 <= k <= len(nodes)``.
        depth: level index of the domain (``CLUSTER`` for the root).
        levels: number of topology levels.
        need: GPUs per pod (for best fit).

    Returns:
        ``k`` nodes in depth-first order of their sub-domains (then by name).
    """
    if k <= 0:
        return []
    if depth + 1 >= levels:
        best = sorted(nodes, key=lambda n: (n.free_gpus - need, n.name))[:k]
        return sorted(best, key=lambda n: n.name)
    children = _groups(nodes, depth + 1)
    fitting = [key for key, members in children.items() if len(members) >= k]
    if fitting:
        key = min(fitting, key=lambda c: (_leftover(children[c], k, need), c))
        return fill(children[key], k, depth + 1, levels, need)
    order = sorted(children, key=lambda c: (-len(children[c]), _leftover(children[c], len(children[c]), need), c))
    picks: list[tuple[Path, int]] = []
    remaining, i = k, 0
    while remaining > 0:
        rest = [c for c in order[i:] if len(children[c]) >= remaining]
        if rest:
            key = min(rest, key=lambda c: (_leftover(children[c], remaining, need), c))
            picks.append((key, remaining))
            break
        picks.append((order[i], len(children[order[i]])))
        remaining -= len(children[order[i]])
        i += 1
    out: list[NodeInfo] = []
    for key, count in sorted(picks):
        out.extend(fill(children[key], count, depth + 1, levels, need))
    return out


def common_depth(nodes: Sequence[NodeInfo]) -> tuple[int, Path]:
    """The deepest level index at which all ``nodes`` share one domain (:func:`node_path` at that level), and that domain's path."""
    if not nodes:
        return CLUSTER, ()
    for d in range(len(nodes[0].domains) - 1, -1, -1):
        paths = {node_path(n, d) for n in nodes}
        if len(paths) == 1:
            return d, next(iter(paths))
    return CLUSTER, ()


def search(
    candidates: Sequence[NodeInfo],
    k: int,
    levels: int,
    need: int,
    fixed: Sequence[NodeInfo] = (),
    floor: int = CLUSTER,
) -> Choice | None:
    """Choose ``k`` new nodes so the gang (with ``fixed``) sits in the narrowest domain possible.

    Args:
        candidates: nodes that fit one pod of the gang and are not in ``fixed``.
        k: new nodes wanted, ``>= 0``.
        levels: number of topology levels.
        need: GPUs per pod.
        fixed: nodes the gang already holds; the chosen domain must contain them.
        floor: widest level index allowed (a *required* level); ``CLUSTER`` allows any.

    Returns:
        A :class:`Choice`, or None when no domain at ``floor`` or narrower holds
        ``k`` candidates together with the fixed nodes.
    """
    largest: dict[int, int] = {}
    for depth in range(levels - 1, floor - 1, -1):
        must = {node_path(f, depth) for f in fixed}
        if len(must) > 1:
            continue  # the fixed nodes already span domains of this level
        groups = _groups(candidates, depth)
        if must:
            (only,) = must
            groups = {only: groups.get(only, [])}
        largest[depth] = max((len(g) for g in groups.values()), default=0)
        feasible = sorted((key for key, g in groups.items() if len(g) >= k), key=lambda c: (_leftover(groups[c], k, need), c))
        for key in feasible:
            chosen = fill(groups[key], k, depth, levels, need)
            if len(chosen) == k:
                d, domain = common_depth([*fixed, *chosen])
                return Choice(tuple(chosen), d, domain, len(feasible), largest)
    return None
