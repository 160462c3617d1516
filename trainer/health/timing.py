"""Compute timing of one rank: forward hooks on every block's attention and MLP.

:class:`ComputeTiming` is a part of :class:`~railtrain.trainer.health.monitor.HealthMonitor`
(a mixin over its state: ``device``, ``injector``, ``progress``, ``forward_s``, ``spent_s``,
``_events``, ``_t0``); the monitor registers the hooks and reads :meth:`ComputeTiming.compute_seconds`
for the straggler check.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn


def timed_modules(model: nn.Module, blocks: tuple[type[nn.Module], ...]) -> list[nn.Module]:
    """The modules whose forward is timed as this rank's compute for the straggler check.

    A model with sharded parameters (any ``DTensor``: FSDP2, tensor parallel) is timed block by block (every module
    of a ``blocks`` type), so that an FSDP unit's all-gather, which runs in the unit's pre-forward, stays outside the
    window. Any other model (plain or DDP, its blocks or a user's own modules) holds no collective inside its
    forward, so it is timed as a whole: the module under a DDP wrapper (``.module``; DDP's own forward, which may
    broadcast buffers, stays outside). One pair of hooks a step instead of a pair per block: on the ``tiny``
    preset (8 blocks) that took about 0.1 ms of a 95 ms step on 2 gloo ranks (docs/bench-hook.md).

    Args:
        model: the model the loop calls (DDP-wrapped, FSDP2-sharded or plain).
        blocks: the module types timed one by one when the parameters are sharded.

    Returns:
        The modules to hook (at least one: ``model`` itself when a sharded model has no such block).
    """
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, DTensor) for p in model.parameters()):
        return [m for m in model.modules() if isinstance(m, blocks)] or [model]
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    return [inner]


class ComputeTiming:
    """The forward hooks that time a rank's compute and apply injected slowdowns and activation faults."""

    # -- hooks ------------------------------------------------------------------------------
    # Compute time is the forward time of every block's attention and MLP: inside an FSDP unit (its
    # all-gather runs in the unit's pre-forward, outside this window) and free of DDP's buffer
    # broadcast and gradient all-reduce, so a rank's time is its own, not its wait for others.
    # Tensor-parallel collectives run inside these modules, so under TP a slow rank slows its TP
    # peers' figures too and the whole TP group stands out (docs/health.md). On GPU the time is
    # CUDA-event time; on CPU it is the process's CPU time (time.process_time), not wall time, because
    # on a shared host the wall clock mostly measures other processes' load (docs/bench-health.md).
    def _pre_compute(self, module: nn.Module, args: Any) -> None:
        w0 = time.perf_counter()
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self._events.append((start, None))
        self._t0 = self._clock()
        self.spent_s += time.perf_counter() - w0

    def _post_compute(self, module: nn.Module, args: Any, output: Any) -> None:
        w0 = time.perf_counter()
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events[-1] = (self._events[-1][0], end)
        factor = self.injector.slowdown()
        if factor > 1:  # a slower device: stretch the section, burning the device (here: CPU) time it would
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            elapsed = self._clock() - self._t0
            spin_until = self._clock() + elapsed * (factor - 1)
            while self._clock() < spin_until:
                pass
        self.forward_s += self._clock() - self._t0
        if factor <= 1:
            self.spent_s += time.perf_counter() - w0

    def _clock(self) -> float:
        return time.perf_counter() if self.device.type == "cuda" else time.process_time()

    def _post_forward(self, module: nn.Module, args: Any, output: Any) -> Any:
        out = self.injector.after_forward(output) if isinstance(output, torch.Tensor) else output
        self.progress.mark(self.progress.step, "backward")
        return out

    def compute_seconds(self) -> float:
        """This step's compute seconds so far (CUDA event times on GPU: one synchronisation)."""
        if self.device.type != "cuda":
            return self.forward_s
        torch.cuda.synchronize(self.device)
        return sum(a.elapsed_time(b) for a, b in self._events if b is not None) / 1000.0
