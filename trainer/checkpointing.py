"""Checkpoints of any loop's model and optimizer in the job's tiers (public: :class:`JobCheckpointer`).

Part of the library surface :mod:`railtrain.trainer` (docs/library.md). It wraps the trainer's own
:class:`~railtrain.trainer.checkpoint.Checkpointer` (docs/checkpoints.md): the tiers the pod contract turns on
(memory with a copy on the next node, node-local disk, persistent DCP that reshards), saves staged to CPU and
written in the background, xxh3 checksums verified before anything is restored, each tier's retention, and the
resume rule (the newest complete and valid step in any tier, the fastest tier first, node-local shards only of
this run). States holding NaN or infinity are never saved (``NonFiniteState``).

Imports: torch, the trainer's checkpoint package and :mod:`railtrain.trainer.pod_contract`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from railtrain.crds.process import say
from railtrain.trainer.checkpoint import Checkpointer, Observer, TierConfig
from railtrain.trainer.pod_contract import Contract, read_contract
from torch import nn


class JobCheckpointer:
    """Saves and resumes a model, its optimizer, a few integers (the step, a data cursor) and any other stateful
    objects of the loop (``states``) in the job's tiers.

    Every rank constructs it (a collective when distributed) and calls :meth:`resume` and :meth:`save` at the same
    steps. Without any tier (no ``RAILTRAIN_CHECKPOINT*_DIR``) every method is a no-op: :attr:`enabled` is ``False``.

    Args:
        model: the model (plain, DDP or FSDP2; ``torch.distributed.checkpoint.state_dict`` reads it).
        optimizer: its optimizer.
        contract: the pod contract; default: read now.
        tiers: override the contract's tiers (fastest first); default: ``contract.tiers``.
        layout: the run's parallel layout, e.g. ``"ddp world=4"``: node-local shards load only into the layout that
            saved them (the persistent tier reshards); default ``"world=<world size>"``.
        async_save: write in a background thread after staging (the loop blocks only for the copy to CPU).
        log: prints a line (default: stdout on rank 0); observe: metrics callback
            (:data:`~railtrain.trainer.checkpoint.Observer`, e.g. ``StepHook.metrics.observe_checkpoint``).
        phase: called as ``phase(step, "checkpoint")`` before a save (e.g. ``StepHook.phase``, so the hang watchdog
            allows a save its longer deadline).
        run_id: the run that owns the node-local tiers (their shards of another run are never loaded); default:
            the contract's ``RAILTRAIN_RUN_ID``.
        states: other objects of the loop saved and resumed with the model, by name: anything with
            ``state_dict()``/``load_state_dict()`` whose state holds tensors, numbers, strings and plain containers
            (an LR scheduler, a ``torchdata`` ``StatefulDataLoader``). A checkpoint saved without one of these names
            does not fit (passed over like another model's).

    Raises:
        ContractError: the contract is read here and a variable is missing or malformed (named).
        ValueError: a persistent location fsspec cannot open.
    """

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, contract: Contract | None = None, *,
        tiers: tuple[TierConfig, ...] | None = None, layout: str = "", async_save: bool = True,
        log: Callable[[str], None] | None = None, observe: Observer | None = None,
        phase: Callable[[int, str], None] | None = None, run_id: str | None = None, states: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.contract = c = contract or read_contract()
        self.model, self.optimizer, self.phase = model, optimizer, phase
        self.states = dict(states or {})
        self.log = log or ((lambda line: say(line, sys.stdout)) if c.rank == 0 else (lambda line: None))
        chosen = [t for t in (c.tiers if tiers is None else tiers) if t.enabled]
        self.enabled = bool(chosen)
        self.step = 0
        """The step of the state the model holds: the resumed one after :meth:`resume`, the saved one after :meth:`save`."""
        self.checkpointer: Checkpointer | None = None
        if not chosen:
            return
        cuda = any(p.is_cuda for p in model.parameters())
        self.checkpointer = Checkpointer(
            chosen, rank=c.rank, world_size=c.world_size, local_world_size=c.local_world_size,
            distributed=dist.is_available() and dist.is_initialized(), layout=layout or f"world={c.world_size}",
            async_save=async_save, cuda=cuda, log=self.log, observe=observe, hold_step=c.faults.hold_checkpoint_step, run_id=c.run_id if run_id is None else run_id,
        )  # fmt: skip

    def resume(self, extra: Mapping[str, int] | None = None) -> dict[str, int]:
        """Load the newest complete and valid checkpoint, if any, into the model and optimizer (every rank).

        Args:
            extra: other integers saved with the step (names and current values, e.g. ``{"epoch": 0}``).

        Returns:
            ``{"step": N, **extra}`` as saved, or ``{"step": 0, **extra}`` unchanged when no tier holds one.

        Raises:
            CheckpointMismatch: the checkpoint was written by another model (a tensor missing, extra, or reshaped).
            NonFiniteState: every checkpoint left holds NaN or infinite values.
        """
        current = {"step": 0, **(extra or {})}
        if self.checkpointer is None:
            return current
        saved = self.checkpointer.load_latest(self.model, self.optimizer, current, self.states)
        if saved is None:
            return current
        self.step = saved["step"]
        self.log(f"resumed from step {self.step} ({self.checkpointer.loaded_from})")
        return saved

    @property
    def loaded_from(self) -> str:
        """After a :meth:`resume` that loaded a step: ``"tier <name>, <why>"`` (what had to be skipped); else ``""``."""
        return self.checkpointer.loaded_from if self.checkpointer else ""

    @property
    def loaded_tier(self) -> str | None:
        """After a :meth:`resume` that loaded a step: the name of its tier (``memory``, ``local``, ``persistent``); else ``None``."""
        tier = self.checkpointer.loaded_tier if self.checkpointer else None
        return tier.name if tier is not None else None

    def start_over_hint(self, step: int) -> str:
        """Where the resumed ``step`` lives, for a "nothing to train" line: the persistent location (delete it to start
        over), or the node-local tier of this run (another run id starts over)."""
        return self.checkpointer.start_over_hint(step) if self.checkpointer else f"the checkpoint tiers already hold step {step}"

    def release_node_tiers(self, step: int) -> str:
        """After a run that succeeded at ``step`` and :meth:`wait`: empty the node-local tiers when the persistent tier
        holds ``step`` complete, else keep them (the only copy). Every rank calls (collectives).

        Returns:
            One line for the log (``""`` without node-local tiers or any tier).
        """
        return self.checkpointer.release_node_tiers(step) if self.checkpointer else ""

    def due(self, step: int, last_step: int) -> list[str]:
        """The tiers that save after ``step`` of a run to ``last_step`` (each on its interval, all at the last step)."""
        return self.checkpointer.due(step, last_step) if self.checkpointer else []

    def save(self, step: int, last_step: int, extra: Mapping[str, int] | None = None) -> list[str]:
        """Checkpoint ``step`` to the tiers that are due (every rank calls, after the optimizer step).

        Args:
            step: the step just finished (>= 1); last_step: the run's last step (always saved).
            extra: other integers to save with it (the same names at every save).

        Returns:
            The names of the tiers written (``[]`` when none is due).

        Raises:
            NonFiniteState: the parameters or optimizer state hold NaN or infinity on some rank (nothing is saved).
            RuntimeError: the previous background save failed outright.
        """
        due = self.due(step, last_step)
        if not due or self.checkpointer is None:
            return []
        if self.phase is not None:
            self.phase(step, "checkpoint")
        blocked = self.checkpointer.save(step, self.model, self.optimizer, {"step": step, **(extra or {})}, last_step, self.states)
        self.step = step
        self.log(f"checkpoint step={step} tiers={','.join(due)} blocked_s={blocked:.3f}")
        return due

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the save in flight (call before the process ends, so the last save completes).

        Args:
            timeout: seconds to wait at most (None: until it ends); a save still running then stays in flight.

        Raises:
            RuntimeError: it failed outright.
        """
        if self.checkpointer is not None:
            self.checkpointer.wait(timeout)

    def close(self) -> None:
        """Release staging buffers (idempotent; a save in flight is abandoned and never gets its manifests)."""
        if self.checkpointer is not None:
            self.checkpointer.close()
            self.checkpointer = None
