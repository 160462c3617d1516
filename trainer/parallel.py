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
* ``dp_shard`` with ``cp`` folded in (``dp_shard_cp``): FSDP2 (``fully_shard``)
  on each transformer block, then on the root; with ``dp_replicate`` too,
  HSDP over ``(dp_replicate, dp_shard_cp)``. FSDP2 wraps the model whenever
  ``fsdp > 1`` or ``context > 1`` (:attr:`ParallelDims.uses_fsdp`): the
  ``cp`` ranks are data parallel for the weights, so with ``fsdp = 1`` the
  parameters, gradients and optimizer state are sharded over the ``cp``
  ranks, as torchtitan does, instead of replicated on each of them;
* ``dp_replicate`` alone (``fsdp = 1``, ``context = 1``):
  ``DistributedDataParallel``, except when tensor parallel is on: DDP does
  not take DTensor parameters, so replication is then FSDP2 over a shard
  dimension of 1 (HSDP: the same arithmetic as DDP).

Without torchrun the trainer runs as one plain process and nothing is wrapped.
"""

from __future__ import annotations

import datetime
import inspect
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from railtrain.crds import contract
from railtrain.crds.parallel import MESH_DIMS, Degrees
from railtrain.trainer.context_parallel import Ring

from railtrain.trainer.dims import FLAG_OF_FIELD, ParallelDims, check_model_fits, check_pod_world_size, resolve_dims  # noqa: F401  (the trainer's names)

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
    """The job's ``DeviceMesh``: shape ``(pipeline, data, fsdp, context, tensor)``, named :data:`railtrain.crds.parallel.MESH_DIMS`."""
    return init_device_mesh(device_type, dims.degrees.mesh_shape, mesh_dim_names=MESH_DIMS)


def dp_mesh(dims: ParallelDims, mesh: DeviceMesh) -> DeviceMesh:
    """The data-parallel mesh FSDP2 runs on: ``("dp_replicate", "dp_shard_cp")`` for HSDP (``data > 1``), else ``("dp_shard_cp",)``.

    ``dp_shard_cp`` is ``dp_shard × cp`` in one dimension (the ``cp`` ranks hold different tokens, so for the
    gradients they are data parallel). It is built by flattening ``(dp_replicate, dp_shard, cp)`` and unflattening
    that into ``(data, fsdp × context)``, a mesh of its own: torch deprecates slicing a flattened dimension out of
    the root mesh ("Slicing a flattened dim from root mesh will be deprecated", torch 2.11 and later). Every rank
    must call it, in the same order (it creates process groups).
    """
    d = dims.degrees
    dp = mesh["dp_replicate", "dp_shard", "cp"]._flatten("dp_shard_cp_all")
    view = dp._unflatten(0, (d.data, d.fsdp * d.context), ("dp_replicate", "dp_shard_cp"))
    return view if d.data > 1 else view["dp_shard_cp"]


def apply_context_parallel(model: nn.Module, dims: ParallelDims, mesh: DeviceMesh, seq_len: int) -> None:
    """Make ``model`` (a :class:`~railtrain.trainer.model.Transformer` or a stage of it) run on this rank's chunks
    of every ``seq_len``-token sequence, with ring attention over the ``cp`` group. Nothing happens when ``cp = 1``."""
    if dims.cp > 1:
        model.use_context_parallel(Ring.of(mesh["cp"].get_group()), seq_len)


# The one buffer, the rotary table, is derived from the config and equal on every rank: no broadcast before each
# forward. torch 2.13 renamed the switch (``broadcast_buffers`` warns as deprecated); older torch knows only the old name.
_NO_FORWARD_BUFFER_SYNC = (
    {"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


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
        The module to call in the train step: ``model`` itself turned into an
        ``FSDPModule`` in place when :attr:`ParallelDims.uses_fsdp`; else a
        ``DistributedDataParallel`` (over ``dp_replicate``), or ``model``
        unchanged when there is a single data-parallel rank.
    """
    if not dims.uses_fsdp:
        if dims.degrees.data == 1:
            return model
        return DistributedDataParallel(
            model, process_group=mesh["dp_replicate"].get_group(), device_ids=[device.index] if device.type == "cuda" else None,
            **_NO_FORWARD_BUFFER_SYNC,
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
