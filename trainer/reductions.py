"""Reductions across the job's ranks after a step's backward: the gradient norm (with clipping) and the mean loss.

Both follow the layout of :class:`railtrain.trainer.parallel.ParallelDims`:
which ranks hold which gradients (DTensor shards under FSDP2 and tensor
parallel, one stage each under pipeline parallel) and which ranks hold a loss
that counts (one per data-parallel slice and context-parallel rank).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from railtrain.trainer.parallel import DistInfo, ParallelDims


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
