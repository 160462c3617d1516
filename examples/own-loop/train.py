"""A plain PyTorch training loop (DDP over gloo or NCCL) made railtrain-aware: the lines marked ``# railtrain``.

The model is a small MLP built from code and the data are synthetic regression batches drawn from a seeded
generator per (step, rank), so the stream is stateless and resumes exactly: nothing is downloaded.
Run alone (``python train.py --steps 20``), under torchrun, or as a TrainingJob (see README.md).
"""

from __future__ import annotations

import argparse
import time

import railtrain.trainer as rt  # railtrain
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

FEATURES, HIDDEN, BATCH = 16, 64, 32


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step``: inputs ``(BATCH, FEATURES)`` and targets ``(BATCH, 1)``."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(BATCH, FEATURES, generator=g)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def train(args: argparse.Namespace, contract: rt.Contract) -> None:
    device = torch.device("cuda", contract.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) if contract.distributed else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    hook = rt.StepHook(ddp, contract, total_steps=args.steps, tokens_per_step=BATCH * contract.world_size, optimizer=optimizer)  # railtrain
    ckpt = rt.JobCheckpointer(ddp, optimizer, contract, phase=hook.phase, observe=hook.metrics.observe_checkpoint)  # railtrain
    step = ckpt.resume()["step"]  # railtrain
    try:
        with rt.exit_with_verdict(hook):  # railtrain: a finding or crash leaves its verdict and exit code
            while step < args.steps:
                t0 = time.perf_counter()
                step = hook.begin_step(step + 1)  # railtrain (with replica groups: the quorum's step, after a heal)
                if step > args.steps:
                    break
                x, y = (t.to(device) for t in batch(step, contract.rank))

                def forward_backward(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                    optimizer.zero_grad(set_to_none=True)
                    loss = nn.functional.mse_loss(ddp(x), y)
                    loss.backward()
                    return loss.detach()

                loss = forward_backward()
                hook.average_gradients()  # railtrain (replica groups: the gradients averaged over the groups)
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                mean_loss, skip = hook.check(step, loss, grad_norm, forward_backward)  # railtrain
                if not skip:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if not hook.committed:  # railtrain (replica groups: a group failed mid-step; run it again)
                    step -= 1
                    continue
                hook.end_step(step, time.perf_counter() - t0)  # railtrain
                if contract.rank == 0:
                    print(f"step={step} loss={mean_loss:.4f}", flush=True)
                if hook.writes_checkpoints:  # railtrain (replica groups: one group writes)
                    ckpt.save(step, args.steps)  # railtrain
            ckpt.wait()  # railtrain
    finally:
        hook.close()  # railtrain
        ckpt.close()  # railtrain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    contract = rt.read_contract()  # railtrain: world, ranks, node, tiers, health settings (ContractError if malformed)
    if contract.distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        train(args, contract)
        if contract.rank == 0:
            print(f"done step={args.steps}", flush=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    with rt.exit_with_verdict():  # railtrain: a bad contract variable is one sentence and exit code 2
        main()
