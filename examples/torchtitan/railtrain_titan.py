"""torchtitan 0.3.0's Trainer with railtrain's per-step health hook, verdicts and progress (examples/torchtitan/README.md).

torchtitan's extension points used: a config function named on the command line (``--module railtrain_titan
--config llama3_debugmodel``, torchtitan's ``ConfigManager``) returning the ``Config`` of a ``Trainer`` subclass
(torchtitan's ``Configurable``: ``config.build()`` constructs the subclass), which overrides ``train_step`` (begin and
end of a step), ``forward_backward_step`` (after the backward, before torchtitan's optimizer step) and ``train``
(the verdict writer around the loop). Everything else is torchtitan's own: model, FSDP/HSDP, loss, optimizer,
LR schedule, data, tokenizer, logging, its own checkpoints. Limits: no pipeline parallel, no gradient accumulation.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, fields

import railtrain.trainer as rt
import torch
from torch.distributed.tensor import DTensor
from torchtitan.models.llama3 import config_registry
from torchtitan.tools.utils import get_peak_flops
from torchtitan.trainer import Trainer


class RailtrainTrainer(Trainer):
    """torchtitan's Trainer plus railtrain: ``StepHook`` checks every step, ``exit_with_verdict`` ends the run."""

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        """torchtitan's ``Trainer.Config`` unchanged; ``build()`` makes a :class:`RailtrainTrainer`."""

    def __init__(self, config: Config) -> None:
        with rt.exit_with_verdict():  # a malformed contract variable: one sentence and exit code 2
            self.contract = rt.read_contract()
            super().__init__(config)
            pd = self.parallel_dims
            if pd.pp_enabled or self.gradient_accumulation_steps > 1:
                raise rt.ContractError("railtrain_titan re-executes one forward-backward per step: set parallelism.pipeline_parallel_degree=1 and training.global_batch_size=-1")
            degrees = {"pp": pd.pp, "dp_replicate": pd.dp_replicate, "dp_shard": pd.dp_shard, "cp": pd.cp, "tp": pd.tp}
            coordinates = [dict(zip(degrees, at)) for at in itertools.product(*map(range, degrees.values()))]  # torchtitan's mesh order
            self.loss_scale = pd.world_size // pd.tp  # torchtitan's local loss is this rank's share of the global mean
            tokens = config.training.local_batch_size * config.training.seq_len * pd.dp_replicate * pd.dp_shard
            flops = self.metrics_processor.num_flops_per_token
            peak = get_peak_flops(self.metrics_processor.device_memory_monitor.device_name)
            self.hook = rt.StepHook(self.model_parts[0], self.contract, total_steps=config.training.steps, tokens_per_step=tokens,
                                    flops_per_token=flops, peak_flops=peak, coordinates=coordinates)  # fmt: skip

    def train(self) -> None:
        """torchtitan's loop; a health finding or crash leaves its termination message and exit code."""
        try:
            with rt.exit_with_verdict(self.hook):
                super().train()
        finally:
            self.hook.close()

    def train_step(self, data_iterator) -> None:
        """One torchtitan step between the hook's ``begin_step`` and ``end_step``; prints the progress line."""
        start = time.perf_counter()
        self.hook.begin_step(self.step)
        super().train_step(data_iterator)
        self.hook.end_step(self.step, time.perf_counter() - start)
        if self.contract.rank == 0:
            print(f"step={self.step} loss={self.hook.loss:.4f}", flush=True)  # what `railtrain run --local` reads

    def forward_backward_step(self, **batch) -> torch.Tensor:
        """torchtitan's forward and backward, then the hook's check (re-running this batch on an anomaly)."""
        def rerun() -> torch.Tensor:
            self.optimizers.zero_grad()
            return super(RailtrainTrainer, self).forward_backward_step(**batch).detach() * self.loss_scale

        loss = super().forward_backward_step(**batch)
        self.hook.before_collective(self.step)
        norm = torch.nn.utils.get_total_norm([p.grad for m in self.model_parts for p in m.parameters() if p.grad is not None])
        norm = norm.full_tensor() if isinstance(norm, DTensor) else norm  # the global norm before torchtitan clips
        _, skip = self.hook.check(self.step, loss.detach() * self.loss_scale, norm, rerun)
        if skip:  # the batch is dropped: no gradients, so torchtitan's optimizer step leaves every parameter as it is,
            self.optimizers.zero_grad(set_to_none=True)
            return torch.zeros_like(loss)  # and torchtitan logs 0 (its own check would stop on a non-finite loss)
        return loss


def llama3_debugmodel() -> RailtrainTrainer.Config:
    """torchtitan's own ``llama3_debugmodel`` config (6.2 M parameters), trained by :class:`RailtrainTrainer`."""
    base = config_registry.llama3_debugmodel()
    return RailtrainTrainer.Config(**{f.name: getattr(base, f.name) for f in fields(base)})
