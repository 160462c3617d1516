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

    Every module of a ``blocks`` type (the built-in model's attention and MLP), one by one: inside an FSDP unit, so
    the unit's all-gather (its pre-forward) stays outside the window. A model without such blocks (a user's own) is
    timed as a whole, and under DDP that is the wrapped module (``.module``): DDP's own forward may broadcast buffers
    from rank 0, a wait on a peer that would make every rank look as slow as a slow rank 0 and hide it. (A user's
    FSDP-sharded model is timed with its all-gathers inside; docs/library.md.) The hooks cost 0.09–0.17 ms a forward
    on the ``tiny`` preset's 8 blocks, mostly PyTorch's module-call path with hooks (docs/bench-hook.md).

    Args:
        model: the model the loop calls (DDP-wrapped, FSDP2-sharded or plain).
        blocks: the module types timed one by one.

    Returns:
        The modules to hook, at least one.
    """
    found = [m for m in model.modules() if isinstance(m, blocks)]
    if found:
        return found
    return [model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model]


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
