"""Pipeline parallel with ``torch.distributed.pipelining``: split the blocks into stages, run a schedule.

Each of the ``pp`` ranks of a pipeline group keeps a contiguous run of
transformer blocks (the first stage also the embedding, the last also the
final norm and the output head) and drops the rest, so parameter names stay
those of the whole model. A step splits the rank's batch into ``m``
micro-batches and runs them through the stages with one of two schedules:

* ``gpipe``: all forwards, then all backwards (Huang et al. 2019, "GPipe");
  activations of all ``m`` micro-batches are held at once.
* ``1f1b``: after a warm-up, one forward then one backward (Narayanan et al.
  2019, "PipeDream"; Megatron-LM's non-interleaved schedule); at most ``pp``
  micro-batches in flight, so less activation memory for the same bubble.

Both idle each stage for ``pp - 1`` of ``m + pp - 1`` micro-batch slots: the
bubble fraction ``(pp - 1) / (m + pp - 1)`` (Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
section 2.2), which the trainer logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
from torch import nn
from torch.distributed import ProcessGroup

if TYPE_CHECKING:  # torch.distributed.pipelining imports torch._dynamo (about 2.5 s per process on these CPUs): only a pipeline job pays it
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from railtrain.trainer.dims import auto_microbatches  # noqa: F401  (re-exported: its home is torch-free)

SCHEDULES = ("gpipe", "1f1b")
"""``--pp-schedule`` values and their torch schedule classes."""


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Which blocks each of ``pp`` stages owns: contiguous, sizes differing by at most one (earlier stages take the extra).

    Raises:
        ValueError: ``pp`` is not in ``[1, n_layers]``.
    """
    if not 1 <= pp <= n_layers:
        raise ValueError(f"--pp {pp} must be between 1 and the number of blocks {n_layers}")
    base, extra = divmod(n_layers, pp)
    out, start = [], 0
    for stage in range(pp):
        size = base + (stage < extra)
        out.append(range(start, start + size))
        start += size
    return out


def bubble_fraction(pp: int, microbatches: int) -> float:
    """Idle fraction of a GPipe or 1F1B step: ``(pp - 1) / (microbatches + pp - 1)`` (0 without pipeline parallel)."""
    return (pp - 1) / (microbatches + pp - 1)


def keep_stage(model: nn.Module, stage: int, pp: int) -> nn.Module:
    """Drop, in place, every part of ``model`` that pipeline stage ``stage`` of ``pp`` does not run; return ``model``."""
    owned = stage_layers(len(model.layers), pp)[stage]
    for name in list(model.layers.keys()):
        if int(name) not in owned:
            del model.layers[name]
    if stage > 0:
        model.tok_embeddings = None
    if stage < pp - 1:
        model.norm = None
        model.output = None
    return model


def build_schedule(
    module: nn.Module,
    stage: int,
    pp: int,
    device: torch.device,
    group: ProcessGroup,
    schedule: str,
    microbatches: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> PipelineScheduleSingle:
    """The schedule that runs this rank's stage.

    Args:
        module: the stage's module (after :func:`keep_stage`, tensor parallel
            and data-parallel wrapping).
        group: the ``pp`` dimension's process group.
        schedule: one of :data:`SCHEDULES`.
        microbatches: micro-batches per ``step()``.
        loss_fn: ``(logits, targets) -> loss`` of one micro-batch, already
            scaled so that the sum over the step's micro-batches (and over
            gradient-accumulation steps) is the mean; the schedule's own
            scaling is off (``scale_grads=False``).

    Raises:
        ValueError: an unknown schedule, or fewer micro-batches than stages
            for 1F1B.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"--pp-schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if microbatches < pp:
        raise ValueError(f"--pp-microbatches {microbatches} must be at least --pp {pp} (every stage needs work)")
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe  # here, not at the top: see the import note above

    pipeline_stage = PipelineStage(module, stage, pp, device, group=group)
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    return kind(pipeline_stage, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=False)
