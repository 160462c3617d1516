"""All-or-nothing, topology-aware gang placement (pure): a node for every rank, or a reason why not.

A gang is placed only when every rank gets a distinct eligible node with
enough free accelerators; otherwise nothing is promised and the result says
why in words a person can act on. This is the gang-scheduling rule of
Kubernetes batch schedulers (the PodGroup ``minMember`` of the
scheduler-plugins coscheduling plugin and Volcano): partial placement of a
distributed job only holds GPUs idle while the job cannot start.

Where the gang lands follows ``spec.topology`` (policies ``required``,
``preferred`` and ``none``, searched by :func:`railtrain.operator.scheduling.domains.search`)
and the rails of a rail-optimized fabric: NIC ``i`` of every node sits on the
leaf switch of rail ``i``, and local rank ``i`` drives GPU ``i`` and NIC ``i``.
Data-parallel peers (the same local rank on different nodes when the mesh is
ordered pipeline, data, fsdp, context, tensor, outermost first, as torchtitan does) then
talk over one leaf switch, provided every node of the gang has the same rails
and at least ``procsPerNode`` of them. Placement therefore tries each single
rail layout before mixing layouts, and reports whether the gang is aligned.

``place_gang`` is a pure function of a :class:`GangRequest` and a
:class:`~railtrain.operator.scheduling.snapshot.ClusterSnapshot`, so simulators and
benchmarks call it on synthetic snapshots (see ``docs/scheduling.md``).

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from railtrain.crds import contract, reasons
from railtrain.crds.reasons import PINNED_NODE_UNAVAILABLE
from railtrain.crds.fabric import FabricProfile, node_value_problems, rank_annotations
from railtrain.operator.scheduling import domains as dom
from railtrain.operator.scheduling.snapshot import ClusterSnapshot, NodeInfo
from railtrain.operator.scheduling.nodefit import PodNeeds, restrict
from railtrain.operator.scheduling.refusal import Refusal, domain_shortfall, shortfall
from railtrain.operator.scheduling.topology import NVLINK_DOMAIN_KEYS, level_name, nvlink_level




@dataclass(frozen=True)
class GangRequest:
    """What one gang needs.

    Attributes:
        job: ``namespace/name`` of the job (for messages and ordering).
        nodes: number of ranks (the maximum for an elastic job), one pod per distinct node.
        gpus_per_node: accelerators each pod requests (0 allowed).
        fixed: ranks already pinned to nodes (kept as they are).
        counts: admissible gang sizes, ascending (``spec.node_counts()``); empty means ``(nodes,)``.
        procs_per_node: processes per pod (local ranks; one per GPU and rail).
        dp_stride: fsdp × context × tensor, the rank distance between data-parallel peers (:func:`railtrain.crds.parallel.dp_stride`).
        policy: ``"none"``, ``"preferred"`` or ``"required"`` (``spec.topology.policy``).
        level: ``spec.topology.level`` or None.
        priority: ``spec.priority`` (higher first).
        created: ``metadata.creationTimestamp`` (RFC 3339; earlier first).
        gpu_resource: extended resource name the GPUs are requested as.
        needs: what each pod needs besides GPUs (other resources, node
            selector, required node affinity, tolerations; ``spec.template``).
        avoid: nodes this job must not use (``status.avoidNodes``: named by one of its verdicts).
        nvlink: the whole gang must sit inside one domain of the NVLink-domain level
            (``spec.topology.nvlinkDomain``, :func:`railtrain.operator.scheduling.topology.nvlink_level`).
        prefer: a restarting gang's previous nodes in placement order ("" where none;
            ``status.hold``): :func:`place_gang` gives each position its old node back where it
            still fits, so (after the same rank rotation) each rank finds the node-local
            checkpoints it wrote.
        groups: replica groups (``spec.faultTolerance.replicaGroups``; 1 without): the gang is ``groups``
            consecutive blocks of ``nodes / groups`` ranks, each a torchrun world of its own, and
            :func:`place_gang` places each block in its own tightest domain (the topology request, NVLink
            domain included, applies to each group; groups need not share a domain).
    """

    job: str
    nodes: int
    gpus_per_node: int
    fixed: Mapping[int, str] = field(default_factory=dict)
    counts: tuple[int, ...] = ()
    procs_per_node: int = 1
    dp_stride: int = 1
    policy: str = "preferred"
    level: str | None = None
    priority: int = 0
    created: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    needs: PodNeeds = field(default_factory=PodNeeds)
    avoid: frozenset[str] = frozenset()
    nvlink: bool = False
    prefer: tuple[str, ...] = ()
    groups: int = 1

    @property
    def sizes(self) -> tuple[int, ...]:
        """Admissible gang sizes, ascending."""
        return self.counts or (self.nodes,)


@dataclass(frozen=True)
class Placement:
    """A node per rank. ``nodes[r]`` is the node of rank ``r``.

    Attributes:
        nodes: node names in rank order (``len(nodes)`` is the admitted gang size).
        reason: CamelCase reason for the Scheduled condition.
        domains: per rank, level label key → the node's value (levels it lacks are absent).
        summary: the ``status.topology`` object (camelCase keys), without the reason.
        explanation: why this placement, one or two sentences.
        annotations: per rank, pod annotations to set in the patch that releases
            it (the node's uid and the fabric's per-node values, :func:`with_node_values`);
            filled by the admission pass, which has the nodes; empty means none.
        warnings: sentences for Warning Events about the chosen nodes (a per-node fabric
            annotation that cannot be used, :func:`railtrain.crds.fabric.node_value_problems`).
    """

    nodes: tuple[str, ...]
    reason: str = reasons.GANG_PLACED
    domains: tuple[Mapping[str, str], ...] = ()
    summary: Mapping[str, object] = field(default_factory=dict)
    explanation: str = ""
    annotations: tuple[Mapping[str, str], ...] = ()
    warnings: tuple[str, ...] = ()

    def message(self) -> str:
        """One line for Events and conditions."""
        shown = ", ".join(self.nodes[:8]) + (f" and {len(self.nodes) - 8} more" if len(self.nodes) > 8 else "")
        head = f"placed {_plural(len(self.nodes), 'rank')} on {'node' if len(self.nodes) == 1 else 'nodes'} {shown}"
        return f"{head}: {self.explanation}" if self.explanation else head


def node_annotations(fabric: FabricProfile | None, node: Mapping[str, Any] | None) -> dict[str, str]:
    """The pod annotations of a rank placed on ``node`` that come from the node itself (pure).

    :data:`~railtrain.crds.contract.ANNOTATION_NODE_UID` (the Node's uid, so a Node re-created under the same
    name is told from the one the rank was placed on) and the fabric's per-node values
    (:func:`railtrain.crds.fabric.rank_annotations`). Empty for an unknown node.
    """
    if not node:
        return {}
    uid = (node.get("metadata") or {}).get("uid")
    return {**({contract.ANNOTATION_NODE_UID: uid} if uid else {}), **rank_annotations(fabric, node)}


def with_node_values(result: "Placement | Refusal", fabric: FabricProfile | None, nodes: Mapping[str, Mapping[str, Any]]) -> "Placement | Refusal":
    """``result`` with, per rank, the annotations its node gives (:func:`node_annotations`) and the warnings about those nodes (pure).

    Args:
        result: the admission pass's answer; a refusal is returned unchanged.
        fabric: the operator's fabric profile (None: no per-node values, the node uid still).
        nodes: node name → v1 Node as read by the pass.

    Returns:
        The placement with :attr:`Placement.annotations` and :attr:`Placement.warnings` filled.
    """
    if not isinstance(result, Placement):
        return result
    warnings = tuple(dict.fromkeys(w for n in result.nodes for w in node_value_problems(fabric, nodes.get(n))))
    return replace(result, annotations=tuple(node_annotations(fabric, nodes.get(n)) for n in result.nodes), warnings=warnings)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def rail_alignment(request: GangRequest, nodes: Sequence[NodeInfo]) -> tuple[int | None, bool | None, str]:
    """Whether data-parallel peers of a placed gang share rails.

    Args:
        request: the gang (procs per node, GPUs per pod, ``dp_stride``).
        nodes: the chosen nodes.

    Returns:
        ``(rails, aligned, sentence)``: ``rails`` when every node has the same
        count (else None); ``aligned`` None when the gang requests no GPUs.
        Aligned needs one rail count on every node, ``procsPerNode <= rails``,
        pods that own whole nodes (a partial pod's GPU indices are the device
        plugin's choice) and a data-parallel stride (fsdp × context × tensor) that is a
        multiple or a divisor of procsPerNode, so every DP group uses the same
        local ranks, hence the same rails, on every node.
    """
    if request.gpus_per_node == 0:
        return None, None, "no GPUs requested: rails do not apply"
    rails = {n.rails for n in nodes}
    uniform = next(iter(rails)) if len(rails) == 1 else None
    procs, stride = request.procs_per_node, max(1, request.dp_stride)
    if uniform is None:
        return None, False, f"not rail-aligned: the nodes have {', '.join(map(str, sorted(rails)))} rails"
    if procs > uniform:
        return uniform, False, f"not rail-aligned: {procs} processes per node share {uniform} rails"
    if any(n.gpus != request.gpus_per_node for n in nodes):
        return uniform, False, f"rail alignment not guaranteed: pods take {request.gpus_per_node} of a node's GPUs and the device plugin picks which"
    if stride % procs and procs % stride:
        return uniform, False, f"not rail-aligned: data-parallel stride fsdp×context×tensor={stride} neither divides nor is a multiple of procsPerNode={procs}"
    return uniform, True, f"rail-aligned: every node has {uniform} rails and local rank i uses rail i"


def _explain(request: GangRequest, cluster: ClusterSnapshot, choice: dom.Choice, size: int, notes: Sequence[str]) -> str:
    """One or two sentences: where the gang went, why there, and what could not be met."""
    levels, held = cluster.levels, len(request.fixed)
    if choice.depth == dom.CLUSTER:
        where = "across the cluster"
    else:
        where = f"inside {levels[choice.depth]}={choice.domain[-1].lstrip(chr(0))}"
    if request.policy == "none":
        why = "policy none: best-fit nodes, compacted by topology"
    elif choice.depth >= 0:
        prefix = f"policy required {request.level}: " if request.policy == "required" else ""
        why = f"{prefix}tightest domain that fits, best fit among {_plural(choice.candidates, level_name(levels[choice.depth]))} that could hold it"
    else:
        why = f"no single {level_name(levels[0])} has {size} nodes with {request.gpus_per_node} free GPUs now (largest: {choice.largest.get(0, 0) + held})"
    if request.policy == "preferred" and request.level in levels and choice.depth < levels.index(request.level):
        lv = levels.index(request.level)
        name = level_name(request.level)
        why = (
            f"policy preferred {request.level}: no single {name} has {size} nodes with {request.gpus_per_node} free GPUs now "
            f"(largest: {choice.largest.get(lv, 0) + held}), so the gang spans {name}s"
        )
    return "; ".join([f"{where} ({why})", *notes])


def _summary(request: GangRequest, cluster: ClusterSnapshot, nodes: Sequence[NodeInfo], choice: dom.Choice, rails: tuple[int | None, bool | None, str]) -> dict[str, object]:
    levels = cluster.levels
    spread = {lv: len({dom.node_path(n, d) for n in nodes}) for d, lv in enumerate(levels)}
    out: dict[str, object] = {
        "policy": request.policy,
        "level": request.level or "",
        "domainLevel": levels[choice.depth] if choice.depth >= 0 else "",
        "domain": choice.domain[-1].lstrip("\0") if choice.domain else "",
        "spread": spread,
    }
    if rails[0] is not None:
        out["rails"] = rails[0]
    if rails[1] is not None:
        out["railAligned"] = rails[1]
    return out


def _better(a: dom.Choice, b: dom.Choice) -> bool:
    """Narrower domain first, then fuller nodes (fewer free GPUs left on them)."""
    return (a.depth, -sum(n.free_gpus for n in a.nodes)) > (b.depth, -sum(n.free_gpus for n in b.nodes))


def place_gang(request: GangRequest, cluster: ClusterSnapshot) -> Placement | Refusal:
    """Choose a distinct node for every rank, all or nothing, honouring topology and rails.

    A restarting gang (``request.prefer``) first tries to keep every previous
    node that still fits, each for the rank that ran there (they are treated as
    pinned, and the rest of the gang is placed around them), as ByteRobust and
    Llama 3's recovery replace only the failed machines: the node-local
    checkpoint tiers stay under the ranks that wrote them. When that fails (the
    kept nodes span domains a required level forbids, say) the gang is placed
    afresh.

    A gang of replica groups (``request.groups`` > 1, not elastic) is placed group by group, each group in its own
    tightest domain (:func:`place_groups`); when that greedy pass finds no room the gang is tried as one block
    before it is refused.

    Args:
        request: the gang's needs; ranks in ``request.fixed`` keep their node.
        cluster: nodes with free capacity already net of every bound or pinned
            pod (including this gang's own pinned pods) and of capacity promised
            to earlier jobs of the same admission pass. Only nodes the gang's
            pods may use (:func:`railtrain.operator.scheduling.nodefit.restrict`: node
            selector, required affinity, tolerations, allocatable) are
            considered, and only those with every request free are candidates.

    Returns:
        :class:`Placement` with one node per rank in rank order (an elastic gang
        gets the largest admissible size that fits now), or :class:`Refusal`
        with reason ``Unschedulable`` (too few nodes fit cluster-wide),
        ``TopologyUnsatisfiable`` (no domain of the required level holds the
        gang), ``UnknownTopologyLevel`` (a required level the operator does
        not know) or :data:`PINNED_NODE_UNAVAILABLE` (a rank already pinned to
        a node that is gone or ineligible: the caller must recreate the gang),
        its message naming the numbers and what would help.
    """
    if request.groups > 1 and len(request.sizes) == 1 and request.nodes % request.groups == 0:
        each = place_groups(request, cluster)
        if isinstance(each, Placement):
            return each
        whole = _place_whole(replace(request, groups=1), cluster)  # greedy per group can miss a fit the whole gang has
        return whole if isinstance(whole, Placement) else each
    return _place_whole(request, cluster)


def place_groups(request: GangRequest, cluster: ClusterSnapshot) -> Placement | Refusal:
    """Place a gang of ``request.groups`` replica groups group by group (pure): group ``g`` takes ranks
    ``g·n/R … (g+1)·n/R − 1`` in the tightest domain that fits it alone (the topology request applied to the group,
    rail-aware order inside it), on what the groups before it left; all or nothing.

    Why: each group is a torchrun world whose collectives (FSDP, tensor, pipeline, context, DDP inside it) need
    the tight domain; across groups only the per-step gradient average of torchft crosses, so the whole gang need
    not share one (issue 31).

    Returns:
        A :class:`Placement` of the whole gang in rank order (its summary describes group 0's domain, with
        ``spread`` over every rank), or the first group's :class:`Refusal`, its message naming the group.
    """
    per = request.nodes // request.groups
    view = cluster
    ranked: list[str] = []
    domains: list[Mapping[str, str]] = []
    said: list[str] = []
    first: Placement | None = None
    for g in range(request.groups):
        lo, hi = g * per, (g + 1) * per
        sub = replace(request, nodes=per, counts=(per,), groups=1, fixed={r - lo: n for r, n in request.fixed.items() if lo <= r < hi},
                      prefer=tuple(request.prefer[lo:hi]) if request.prefer else ())  # fmt: skip
        got = _place_whole(sub, view)
        if isinstance(got, Refusal):
            return replace(got, message=f"replica group {g} (ranks {lo}-{hi - 1}): {got.message}")
        first = first or got
        view = view.excluding(got.nodes, f"taken by replica group {g} of the same gang")  # one rank per node, whichever group
        ranked.extend(got.nodes)
        domains.extend(got.domains)
        where = got.summary.get("domain") or "any node"
        said.append(f"group {g} inside {got.summary.get('domainLevel') or 'the cluster'}={where}" if got.summary.get("domain") else f"group {g} on {where}")
    assert first is not None
    levels = cluster.levels
    spread = {lv: len({d.get(lv) for d in domains}) for lv in levels}
    summary = {**first.summary, "spread": spread}
    explanation = f"each of the {request.groups} replica groups in its own tightest domain: " + "; ".join(said)
    return Placement(tuple(ranked), reasons.GANG_PLACED, tuple(domains), summary, explanation)


def _place_whole(request: GangRequest, cluster: ClusterSnapshot) -> Placement | Refusal:
    """:func:`place_gang` for the gang as one block (with its ``prefer`` tried first)."""
    kept = _kept(request, cluster)
    if kept:
        again = _place(replace(request, fixed={**kept, **request.fixed}, prefer=()), cluster, kept=len(kept))
        if isinstance(again, Placement):
            return again
    return _place(replace(request, prefer=()) if request.prefer else request, cluster)


def _kept(request: GangRequest, cluster: ClusterSnapshot) -> dict[int, str]:
    """The ranks of ``request.prefer`` whose previous node could take one pod of the gang now: ``{rank: node}``.

    Only ranks below the smallest admissible size are kept (an elastic gang may come back smaller).
    """
    if not request.prefer:
        return {}
    view = restrict(cluster, request.needs, request.gpu_resource)
    taken = set(request.fixed.values())
    out: dict[int, str] = {}
    for rank, name in enumerate(request.prefer[: request.sizes[0]]):
        node = view.nodes.get(name) if name else None
        if rank in request.fixed or node is None or name in taken or name in out.values():
            continue
        if node.eligible and node.free_gpus >= request.gpus_per_node and not node.short:
            out[rank] = name
    return out


def _place(request: GangRequest, cluster: ClusterSnapshot, kept: int = 0) -> Placement | Refusal:
    """The body of :func:`place_gang` for a request whose ``prefer`` has been turned into ``fixed`` (``kept`` of them) or dropped."""
    levels, need = cluster.levels, request.gpus_per_node
    cluster = restrict(cluster, request.needs, request.gpu_resource)
    lost = {r: n for r, n in sorted(request.fixed.items()) if n not in cluster.nodes or not cluster.nodes[n].eligible}
    if lost:
        why = ", ".join(f"rank {r} on {n} ({cluster.nodes[n].why_ineligible if n in cluster.nodes else 'node gone'})" for r, n in lost.items())
        return Refusal(PINNED_NODE_UNAVAILABLE, f"part of the gang is pinned to nodes it can no longer use: {why}; the gang is deleted and admitted again")
    notes: list[str] = []
    floor = _floor(request, levels, notes)
    if isinstance(floor, Refusal):
        return floor
    taken = set(request.fixed.values())
    fixed = [cluster.nodes[n] for n in dict.fromkeys(request.fixed.values()) if n in cluster.nodes]
    cands = [n for n in cluster.eligible() if n.free_gpus >= need and not n.short and n.name not in taken]
    room = len(cands)
    if floor >= 0:
        must = {dom.node_path(f, floor) for f in fixed}
        groups = Counter(dom.node_path(n, floor) for n in cands)
        room = max((c for key, c in groups.items() if not must or {key} == must), default=0)
    sizes = [c for c in request.sizes if c - len(request.fixed) <= room and c >= len(request.fixed)]
    if not sizes:
        if len(cands) + len(request.fixed) < request.sizes[0]:
            return shortfall(request, cluster, len(cands))
        return domain_shortfall(request, cluster, floor, len(cands) + len(request.fixed), cands)
    size = sizes[-1]
    choice = _choose(request, cands, fixed, size - len(request.fixed), len(levels), floor)
    if choice is None:  # counts fit but a fixed node sits outside every domain that does
        return domain_shortfall(request, cluster, max(floor, 0), len(cands) + len(request.fixed), cands)
    new = iter(choice.nodes)
    ranked = [cluster.nodes[request.fixed[r]] if r in request.fixed else next(new) for r in range(size)]
    if size < request.sizes[-1]:
        notes.append(f"elastic: admitted {size} of at most {request.sizes[-1]} nodes, the most that fit now")
    if kept:
        notes.append(f"restart: {kept} of {size} ranks back on the nodes they ran on (their node-local checkpoints)")
    rails = rail_alignment(request, ranked)
    notes.append(rails[2])
    explanation = _explain(request, cluster, choice, size, notes)
    per_rank = tuple({lv: v for lv, v in zip(levels, n.domains) if v is not None} for n in ranked)
    summary = _summary(request, cluster, ranked, choice, rails)
    return Placement(tuple(n.name for n in ranked), reasons.GANG_PLACED, per_rank, summary, explanation)


def _floor(request: GangRequest, levels: Sequence[str], notes: list[str]) -> int | Refusal:
    """The narrowest topology level the whole gang must sit inside, as an index into ``levels``.

    ``dom.CLUSTER`` when nothing binds it; the ``required`` level of
    ``spec.topology``, or the NVLink-domain level when ``request.nvlink``,
    whichever is narrower. Returns a permanent :class:`Refusal` when a required
    level or the NVLink domain is not among ``levels``; a ``preferred`` level the
    operator does not know is ignored and said in ``notes`` (appended to).
    """
    floor = dom.CLUSTER
    if request.policy != "none" and request.level and request.level not in levels:
        known = ", ".join(levels)
        if request.policy == "required":
            return Refusal(
                reasons.UNKNOWN_TOPOLOGY_LEVEL,
                f"spec.topology.level {request.level} is not one of the operator's topology levels ({known}). {contract.NEVER_FITS} as it is: "
                "use one of them, policy preferred, or ask the operator's administrator to configure it (docs/topology.md)",
                permanent=True,
            )
        notes.append(f"spec.topology.level {request.level} is not a configured level ({known}) and was ignored")
    elif request.policy == "required" and request.level:
        floor = levels.index(request.level)
    if request.nvlink:
        domain = nvlink_level(levels)
        if domain is None:
            return Refusal(
                reasons.NO_NVLINK_DOMAIN_LEVEL,
                f"spec.topology.nvlinkDomain needs the gang inside one NVLink domain, and none of the operator's topology levels "
                f"({', '.join(levels)}) names one ({' or '.join(NVLINK_DOMAIN_KEYS)}). {contract.NEVER_FITS} as it is: run the operator with "
                "--topology-preset nvidia or a level naming nvidia.com/gpu.clique (docs/fabric.md), or drop spec.topology.nvlinkDomain",
                permanent=True,
            )
        floor = max(floor, levels.index(domain))
    return floor


def _choose(request: GangRequest, cands: Sequence[NodeInfo], fixed: Sequence[NodeInfo], k: int, depth: int, floor: int) -> dom.Choice | None:
    """The ``k`` new nodes of the gang beside its ``fixed`` ones, one rail layout at a time first.

    For a gang that requests GPUs, each rail count shared by the fixed nodes and
    enough for ``procsPerNode`` is searched on its own (:func:`railtrain.operator.scheduling.domains.search`
    over ``depth`` levels, no wider than ``floor``) and the :func:`_better` answer
    kept, so data-parallel peers share rails; only if no single layout holds
    the gang are ``cands`` searched together. Returns None when nothing fits.
    """
    need = request.gpus_per_node
    choice = None
    if need > 0:
        layouts = sorted({n.rails for n in cands if n.rails >= request.procs_per_node and all(f.rails == n.rails for f in fixed)})
        for rails in layouts:
            found = dom.search([n for n in cands if n.rails == rails], k, depth, need, fixed, floor)
            if found and (choice is None or _better(found, choice)):
                choice = found
    return choice or dom.search(cands, k, depth, need, fixed, floor)
