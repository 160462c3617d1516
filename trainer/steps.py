"""Forward and backward of one optimizer step: gradient accumulation, mixed precision, pipeline schedules.

:class:`ForwardBackward` leaves the step's gradients in ``.grad`` (averaged over
the data-parallel ranks by DDP or FSDP2, as if the whole global batch had run
in one process) and returns the rank's mean loss. Clipping and the optimizer
step are the caller's (:class:`railtrain.trainer.train.Trainer`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel

from railtrain.trainer.model import lm_loss

if TYPE_CHECKING:  # a type only: importing torch.distributed.pipelining costs every process torch._dynamo (trainer/pipeline.py)
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle


class ForwardBackward:
    """Runs one optimizer step's forwards and backwards on this rank's slice of the batch.

    Args:
        model: the module to call (DDP, an ``FSDPModule``, or plain; under
            pipeline parallel this rank's stage, driven by ``schedule``).
        accum_steps: gradient accumulation: the rank's batch is cut into this
            many equal parts, run one after the other, each loss scaled by
            ``1 / accum_steps``; DDP and FSDP2 synchronise gradients only
            after the last part.
        autocast: run forwards under ``torch.autocast(bfloat16)`` (used where
            FSDP2's ``MixedPrecisionPolicy`` does not do the casting).
        device_type: ``"cpu"`` or ``"cuda"``, for autocast.
        schedule: the pipeline schedule of this rank's stage, or ``None``.
        stage: pipeline stage index of this rank.
        stages: pipeline stages (1 without pipeline parallel).
        microbatches: pipeline micro-batches per accumulation part; the
            schedule's loss function must divide by ``microbatches * accum_steps``
            (see :meth:`pipeline_loss_fn`).
    """

    def __init__(
        self,
        model: nn.Module,
        accum_steps: int = 1,
        autocast: bool = False,
        device_type: str = "cpu",
        schedule: PipelineScheduleSingle | None = None,
        stage: int = 0,
        stages: int = 1,
        microbatches: int = 1,
    ) -> None:
        self.model = model
        self.accum_steps = accum_steps
        self.autocast = autocast
        self.device_type = device_type
        self.schedule = schedule
        self.stage = stage
        self.stages = stages
        self.microbatches = microbatches

    @staticmethod
    def pipeline_loss_fn(microbatches: int, accum_steps: int):
        """The loss of one pipeline micro-batch, scaled so that a step's micro-batch losses sum to its mean loss."""
        scale = 1.0 / (microbatches * accum_steps)

        def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return lm_loss(logits, targets) * scale

        return loss_fn

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast:
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce / reduce-scatter of every accumulation part but the last."""
        if isinstance(self.model, FSDPModule):
            self.model.set_requires_gradient_sync(last)
        elif isinstance(self.model, DistributedDataParallel) and not last:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward and backward over ``(inputs, targets)``, this rank's ``(local_batch, seq)`` token ids.

        Returns:
            The rank's mean loss (0-d, detached); 0 on pipeline stages other
            than the last, which never see the loss.
        """
        total = torch.zeros((), device=inputs.device)
        parts = zip(inputs.chunk(self.accum_steps), targets.chunk(self.accum_steps))
        for i, (x, y) in enumerate(parts):
            last = i == self.accum_steps - 1
            if self.schedule is not None:
                total += self._pipeline_part(x, y)
                continue
            with self._sync(last):
                with self._autocast():
                    loss = lm_loss(self.model(x), y) / self.accum_steps
                loss.backward()
            total += loss.detach()
        return total

    def _pipeline_part(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert self.schedule is not None
        losses: list[torch.Tensor] = []
        is_last = self.stage == self.stages - 1
        with self._autocast():
            if self.stage == 0:
                self.schedule.step(x)
            elif is_last:
                self.schedule.step(target=y, losses=losses)
            else:
                self.schedule.step()
        if not is_last:
            return torch.zeros((), device=x.device)
        return torch.stack([loss.detach().float() for loss in losses]).sum()
