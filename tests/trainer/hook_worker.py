"""One rank of tests/trainer/test_hook_distributed.py, run by torchrun (2 gloo processes): StepHook.after_forward.

Writes ``<out>/rank<r>.json``: per step, the mean loss check returned, every rank's local loss (gathered apart
from the hook), and the compute seconds per rank the straggler check received.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import railtrain.trainer as rt
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ddp = DistributedDataParallel(model)
    hook = rt.StepHook(ddp, serve_metrics=False)
    steps = []
    for step in (1, 2, 3):
        hook.begin_step(step)
        x = torch.full((2, 4), float(rank + step))
        loss = ddp(x).pow(2).mean()
        hook.after_forward(step, loss)
        hook.after_forward(step, loss * 100)  # a second call for the step does nothing
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
        given = loss if step != 2 else torch.tensor(1e6)  # step 2: check averages the loss given to after_forward
        mean, skip = hook.check(step, given, grad_norm)
        if rank == 0:
            hook.after_forward(step, loss)  # after the step's check: does nothing (a collective here would hang rank 1)
        locals_: list[float] = [0.0] * dist.get_world_size()
        dist.all_gather_object(locals_, float(loss))
        if not skip:
            torch.optim.SGD(model.parameters(), lr=0.01).step()
        model.zero_grad()
        hook.end_step(step, 0.01)
        steps.append({"step": step, "mean": mean, "locals": locals_, "times": hook.monitor.last_times, "skip": skip})
    hook.close()
    (out / f"rank{rank}.json").write_text(json.dumps(steps))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
