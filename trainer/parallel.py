"""Parallel dimensions, the process group, the DeviceMesh, and data-parallel wrapping.

One 5-D ``DeviceMesh`` with the dimensions of :mod:`railtrain.crds.parallel`,
``("pp", "dp_replicate", "dp_shard", "cp", "tp")`` (size-1 dimensions included,
so every slice below exists for every job), over one code path: gloo on CPU,
nccl on CUDA. What runs on it (torchtitan's layout):

* ``tp``: tensor parallel (:mod:`railtrain.trainer.tensor_parallel`);
* ``cp``: context parallel, ring attention over each sequence's chunks
  (:mod:`railtrain.trainer.context_parallel`); for the weights the ``cp``
  ranks are data parallel (they see different tokens), so gradients are
  averaged over them too;
* ``pp``: pipeline stages (:mod:`railtrain.trainer.pipeline`);
* ``dp_shard`` (with ``cp`` folded in: ``dp_shard_cp``): FSDP2
  (``fully_shard``) on each transformer block, then on the root; with
  ``dp_replicate`` too, HSDP over the 2-D slice ``("dp_replicate", "dp_shard_cp")``;
* ``dp_replicate`` (with ``cp`` folded in: ``dp_replicate_cp``) alone:
  ``DistributedDataParallel``, except when tensor parallel is on: DDP does
  not take DTensor parameters, so replication is then FSDP2 over
  ``dp_shard_cp`` (HSDP when ``data > 1``): with ``fsdp = 1`` that shards
  the parameters over the ``cp`` ranks, as torchtitan does, or over nothing
  (a shard dimension of 1: the same arithmetic as DDP) when ``context = 1``.

Without torchrun the trainer runs as one plain process and nothing is wrapped.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from railtrain.crds import contract
from railtrain.crds import parallel as rule
from railtrain.crds.parallel import MESH_DIMS, Degrees
from railtrain.trainer.context_parallel import Ring
from railtrain.trainer.model import ModelConfig

FLAG_OF_FIELD = {"data": "--parallel", "fsdp": "--parallel", "tensor": "--tp", "pipeline": "--pp", "context": "--cp"}
"""The trainer flag that sets each degree (data and fsdp both come from ``--parallel``)."""


@dataclass(frozen=True)
class ParallelDims:
    """The parallel degrees of a job, validated by :func:`railtrain.crds.parallel.problems` (the operator's rule).

    Attributes:
        degrees: data (replicate), fsdp (shard), tensor, pipeline, context.
        world_size: processes in the job.
        procs_per_node: processes per node (torchrun's ``LOCAL_WORLD_SIZE``),
            for the "tensor inside a node" check; ``None`` skips it.

    Raises:
        ValueError: the degrees break the rule; one sentence per problem, each
            naming the degree.
    """

    degrees: Degrees
    world_size: int
    procs_per_node: int | None = None

    def __post_init__(self) -> None:
        errors = rule.problems(self.degrees, self.world_size, self.procs_per_node)
        if errors:
            raise ValueError("; ".join(f"parallel degrees: {msg}" for _, msg in errors))

    @property
    def mode(self) -> str:
        """``"fsdp"`` when parameters are sharded (``fsdp > 1``, HSDP included), else ``"ddp"``."""
        return "fsdp" if self.degrees.fsdp > 1 else "ddp"

    @property
    def uses_fsdp(self) -> bool:
        """Whether FSDP2 wraps the model: sharding, or replication under tensor parallel (see the module docstring)."""
        d = self.degrees
        return d.fsdp > 1 or (d.data * d.context > 1 and d.tensor > 1)

    @property
    def cp(self) -> int:
        """Context-parallel degree."""
        return self.degrees.context

    @property
    def loss_ranks(self) -> int:
        """Ranks whose local mean losses average to the global one: data × fsdp × context (equal token counts each)."""
        return self.degrees.dp * self.degrees.context

    def cp_rank(self, rank: int) -> int:
        """Which chunks of each sequence ``rank`` holds (its index in its ``cp`` group)."""
        return rule.cp_rank(rank, self.degrees)

    @property
    def dp_degree(self) -> int:
        """Ranks that each get a different slice of the batch: data × fsdp."""
        return self.degrees.dp

    @property
    def tp(self) -> int:
        """Tensor-parallel degree."""
        return self.degrees.tensor

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.degrees.pipeline

    def coordinates(self, rank: int) -> dict[str, int]:
        """``rank``'s index along each mesh dimension (see :func:`railtrain.crds.parallel.coordinates`)."""
        return rule.coordinates(rank, self.degrees)

    def dp_rank(self, rank: int) -> int:
        """Which slice of the batch ``rank`` trains on."""
        return rule.dp_rank(rank, self.degrees)

    def describe(self) -> str:
        """One line for the log, e.g. ``fsdp data=1 fsdp=2 tensor=2 pipeline=1 world=4``."""
        return f"{self.mode} {self.degrees.describe()} world={self.world_size}"


def resolve_dims(
    flag_mode: str | None,
    pod_degrees: dict[str, int],
    world_size: int,
    procs_per_node: int | None = None,
    flag_tp: int | None = None,
    flag_pp: int | None = None,
    flag_cp: int | None = None,
) -> ParallelDims:
    """Decide the degrees from the flags, else the pod's parallelism, else DDP over every rank.

    Any of ``--parallel``, ``--tp``, ``--pp``, ``--cp`` given means the flags
    alone decide: tensor, pipeline and context default to 1 and the
    data-parallel ranks are the rest, replicated (``ddp``, the default) or
    sharded (``fsdp``). Otherwise the pod's degrees are taken as they are.

    Args:
        flag_mode: ``"ddp"``, ``"fsdp"`` or ``None``.
        pod_degrees: ``contract.parse_parallelism`` output (``{}`` if none).
        world_size: processes in the job.
        procs_per_node: processes per node, for the tensor-in-a-node check.
        flag_tp: ``--tp`` or ``None``.
        flag_pp: ``--pp`` or ``None``.
        flag_cp: ``--cp`` or ``None``.

    Raises:
        ValueError: the degrees break the rule of
            :func:`railtrain.crds.parallel.problems`; the message names the
            flags or the environment variable and the degree.
    """
    if flag_mode or flag_tp or flag_pp or flag_cp:
        tp, pp, cp = flag_tp or 1, flag_pp or 1, flag_cp or 1
        if world_size % (tp * pp * cp):
            cp_part = f" x --cp {cp}" if flag_cp else ""
            raise ValueError(f"--tp {tp} x --pp {pp}{cp_part} does not divide the world size {world_size}")
        dp = world_size // (tp * pp * cp)
        degrees = Degrees(1, dp, tp, pp, cp) if flag_mode == "fsdp" else Degrees(dp, 1, tp, pp, cp)
        errors = rule.problems(degrees, world_size, procs_per_node)
        if errors:
            raise ValueError("; ".join(f"{FLAG_OF_FIELD.get(field, 'parallel flags')}: {msg}" for field, msg in errors))
        return ParallelDims(degrees, world_size, procs_per_node)
    if not pod_degrees:
        return ParallelDims(Degrees(data=world_size), world_size, procs_per_node)
    env = contract.ENV_PARALLELISM
    unknown = sorted(set(pod_degrees) - set(rule.FIELDS))
    if unknown:
        raise ValueError(f"{env} names unknown degrees {', '.join(unknown)}; allowed: {', '.join(rule.FIELDS)}")
    degrees = Degrees(**pod_degrees)
    errors = rule.problems(degrees, world_size, procs_per_node)
    if errors:
        raise ValueError("; ".join(f"{env} {msg}" for _, msg in errors))
    return ParallelDims(degrees, world_size, procs_per_node)


def check_model_fits(dims: ParallelDims, model: ModelConfig, seq_len: int, local_batch: int, grad_accum_steps: int, microbatches: int) -> None:
    """Refuse degrees the model or the batch cannot be divided by.

    Args:
        local_batch: sequences per data-parallel rank per step.
        microbatches: pipeline micro-batches per accumulation step (ignored without pipeline parallel).

    Raises:
        ValueError: one sentence naming the flag: ``--tp`` must divide the
            heads, widths and vocabulary and ``--seq-len`` (sequence parallel
            shards it); ``--seq-len`` must be a multiple of ``2 × cp × tp``; ``--pp`` must not exceed the blocks nor the
            micro-batches; the local batch must split into accumulation steps
            and micro-batches.
    """
    tp, pp, cp = dims.tp, dims.pp, dims.cp
    if cp > 1 and seq_len % (2 * cp * tp):
        raise ValueError(f"--seq-len {seq_len} must be a multiple of 2 x --cp {cp} x --tp {tp} = {2 * cp * tp} "
                         "(each context-parallel rank holds two chunks, which sequence parallel splits further)")
    if tp > 1:
        for what, n in (("n_heads", model.n_heads), ("hidden_dim", model.hidden_dim), ("vocab_size", model.vocab_size)):
            if n % tp:
                raise ValueError(f"--tp {tp} must divide the model's {what} ({n})")
        if seq_len % tp:
            raise ValueError(f"--seq-len {seq_len} must be divisible by --tp {tp} (sequence parallel shards the sequence)")
    if pp > model.n_layers:
        raise ValueError(f"--pp {pp} exceeds the model's {model.n_layers} transformer blocks")
    if pp > 1 and microbatches < pp:
        raise ValueError(
            f"--pp {pp} needs at least {pp} micro-batches per step so every stage has work, got {microbatches} "
            "(raise --pp-microbatches or the per-rank batch)"
        )
    per_step = grad_accum_steps * (microbatches if pp > 1 else 1)
    if local_batch % per_step:
        what = "--grad-accum-steps x --pp-microbatches" if pp > 1 else "--grad-accum-steps"
        raise ValueError(f"the per-rank batch of {local_batch} sequences (--batch-size / data-parallel degree) is not divisible by {what} = {per_step}")


def check_pod_world_size(pod: contract.PodEnvironment | None, world_size: int) -> None:
    """Refuse to train when the pod contract and the process group disagree on the job's size.

    A pod whose command ran the trainer without torchrun would otherwise train
    alone, on every node, into the same checkpoint directory.

    Raises:
        ValueError: ``pod.world_size != world_size``; names the variables.
    """
    if pod is not None and pod.world_size != world_size:
        raise ValueError(
            f"{contract.ENV_NNODES}={pod.nnodes} x {contract.ENV_PROCS_PER_NODE}={pod.procs_per_node} "
            f"promises {pod.world_size} processes but torch.distributed has {world_size}; launch with torchrun"
        )


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job.

    Attributes:
        rank: global rank in ``[0, world_size)``.
        world_size: number of processes (1 without torchrun).
        local_rank: rank on this node, used to pick the GPU.
        device: where the model lives.
        distributed: whether a process group was initialised.
        local_world_size: processes on this node (torchrun's ``LOCAL_WORLD_SIZE``).
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    distributed: bool
    local_world_size: int = 1


def init_distributed(device_type: str, timeout_s: float | None = None) -> DistInfo:
    """Join the process group when launched by torchrun; otherwise run alone.

    Args:
        device_type: ``"cpu"`` (gloo) or ``"cuda"`` (nccl, with gloo for CPU tensors).
        timeout_s: collective timeout in seconds (``None``: torch's default, 30 minutes);
            the trainer passes :func:`railtrain.trainer.health.monitor.process_group_timeout_s`.

    Raises:
        ValueError: ``"cuda"`` was asked for but this node has fewer GPUs than local ranks.
    """
    launched = dist.is_torchelastic_launched()
    local_rank = dist.get_node_local_rank(fallback_rank=0) if launched else 0
    if device_type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"--device cuda: local rank {local_rank} but only {torch.cuda.device_count()} GPU(s) visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not launched:
        return DistInfo(0, 1, 0, device, False)
    backend = "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"
    timeout = {"timeout": datetime.timedelta(seconds=timeout_s)} if timeout_s else {}
    dist.init_process_group(backend=backend, device_id=device if device_type == "cuda" else None, **timeout)
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))  # set by torchrun
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device, True, local_world_size)


def shutdown_distributed() -> None:
    """Destroy the default process group if one exists (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def build_mesh(dims: ParallelDims, device_type: str) -> DeviceMesh:
    """The job's ``DeviceMesh``: shape ``(pipeline, data, fsdp, context, tensor)``, named :data:`railtrain.crds.parallel.MESH_DIMS`.

    Also flattens ``("dp_shard", "cp")`` into ``dp_shard_cp`` (FSDP2's shard
    dimension) and ``("dp_replicate", "cp")`` into ``dp_replicate_cp`` (DDP's
    group): the ``cp`` ranks hold different tokens, so for the gradients they
    are data parallel.
    """
    mesh = init_device_mesh(device_type, dims.degrees.mesh_shape, mesh_dim_names=MESH_DIMS)
    mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    mesh["dp_replicate", "cp"]._flatten("dp_replicate_cp")
    return mesh


def dp_mesh(dims: ParallelDims, mesh: DeviceMesh) -> DeviceMesh:
    """The data-parallel slice FSDP2 runs on: ``("dp_replicate", "dp_shard_cp")`` for HSDP, else ``("dp_shard_cp",)``."""
    return mesh["dp_replicate", "dp_shard_cp"] if dims.degrees.data > 1 else mesh["dp_shard_cp"]


def apply_context_parallel(model: nn.Module, dims: ParallelDims, mesh: DeviceMesh, seq_len: int) -> None:
    """Make ``model`` (a :class:`~railtrain.trainer.model.Transformer` or a stage of it) run on this rank's chunks
    of every ``seq_len``-token sequence, with ring attention over the ``cp`` group. Nothing happens when ``cp = 1``."""
    if dims.cp > 1:
        model.use_context_parallel(Ring.of(mesh["cp"].get_group()), seq_len)


def apply_data_parallel(
    model: nn.Module, dims: ParallelDims, mesh: DeviceMesh, device: torch.device, bf16: bool, cpu_offload: bool = False
) -> nn.Module:
    """Wrap ``model`` (already on ``device``, tensor-parallelised if ``tp > 1``) for the data-parallel degrees.

    Args:
        model: a :class:`railtrain.trainer.model.Transformer` or one pipeline stage of it.
        bf16: FSDP2 only: gather parameters in bfloat16 and reduce gradients in
            float32 (otherwise the train step uses autocast).
        cpu_offload: FSDP2 only: keep sharded parameters, gradients and the
            optimizer step on the CPU (``CPUOffloadPolicy``; ZeRO-Offload, Ren
            et al. 2021), copying each block to the device for its compute.

    Returns:
        The module to call in the train step: a ``DistributedDataParallel``
        (over ``dp_replicate_cp``), ``model`` itself turned into an
        ``FSDPModule`` in place, or ``model`` unchanged when there is a single
        data-parallel rank and no context parallelism.
    """
    if not dims.uses_fsdp:
        if dims.degrees.data * dims.cp == 1:
            return model
        # broadcast_buffers=False: the one buffer, the rotary table, is derived from the config and, under
        # context parallelism, differs by rank (its tokens' positions); rank 0's must not overwrite it.
        return DistributedDataParallel(
            model, process_group=mesh["dp_replicate_cp"].get_group(), device_ids=[device.index] if device.type == "cuda" else None,
            broadcast_buffers=False,
        )
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda") if cpu_offload else OffloadPolicy()
    fsdp_mesh = dp_mesh(dims, mesh)
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        # The last block's parameters are needed right away by backward, so keep them gathered. Under
        # pipeline parallel every block runs once per micro-batch: keep them all gathered (torchtitan).
        reshard = dims.pp == 1 and i < len(blocks) - 1
        fully_shard(block, mesh=fsdp_mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=reshard)
    fully_shard(model, mesh=fsdp_mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=dims.pp == 1)
    return model


def clip_grad_norm_(params: list[nn.Parameter], max_norm: float, pp_group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Clip the global L2 norm of the gradients to ``max_norm``; return the norm before clipping.

    Works on plain tensors and on DTensor gradients (FSDP2 shards, tensor-parallel
    shards and replicas: DTensor's norm reduces each placement correctly). Under
    pipeline parallel each stage holds only its own parameters, so the squared
    norms are summed over ``pp_group`` (torchtitan's ``clip_grad_norm_``).

    Args:
        params: this rank's parameters (of its pipeline stage).
        max_norm: ``inf`` only measures.
        pp_group: the pipeline group, or ``None`` without pipeline parallel.

    Returns:
        A 0-d float tensor, equal on every rank.
    """
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    if pp_group is not None:
        squared = total.float() ** 2
        dist.all_reduce(squared, group=pp_group)
        total = squared.sqrt()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def mean_loss_and_sum(loss: torch.Tensor, dims: ParallelDims, info: DistInfo, extra: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`mean_loss` and the sum over all ranks of ``extra`` (a 1-d float tensor) in the same all-reduce.

    The health checks send each rank's compute seconds at its own index of a world-size vector
    this way, so the straggler check costs no collective of its own.
    """
    if not (info.distributed and info.world_size > 1):
        return mean_loss(loss, dims, info), extra.clone()
    out = loss.detach().clone().float().reshape(1)
    c = dims.coordinates(info.rank)
    if c["pp"] != dims.pp - 1 or c["tp"] != 0:
        out.zero_()
    both = torch.cat([out, extra.to(device=out.device, dtype=torch.float32)])
    dist.all_reduce(both, op=dist.ReduceOp.SUM)
    return both[0] / dims.loss_ranks, both[1:]


def mean_loss(loss: torch.Tensor, dims: ParallelDims, info: DistInfo) -> torch.Tensor:
    """The global batch's mean loss: the mean over data-parallel ranks of their local mean loss.

    Only one rank per data-parallel slice and context-parallel chunk pair holds
    a loss that counts: the one on the last pipeline stage with tensor-parallel
    index 0 (the others of its tensor group hold the same value; earlier stages
    hold none). Each holds the mean over the same number of tokens, so each
    rank adds its loss or 0, and the sum over all ranks is divided by data ×
    fsdp × context.
    Identity when running alone; returns a new tensor.
    """
    out = loss.detach().clone().float()
    if not (info.distributed and info.world_size > 1):
        return out
    c = dims.coordinates(info.rank)
    if c["pp"] != dims.pp - 1 or c["tp"] != 0:
        out.zero_()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dims.loss_ranks
