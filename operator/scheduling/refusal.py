"""Why a gang cannot be placed now (pure): the :class:`Refusal` and the sentences that explain it.

A refusal names the numbers and what would help: how many nodes fit and why
the rest do not (:func:`shortfall`), what each domain of a required level
offers (:func:`domain_shortfall`), and who holds the capacity the gang waits
for (:func:`held_by`). A refusal that no wait can cure says
:data:`~railtrain.crds.contract.NEVER_FITS` and is marked permanent.
:func:`railtrain.operator.scheduling.placement.place_gang` returns these.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from railtrain.crds import contract, reasons
from railtrain.operator.scheduling import domains as dom
from railtrain.operator.scheduling.snapshot import ClusterSnapshot, NodeInfo, format_quantity
from railtrain.operator.scheduling.topology import level_name, nvlink_level

if TYPE_CHECKING:  # placement imports this module; the request is only read here
    from railtrain.operator.scheduling.placement import GangRequest


@dataclass(frozen=True)
class Refusal:
    """Why a gang cannot be placed now: ``reason`` is CamelCase, ``message`` a sentence.

    ``warning`` selects the Event type: a job waiting its turn is Normal.
    ``permanent`` says the gang can never be placed on this cluster as it is, even empty (too few nodes big
    enough, no domain of a required level big enough, a level or NVLink domain the operator does not know):
    only a change of the job or of the cluster helps, and the message says :data:`~railtrain.crds.contract.NEVER_FITS`
    and names the fix (``railtrain submit --wait`` stops on it, ``railtrain get`` shows it). Otherwise the
    gang waits for capacity others hold, and the message names them where it can (:func:`held_by`).
    """

    reason: str
    message: str
    warning: bool = True
    permanent: bool = False


def cands_busy(request: GangRequest, cluster: ClusterSnapshot) -> list[NodeInfo]:
    """Eligible nodes big enough for one pod of the gang that lack free GPUs now (what other jobs hold)."""
    need = request.gpus_per_node
    return [n for n in cluster.eligible() if n.gpus >= need and n.free_gpus < max(need, 1) and n.name not in request.fixed.values()]


def held_by(nodes: Sequence[NodeInfo], shown: int = 3) -> str:
    """``"; the capacity is held by team/a, team/b and 2 more"`` from the holders of ``nodes`` ("" when none is known)."""
    holders = sorted({h for n in nodes for h in n.holders})
    if not holders:
        return ""
    more = f" and {len(holders) - shown} more" if len(holders) > shown else ""
    return f"; the capacity is held by {', '.join(holders[:shown])}{more}"


def wanted(request: GangRequest) -> str:
    """What the gang asks for, as the head of a refusal: ``"gang needs 4 nodes with 8 free GPUs, 64 cpu each"``."""
    sizes = request.sizes
    count = f"{sizes[0]}..{sizes[-1]}" if len(sizes) > 1 else str(sizes[0])
    extra = "".join(f", {format_quantity(k, v)} {k}" for k, v in sorted(request.needs.requests.items()))
    return f"gang needs {count} nodes with {request.gpus_per_node} free GPUs{extra} each"


def shortfall(request: GangRequest, cluster: ClusterSnapshot, fit: int) -> Refusal:
    """The Unschedulable refusal: too few nodes fit cluster-wide; says which and why not."""
    need = request.gpus_per_node
    fixed = set(request.fixed.values())
    why = Counter(n.why_ineligible for n in cluster.nodes.values() if not n.eligible)
    small = [n for n in cluster.eligible() if n.gpus < need]
    room = [n for n in cluster.eligible() if n.gpus >= need and n.name not in fixed]
    busy = Counter(n.short for n in room if n.short and n.free_gpus >= need)
    full = [n for n in room if n.free_gpus <= 0 < need]
    partial = [n for n in room if 0 < n.free_gpus < need]
    spread = sum(n.free_gpus for n in partial)
    parts = []
    if full:
        parts.append(f"{len(full)} full")
    if partial:
        parts.append(f"{len(partial)} with fewer than {need} free GPUs ({spread} free across them)")
    if small:
        parts.append(f"{len(small)} with fewer than {need} GPUs allocatable")
    parts += [f"{count} {reason}" for reason, count in sorted(busy.items())]
    parts += [f"{count} {reason}" for reason, count in sorted(why.items())]
    text = f"{wanted(request)}; {fit + len(fixed)} of {len(cluster.nodes)} nodes fit now" + (f": {', '.join(parts)}" if parts else "")
    missing = request.sizes[0] - fit - len(fixed)
    if partial and spread >= missing * need:
        text += f"; the free GPUs add up to enough but are spread over nodes, and each pod needs {need} on one node"
    big_enough = sum(1 for n in cluster.eligible() if n.gpus >= need)
    if big_enough < request.sizes[0]:
        largest = max((n.gpus for n in cluster.eligible()), default=0)
        what = f"{need} GPUs" + "".join(f", {format_quantity(k, v)} {k}" for k, v in sorted(request.needs.requests.items()))
        text += (
            f". {contract.NEVER_FITS} as it is: only {big_enough} eligible nodes have {what} allocatable (largest GPU count: {largest}); "
            "ask for fewer nodes or less per pod, or add nodes"
        )
        return Refusal(reasons.UNSCHEDULABLE, text, permanent=True)
    text += ". It waits until enough nodes free up" + held_by(cands_busy(request, cluster))
    return Refusal(reasons.UNSCHEDULABLE, text)


def domain_shortfall(request: GangRequest, cluster: ClusterSnapshot, level: int, fit_total: int, cands: Sequence[NodeInfo]) -> Refusal:
    """The TopologyUnsatisfiable refusal of a required level: what each domain offers."""
    levels, need = cluster.levels, request.gpus_per_node
    name = level_name(levels[level])
    free = Counter(dom.node_path(n, level) for n in cands)  # by the whole path: what search() groups by
    ranked = sorted(free.items(), key=lambda kv: (-kv[1], kv[0]))
    offer = ", ".join(f"{k[-1].lstrip(chr(0))}: {v}" for k, v in ranked[:4]) or "none"
    size = Counter(dom.node_path(n, level) for n in cluster.eligible() if n.gpus >= need)
    most = max(size.values(), default=0)
    nvl = request.nvlink and levels[level] == nvlink_level(levels)
    text = (
        f"{wanted(request)} inside one {levels[level]} ({'spec.topology.nvlinkDomain' if nvl else 'policy required'}); the most any {name} offers now is "
        f"{max(free.values(), default=0)} ({offer}), {fit_total} nodes fit cluster-wide"
    )
    if most < request.sizes[0] - len(request.fixed):
        advice = "ask for fewer nodes" if nvl else "use policy preferred or ask for fewer nodes"
        unlabelled = sum(1 for n in cluster.eligible() if n.gpus >= need and n.domains[level] is None)
        if unlabelled:
            advice += f" or label the {unlabelled} eligible nodes that carry no {levels[level]} label (each is a {name} of its own)"
        text += f". {contract.NEVER_FITS}: the largest {name} has {most} eligible nodes with {need} GPUs allocatable; {advice}"
        return Refusal(reasons.TOPOLOGY_UNSATISFIABLE, text, permanent=True)
    text += f". It waits for a {name} to free up" + ("" if nvl else f"; policy preferred would let it span {name}s") + held_by(cands_busy(request, cluster))
    return Refusal(reasons.TOPOLOGY_UNSATISFIABLE, text)
