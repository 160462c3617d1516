"""Context-parallel parity worker: run under ``torchrun --nproc-per-node 4``; writes what it measured as JSON.

Every rank builds the trainer's own parts (``build_mesh``, ``build_model``,
``ForwardBackward``, ``build_optimizer``, ``clip_grad_norm_``, ``mean_loss``,
``WindowSampler``) for each layout of :data:`LAYOUTS` in turn, in one process
group, and trains :data:`STEPS` steps of the ``tiny`` preset in float32 on
real text; rank 0 also trains the same steps alone, with no parallelism at all
(the reference). Rank 0 writes, per layout, the loss of every step and the
largest absolute difference of every gradient (gathered whole) from the
reference's at steps 1 and :data:`STEPS`, and the elements of parameters and
optimizer state each rank holds (its local shards) against the model's. The test
(``test_context_parallel.py``) compares; this file asserts nothing.

    torchrun --standalone --nproc-per-node 4 tests/trainer/cpkit.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from railtrain.crds.parallel import Degrees
from railtrain.trainer.config import TrainConfig
from railtrain.trainer.data import ByteCorpus, WindowSampler
from railtrain.trainer.parallel import ParallelDims, build_mesh, init_distributed
from railtrain.trainer.reductions import clip_grad_norm_, mean_loss
from railtrain.trainer.steps import ForwardBackward
from railtrain.trainer.train import build_model, build_optimizer, lr_at

STEPS = 20
WORLD = 4
LAYOUTS = {
    # name: (data, fsdp, tensor, pipeline, context)
    "cp4": (1, 1, 1, 1, 4),
    "data2-x-cp2": (2, 1, 1, 1, 2),
    "fsdp2-x-cp2": (1, 2, 1, 1, 2),
    "cp2-x-tp2": (1, 1, 2, 1, 2),
}
"""Every layout with context > 1 that fits 4 processes (HSDP × CP needs 8: data 2 × fsdp 2 × context 2)."""
CONFIG = dict(data="pkg://email/*.py", preset="tiny", seq_len=64, batch_size=8, warmup_steps=8, lr=1e-3, threads=1, mixed_precision="fp32")


def full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient as a whole tensor (DTensor shards gathered), by parameter name without wrapper prefixes."""
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        if isinstance(g, DTensor):
            g = g.full_tensor()
        out[name.removeprefix("module.")] = g.detach().clone()
    return out


def local_elements(tensors) -> int:
    """Elements this rank stores of ``tensors`` (a DTensor counts its local shard)."""
    return sum((t.to_local() if isinstance(t, DTensor) else t).numel() for t in tensors if isinstance(t, torch.Tensor))


def train(dims: ParallelDims | None, rank: int, info, corpus: ByteCorpus) -> tuple[list[float], dict[int, dict[str, torch.Tensor]], dict[str, int]]:
    """``STEPS`` steps of one layout (``dims=None``: one process alone); the mean loss of each step, the gradients at steps 1
    and ``STEPS``, and the elements this rank holds: ``{"params": local, "optimizer": local AdamW state, "full": the model's}``."""
    config = TrainConfig(**CONFIG)
    if dims is None:
        dims, mesh = ParallelDims(Degrees(), 1), None
        sampler = WindowSampler(corpus, config.seq_len, config.batch_size, config.seed)
    else:
        mesh = build_mesh(dims, "cpu")
        sampler = WindowSampler(corpus, config.seq_len, config.batch_size, config.seed, dims.dp_rank(rank), dims.dp_degree, dims.cp_rank(rank), dims.cp)
    model = build_model(config, dims, info, False, mesh)
    run = ForwardBackward(model)
    optimizer = build_optimizer(model, config)
    losses, grads = [], {}
    for step in range(1, STEPS + 1):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        inputs, targets = sampler.batch(step)
        loss = run(inputs, targets)
        clip_grad_norm_([p for p in model.parameters() if p.requires_grad], config.grad_clip)
        losses.append(mean_loss(loss, dims, info).item() if mesh is not None else loss.item())
        if step in (1, STEPS):
            grads[step] = full_grads(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    held = {
        "params": local_elements(model.parameters()),
        "optimizer": local_elements(v for state in optimizer.state.values() for k, v in state.items() if k != "step"),
        "full": sum(p.numel() for p in model.parameters()),
    }
    return losses, grads, held


def main(out_path: str) -> None:
    torch.set_num_threads(1)
    info = init_distributed("cpu")
    corpus = ByteCorpus.load(CONFIG["data"])
    ref_losses, ref_grads, _ = train(None, info.rank, info, corpus) if info.rank == 0 else ([], {}, {})
    results = {}
    for name, degrees in LAYOUTS.items():
        dims = ParallelDims(Degrees(*degrees), WORLD, WORLD)
        losses, grads, held = train(dims, info.rank, info, corpus)
        every = [None] * WORLD
        dist.all_gather_object(every, held)
        if info.rank == 0:
            diffs = {str(step): max((grads[step][k] - ref_grads[step][k]).abs().max().item() for k in ref_grads[step] if k in grads[step]) for step in grads}
            names = sorted(set(grads[1]) ^ set(ref_grads[1]))  # parameters only one side has (none expected)
            results[name] = {"layout": dims.describe(), "losses": losses, "grad_max_abs_diff": diffs, "unmatched_parameters": names, "held": every}
        dist.barrier()
    if info.rank == 0:
        results["reference"] = {"losses": ref_losses, "grad_max_abs": {str(s): max(g.abs().max().item() for g in ref_grads[s].values()) for s in ref_grads}}
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
