"""Data parallelism: degrees (pure arithmetic), process group, mesh, wrapping.

Two modes over one code path, gloo on CPU and nccl on CUDA:

* ``ddp``: ``DistributedDataParallel`` over a 1-D ``("dp_replicate",)`` mesh.
* ``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) on each transformer
  block, then on the root, over ``("dp_shard",)``, or over the 2-D mesh
  ``("dp_replicate", "dp_shard")`` (HSDP) when the pod asks for both
  ``data>1`` and ``fsdp>1``. This is torchtitan's ``apply_fsdp`` layout.

Without torchrun the trainer runs as one plain process and nothing is wrapped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from railtrain.crds import contract


@dataclass(frozen=True)
class ParallelDims:
    """Data-parallel degrees of a job; ``data * fsdp == world_size``.

    Attributes:
        mode: ``"ddp"`` or ``"fsdp"``.
        data: replicas (DDP ranks, or HSDP replica groups).
        fsdp: ranks each parameter is sharded over (1 for DDP).
        world_size: processes in the job.
    """

    mode: str
    data: int
    fsdp: int
    world_size: int

    def __post_init__(self) -> None:
        if self.mode not in ("ddp", "fsdp"):
            raise ValueError(f"parallel mode must be ddp or fsdp, got {self.mode!r}")
        if self.data < 1 or self.fsdp < 1:
            raise ValueError(f"parallel degrees must be >= 1, got data={self.data} fsdp={self.fsdp}")
        if self.data * self.fsdp != self.world_size:
            raise ValueError(f"data={self.data} x fsdp={self.fsdp} does not equal the world size {self.world_size}")
        if self.mode == "ddp" and self.fsdp != 1:
            raise ValueError(f"ddp needs fsdp=1, got fsdp={self.fsdp}")

    @property
    def dp_degree(self) -> int:
        """Ranks that each get a different slice of the batch (all of them: no tensor/pipeline parallelism)."""
        return self.data * self.fsdp

    def describe(self) -> str:
        """One line for the log, e.g. ``fsdp data=1 fsdp=4 world=4``."""
        return f"{self.mode} data={self.data} fsdp={self.fsdp} world={self.world_size}"


def resolve_dims(flag_mode: str | None, pod_degrees: dict[str, int], world_size: int) -> ParallelDims:
    """Decide the degrees from ``--parallel``, else the pod's parallelism, else DDP.

    Args:
        flag_mode: ``"ddp"``, ``"fsdp"`` or ``None`` (flag not given). A flag
            uses every rank for its mode and overrides the pod.
        pod_degrees: ``contract.parse_parallelism`` output (``{}`` if none);
            ``fsdp > 1`` selects FSDP2, HSDP when ``data > 1`` too.
        world_size: processes in the job (torch.distributed's world size).

    Raises:
        ValueError: the pod asks for tensor or pipeline parallelism (not
            implemented) or its degrees do not multiply to the world size; the
            message names the environment variable.
    """
    if flag_mode == "fsdp":
        return ParallelDims("fsdp", 1, world_size, world_size)
    if flag_mode == "ddp" or not pod_degrees:
        return ParallelDims("ddp", world_size, 1, world_size)
    env = contract.ENV_PARALLELISM
    for name in ("tensor", "pipeline"):
        if pod_degrees.get(name, 1) != 1:
            raise ValueError(f"{env} asks for {name}={pod_degrees[name]}, but this trainer only does data parallelism (ddp/fsdp)")
    data, fsdp = pod_degrees.get("data", 1), pod_degrees.get("fsdp", 1)
    if data * fsdp != world_size:
        raise ValueError(f"{env} data={data} x fsdp={fsdp} does not match the world size {world_size}")
    return ParallelDims("fsdp" if fsdp > 1 else "ddp", data, fsdp, world_size)


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
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    distributed: bool


def init_distributed(device_type: str) -> DistInfo:
    """Join the process group when launched by torchrun; otherwise run alone.

    Args:
        device_type: ``"cpu"`` (gloo) or ``"cuda"`` (nccl, with gloo for CPU tensors).

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
    dist.init_process_group(backend=backend, device_id=device if device_type == "cuda" else None)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device, True)


def shutdown_distributed() -> None:
    """Destroy the default process group if one exists (safe to call twice)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def build_mesh(dims: ParallelDims, device_type: str) -> DeviceMesh:
    """The data-parallel ``DeviceMesh``: 1-D for DDP or plain FSDP, 2-D for HSDP."""
    if dims.mode == "ddp":
        return init_device_mesh(device_type, (dims.data,), mesh_dim_names=("dp_replicate",))
    if dims.data == 1:
        return init_device_mesh(device_type, (dims.fsdp,), mesh_dim_names=("dp_shard",))
    return init_device_mesh(device_type, (dims.data, dims.fsdp), mesh_dim_names=("dp_replicate", "dp_shard"))


def apply_data_parallel(model: nn.Module, dims: ParallelDims, mesh: DeviceMesh, device: torch.device, bf16: bool) -> nn.Module:
    """Wrap ``model`` (already on ``device``, identically initialised on every rank) for ``dims``.

    Args:
        model: a :class:`railtrain.trainer.model.Transformer`.
        bf16: FSDP2 only: gather parameters in bfloat16 and reduce gradients in
            float32 (DDP uses autocast in the train step instead).

    Returns:
        The module to call in the train step: a ``DistributedDataParallel``, or
        ``model`` itself turned into an ``FSDPModule`` in place.
    """
    if dims.mode == "ddp":
        return DistributedDataParallel(
            model, process_group=mesh.get_group(), device_ids=[device.index] if device.type == "cuda" else None
        )
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    n_blocks = len(model.layers)
    for i, block in enumerate(model.layers):
        # The last block's parameters are needed right away by backward, so keep them gathered.
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < n_blocks - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def all_reduce_mean(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Average a scalar tensor over all ranks (identity when running alone); returns a new tensor."""
    out = value.detach().clone()
    if info.distributed and info.world_size > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        out /= info.world_size
    return out
