"""Parallel degrees of a job: the one rule the operator and the trainer both apply.

A job's processes form one 5-D grid, outermost dimension first::

    pp × dp_replicate × dp_shard × cp × tp          (the DeviceMesh dimension names)
    pipeline × data × fsdp × context × tensor       (the API / pod-contract field names)

and the product of the five degrees is the world size (torchtitan's order).
Rank ``r`` sits at the row-major coordinates of ``r`` in that shape (what
``init_device_mesh`` does), so ``tp`` is innermost: the ``tensor`` ranks of
one group are consecutive, and they share a node exactly when ``tensor``
divides the processes per node. That is required because tensor parallelism
all-reduces activations in every layer and needs the node's NVLink bandwidth
(Shoeybi et al. 2019, "Megatron-LM", section 3). Context parallelism (ring
attention) passes key/value blocks between the ranks of a ``cp`` group at every
attention layer, so it comes next: one ``cp`` group with its ``tp`` ranks is
``context × tensor`` consecutive ranks, and the rule keeps it inside one node
(``context × tensor`` must divide the processes per node). The one exception is a
gang inside one NVLink domain (``spec.topology.nvlinkDomain``, e.g. GB200 NVL72), whose
NVLink reaches across nodes: there either group may instead span whole nodes (a
multiple of the processes per node). The data-parallel dimensions sit outside, where
only gradients cross nodes.

Pure arithmetic, importing neither torch nor kopf: the API's ``SPEC_RULES``
(:mod:`railtrain.crds.api`) use its predicates, and the trainer's ``ParallelDims``
(:mod:`railtrain.trainer.dims`, at start and in ``railtrain validate``'s check of
the trainer's arguments) calls :func:`problems`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

FIELDS = ("data", "fsdp", "tensor", "pipeline", "context")
"""API field names of the degrees."""

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""DeviceMesh dimension names, outermost first."""



class HasDegrees(Protocol):
    """Anything with the five degree attributes (the API's ``Parallelism``, :class:`Degrees`)."""

    data: int
    fsdp: int
    tensor: int
    pipeline: int
    context: int


@dataclass(frozen=True)
class Degrees:
    """The five parallel degrees of a job (omitted ones are 1).

    Attributes:
        data: data-parallel replicas (DDP, or the replicate dimension of HSDP).
        fsdp: ranks each parameter is sharded over (FSDP2 / ZeRO-3).
        tensor: tensor-parallel degree (Megatron-style, inside a node).
        pipeline: pipeline stages.
        context: context-parallel degree: ranks that split each sequence
            (ring attention, inside a node with the tensor ranks).
    """

    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    pipeline: int = 1
    context: int = 1

    @classmethod
    def of(cls, d: HasDegrees) -> "Degrees":
        """Copy the degrees of any :class:`HasDegrees` object."""
        return cls(d.data, d.fsdp, d.tensor, d.pipeline, d.context)

    @property
    def mesh_shape(self) -> tuple[int, int, int, int, int]:
        """``(pipeline, data, fsdp, context, tensor)``: the sizes of :data:`MESH_DIMS`."""
        return (self.pipeline, self.data, self.fsdp, self.context, self.tensor)

    @property
    def dp(self) -> int:
        """data × fsdp: ranks that each see a different slice of the batch."""
        return self.data * self.fsdp

    def describe(self) -> str:
        """``data=D fsdp=F tensor=T pipeline=P``, then `` context=C`` when ``context > 1``.

        ``context=1`` is left out so the layout string of a job without context
        parallelism is what it was before the field existed (checkpoints record it).
        """
        return " ".join(f"{name}={getattr(self, name)}" for name in FIELDS if name != "context" or self.context != 1)


def product(d: HasDegrees) -> int:
    """data × fsdp × tensor × pipeline × context: the world size the degrees need."""
    return d.data * d.fsdp * d.tensor * d.pipeline * d.context


def inner(d: HasDegrees) -> int:
    """fsdp × tensor × pipeline × context: what an elastic job keeps fixed while ``data`` scales."""
    return d.fsdp * d.tensor * d.pipeline * d.context


def dp_stride(d: HasDegrees) -> int:
    """fsdp × context × tensor: the rank distance between neighbours along ``dp_replicate`` (the ``data`` peers)."""
    return d.fsdp * d.context * d.tensor


def fills_world(d: HasDegrees, world_size: int) -> bool:
    """Whether the degrees multiply to ``world_size``."""
    return product(d) == world_size


def tensor_fits_node(tensor: int, procs_per_node: int) -> bool:
    """Whether a tensor-parallel group (consecutive ranks) stays inside one node of ``procs_per_node`` processes."""
    return procs_per_node % tensor == 0


def tensor_fits(tensor: int, procs_per_node: int, nvlink_domain: bool = False) -> bool:
    """Whether a tensor-parallel group may have ``tensor`` ranks: inside one node, or, for a gang placed inside one
    NVLink domain (``spec.topology.nvlinkDomain``), spanning whole nodes (``tensor`` a multiple of ``procs_per_node``),
    since NVLink then reaches across nodes (GB200 NVL72)."""
    return tensor_fits_node(tensor, procs_per_node) or (nvlink_domain and tensor % procs_per_node == 0)


def context_without_pipeline(context: int, pipeline: int) -> bool:
    """Whether the degrees avoid context × pipeline, which the trainer does not run (docs/parallelism.md, "Limits")."""
    return context == 1 or pipeline == 1


def context_fits_node(context: int, tensor: int, procs_per_node: int) -> bool:
    """Whether a context-parallel group with its tensor ranks (``context × tensor`` consecutive ranks) stays inside one node."""
    return procs_per_node % (context * tensor) == 0


def context_fits(context: int, tensor: int, procs_per_node: int, nvlink_domain: bool = False) -> bool:
    """Whether a context-parallel group with its tensor ranks may have ``context × tensor`` ranks: inside one node, or,
    inside one NVLink domain (``spec.topology.nvlinkDomain``), spanning whole nodes (a multiple of ``procs_per_node``);
    the same rule as :func:`tensor_fits`, for the ``cp × tp`` block of consecutive ranks."""
    return context_fits_node(context, tensor, procs_per_node) or (nvlink_domain and (context * tensor) % procs_per_node == 0)


def _node_rule(group: str, nvlink_domain: bool) -> str:
    """The end of a node-rule sentence: why, and the NVLink-domain way out (taken or not)."""
    if nvlink_domain:
        return f" or be a multiple of it: {group} must fit inside one node or span whole nodes of the NVLink domain"
    return f": {group} must fit inside one node (or span whole nodes of one NVLink domain, spec.topology.nvlinkDomain)"


def problems(d: HasDegrees, world_size: int, procs_per_node: int | None = None, nvlink_domain: bool = False) -> list[tuple[str, str]]:
    """Every way the degrees break the rule, as ``(field, sentence)`` pairs.

    The one rule of the API (``SPEC_RULES``, whose CEL twins say the same),
    ``railtrain validate``'s check of the trainer's flags
    (:mod:`railtrain.trainer.preflight`) and the trainer at start
    (:class:`railtrain.trainer.dims.ParallelDims`).

    Args:
        d: the degrees.
        world_size: processes in the job (nodes × procs per node).
        procs_per_node: processes per node; ``None`` skips the node checks
            (a caller that does not know it).
        nvlink_domain: the gang sits inside one NVLink domain
            (``spec.topology.nvlinkDomain``; in a pod, ``RAILTRAIN_NVLINK_DOMAIN=1``):
            a tensor- or context-parallel group may then also span whole nodes
            (:func:`tensor_fits`, :func:`context_fits`; docs/fabric.md).

    Returns:
        ``[]`` when valid; else one pair per problem, ``field`` being one of
        :data:`FIELDS` (``""`` for the product rule, which involves all of
        them), so each caller can prefix it with its own name for the field
        (``spec.parallelism.tensor``, ``--tp``, ``RAILTRAIN_PARALLELISM``).
    """
    out = [(name, f"{name}={getattr(d, name)} must be >= 1") for name in FIELDS if getattr(d, name) < 1]
    if out:
        return out
    if not fills_world(d, world_size):
        out.append(("", f"data × fsdp × tensor × pipeline × context = {product(d)} ({Degrees.of(d).describe()}) must equal the world size {world_size}"))
    if not context_without_pipeline(d.context, d.pipeline):
        out.append(("context", f"context={d.context} with pipeline={d.pipeline} is not supported: context parallelism runs without pipeline stages"))
    if procs_per_node is not None and not tensor_fits(d.tensor, procs_per_node, nvlink_domain):
        out.append(("tensor", f"tensor={d.tensor} must divide the processes per node ({procs_per_node}){_node_rule('a tensor-parallel group', nvlink_domain)}"))
    elif procs_per_node is not None and not context_fits(d.context, d.tensor, procs_per_node, nvlink_domain):
        out.append(("context", f"context × tensor = {d.context * d.tensor} must divide the processes per node ({procs_per_node})"
                               f"{_node_rule('a context-parallel group and its tensor-parallel ranks', nvlink_domain)}"))
    return out


def coordinates(rank: int, d: HasDegrees) -> dict[str, int]:
    """Where ``rank`` sits in the grid: ``{"pp": i, "dp_replicate": j, "dp_shard": k, "cp": c, "tp": l}`` (row-major, tp innermost).

    Raises:
        ValueError: ``rank`` is outside ``[0, product(d))``.
    """
    shape = Degrees.of(d).mesh_shape
    size = product(d)
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is outside [0, {size})")
    coords: dict[str, int] = {}
    for name, n in zip(reversed(MESH_DIMS), reversed(shape)):
        coords[name] = rank % n
        rank //= n
    return {name: coords[name] for name in MESH_DIMS}


def dp_rank(rank: int, d: HasDegrees) -> int:
    """Index of ``rank``'s slice of the batch among the ``data × fsdp`` data-parallel ranks."""
    c = coordinates(rank, d)
    return c["dp_replicate"] * d.fsdp + c["dp_shard"]


def cp_rank(rank: int, d: HasDegrees) -> int:
    """Index of ``rank`` in its context-parallel group: which chunks of each sequence it holds."""
    return coordinates(rank, d)["cp"]
