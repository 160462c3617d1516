"""Fault injection for the health checks (off unless a ``RAILTRAIN_FAULT_*`` variable is set).

Each fault models a failure the detectors must catch (docs/health.md, "Fault injection"):

- bit flip (:data:`~railtrain.crds.contract.ENV_FAULT_BITFLIP`): ``target=param`` flips a bit
  of this rank's parameter bytes at the step (the replicas now disagree); ``target=activation``
  flips a bit of the model's output in that step's first forward only (a transient compute
  error: re-executing the step gives a different answer); the element is the first at or after
  ``index`` that the flip makes larger (:func:`raising_element`). ``mode=persistent`` also marks the
  device as bad from that step on: every later known-answer test on the rank is corrupted too,
  as a unit that keeps computing wrong would.
- slow: every timed compute section (each block's attention and MLP forward) of the rank takes
  ``factor`` times its measured time (a straggler).
- hang: ``compute`` sleeps forever at the end of the step's forward; ``collective`` sleeps
  forever just before the step's first collective after the backward pass.
- hang ``init``: sleeps forever before joining the process group (:func:`hang_before_init`).
- kill: SIGKILL to itself at the end of the step's compute.
- bad batch: the step's output is NaN on every forward, re-executions included (a data problem).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

import torch
from torch import nn

from railtrain.crds import contract
from railtrain.crds.process import say
from railtrain.trainer.health.fingerprint import flip_bit


def raising_element(t: torch.Tensor, start: int, bit: int) -> int:
    """The first element at or after ``start`` (flattened, wrapping) that is >= 0 and has bit ``bit`` clear,
    so flipping it raises the value (``start`` itself if none): a flip that lowers a logit is
    usually harmless, and an injected fault is meant to be seen."""
    flat = t.detach().reshape(-1)
    words = flat.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])
    ok = ((flat >= 0) & ((words >> bit) & 1 == 0)).nonzero().reshape(-1)
    if ok.numel() == 0:
        return start % flat.numel()
    after = ok[ok >= start % flat.numel()]
    return int(after[0] if after.numel() else ok[0])


def sleep_forever(what: str, log: Callable[[str], None]) -> None:
    """Block this thread for good (other threads, like the watchdog, keep running)."""
    log(what)
    while True:
        time.sleep(3600)


def hang_before_init(faults: contract.Faults, rank: int, log: Callable[[str], None] | None = None) -> None:
    """The ``kind=init`` hang fault: block this rank for good before it joins the process group (its peers then
    wait in the process group's set-up). Called by the trainer before ``init_process_group``; returns at once otherwise.

    Args:
        faults: the run's faults; rank: this process's global rank (torchrun's ``RANK``).
    """
    hang = faults.hang
    if hang is not None and hang.kind == "init" and hang.rank in (rank, -1):
        sleep_forever(f"fault: rank {rank} never joins the process group", log or say)


class FaultInjector:
    """Applies :class:`~railtrain.crds.contract.Faults` to one rank.

    Args:
        faults: the run's faults (from :func:`~railtrain.crds.contract.read_faults`).
        rank: this global rank.
        log: where to announce an injected fault (stderr of every rank).

    Attributes:
        group: this process's replica group (``spec.faultTolerance``; -1 without): a fault naming a ``group`` fires
            only in that group.
    """

    def __init__(self, faults: contract.Faults, rank: int, log: Callable[[str], None] | None = None) -> None:
        self.faults, self.rank = faults, rank
        self.group = -1
        self.log = log or say
        self.step = 0
        self.forwards = 0  # forwards run in this step (a re-execution is the second)

    def _mine(self, fault: Any) -> bool:
        return fault is not None and getattr(fault, "rank", -1) in (self.rank, -1) and getattr(fault, "group", -1) in (self.group, -1)

    def begin_step(self, step: int, model: nn.Module) -> None:
        """Called before the step's compute: the parameter bit flip happens here."""
        self.step, self.forwards = step, 0
        f = self.faults.bitflip
        if self._mine(f) and f.target == "param" and step == f.step:
            name, param = next(iter(model.named_parameters()))
            flip_bit(param.data, f.index, f.bit)
            self.log(f"fault: rank {self.rank} flipped bit {f.bit} of element {f.index} of {name} at step {step} ({f.mode})")

    def device_bad(self) -> bool:
        """Whether a persistent bit-flip fault has made this rank's device bad by now."""
        f = self.faults.bitflip
        return self._mine(f) and f.mode == "persistent" and self.step >= f.step

    def corrupt_known_answer(self, result: torch.Tensor) -> None:
        """The known-answer test's corruption on a bad device (see :meth:`device_bad`)."""
        if self.device_bad():
            f = self.faults.bitflip
            flip_bit(result, f.index, f.bit)

    def slowdown(self) -> float:
        """The factor every timed compute section of this step is stretched by (1: none)."""
        slow = self.faults.slow
        return slow.factor if self._mine(slow) and self.step >= slow.from_step else 1.0

    def after_forward(self, output: torch.Tensor) -> torch.Tensor:
        """Called with the model's output at the end of each forward; returns the (possibly corrupted) output."""
        self.forwards += 1
        step = self.step
        hang = self.faults.hang
        if self._mine(hang) and step == hang.step and hang.kind == "compute":
            sleep_forever(f"fault: rank {self.rank} hangs in compute at step {step}", self.log)
        f = self.faults.bitflip
        if self._mine(f) and f.target == "activation" and (step == f.step and self.forwards == 1 or f.mode == "persistent" and step >= f.step):
            output = output.clone()
            with torch.no_grad():
                index = raising_element(output, f.index, f.bit)
                flip_bit(output, index, f.bit)
            self.log(f"fault: rank {self.rank} flipped bit {f.bit} of output element {index} at step {step}")
        bad = self.faults.bad_batch
        if self._mine(bad) and step == bad.step:
            output = output * float("nan")
        return output

    def before_collective(self) -> None:
        """Called after the step's forward/backward, before its next collective."""
        hang = self.faults.hang
        if self._mine(hang) and self.step == hang.step and hang.kind == "collective":
            sleep_forever(f"fault: rank {self.rank} never enters the next collective at step {self.step}", self.log)
        kill = self.faults.kill
        if self._mine(kill) and self.step == kill.step:
            self.log(f"fault: rank {self.rank} kills itself at step {self.step}")
            os.kill(os.getpid(), signal.SIGKILL)
