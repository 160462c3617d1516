"""Checkpoints: DCP save/load of model + optimizer + train state, behind a small storage protocol.

Layout: ``<dir>/step-<N>/`` holds one ``torch.distributed.checkpoint`` (DCP)
checkpoint, written collectively by all ranks (each writes its own shards), and
then, once ``dcp.save`` has returned on rank 0 (DCP's coordinator writes the
``.metadata`` file after every rank's writes are done), the marker
:data:`MANIFEST`. A ``step-<N>/`` without the marker is a save that was cut
short and is never loaded. Checkpoints hold sharded state (``get_state_dict``),
so a job can resume with another world size or parallel mode.

"Should I save now", "which one do I resume from" and "what do I delete" are
pure functions of step numbers, tested with a fake :class:`CheckpointStorage`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import warnings
from typing import Iterator, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

MANIFEST = "railtrain-complete.json"
"""Written last into ``step-<N>/``; its presence is what makes a checkpoint complete."""

_STEP_DIR = re.compile(r"step-(\d+)\Z")


class CheckpointStorage(Protocol):
    """Where checkpoints live; the only part of this module that touches files besides DCP itself."""

    def list_steps(self) -> list[int]:
        """Steps that have a ``step-<N>`` directory, complete or not, ascending."""
        ...

    def is_complete(self, step: int) -> bool:
        """Whether ``step``'s checkpoint has its completion marker."""
        ...

    def mark_complete(self, step: int, manifest: dict) -> None:
        """Write the completion marker of ``step`` atomically."""
        ...

    def remove(self, step: int) -> None:
        """Delete ``step``'s checkpoint (missing is fine)."""
        ...

    def path(self, step: int) -> str:
        """The DCP ``checkpoint_id`` (a directory path) of ``step``."""
        ...


class LocalStorage:
    """:class:`CheckpointStorage` on a local (or mounted) directory; ``file://`` prefixes are stripped."""

    def __init__(self, root: str) -> None:
        self.root = root.removeprefix("file://")

    def path(self, step: int) -> str:
        """``<root>/step-<step>``."""
        return os.path.join(self.root, f"step-{step}")

    def list_steps(self) -> list[int]:
        """Steps with a ``step-<N>`` directory under the root, ascending (``[]`` if the root is missing)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        steps = (_STEP_DIR.match(n) for n in names)
        return sorted(int(m.group(1)) for m in steps if m and os.path.isdir(os.path.join(self.root, m.group(0))))

    def is_complete(self, step: int) -> bool:
        """Whether ``step-<step>/`` holds :data:`MANIFEST`."""
        return os.path.isfile(os.path.join(self.path(step), MANIFEST))

    def mark_complete(self, step: int, manifest: dict) -> None:
        """Write :data:`MANIFEST` via a temporary file and ``os.replace`` so it is never half-written."""
        final = os.path.join(self.path(step), MANIFEST)
        tmp = final + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(manifest, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)

    def remove(self, step: int) -> None:
        """Delete ``step-<step>/`` and everything in it."""
        shutil.rmtree(self.path(step), ignore_errors=True)


def should_save(step: int, interval: int, last_step: int) -> bool:
    """Save after ``step`` if it is a multiple of ``interval`` or the last step of the run."""
    return step % interval == 0 or step == last_step


def latest_complete(storage: CheckpointStorage) -> int | None:
    """The newest step with a complete checkpoint, or ``None``."""
    complete = [s for s in storage.list_steps() if storage.is_complete(s)]
    return complete[-1] if complete else None


def steps_to_prune(storage: CheckpointStorage, keep: int) -> list[int]:
    """Checkpoints to delete once the newest complete one exists.

    Returns:
        Complete checkpoints beyond the ``keep`` newest (none if ``keep == 0``),
        plus incomplete ones older than the newest complete one (leftovers of
        an interrupted save). Incomplete ones newer than it are left alone.
    """
    steps = storage.list_steps()
    complete = [s for s in steps if storage.is_complete(s)]
    if not complete:
        return []
    newest = complete[-1]
    old_complete = complete[:-keep] if keep else []
    stale = [s for s in steps if s < newest and s not in complete]
    return sorted(old_complete + stale)


class Checkpointer:
    """Saves and restores a run's state at step boundaries.

    Args:
        storage: where checkpoints go.
        interval: steps between saves (see :func:`should_save`).
        keep: newest complete checkpoints to keep (0 keeps all).
        rank: this process's global rank; rank 0 writes markers and deletes.
        distributed: whether a process group is up (collectives are used then).
    """

    def __init__(self, storage: CheckpointStorage, interval: int, keep: int, rank: int, distributed: bool) -> None:
        self.storage = storage
        self.interval = interval
        self.keep = keep
        self.rank = rank
        self.distributed = distributed

    def _state(self, model: nn.Module, optimizer: torch.optim.Optimizer, train: dict[str, int]) -> dict:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd, "train": {k: torch.tensor(v, dtype=torch.int64) for k, v in train.items()}}

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        # DCP warns on every single-process save/load that it assumes no_dist, even when asked for it.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is .*unavailable or uninitialized")
            yield

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, train: dict[str, int]) -> float:
        """Save collectively (every rank must call), mark complete, prune.

        Args:
            train: integers to restore with the weights, e.g. ``{"step": 10, "data_seed": 0}``.

        Returns:
            Seconds the save took on this rank.
        """
        start = time.perf_counter()
        with self._quiet():
            dcp.save(self._state(model, optimizer, train), checkpoint_id=self.storage.path(step), no_dist=not self.distributed)
        if self.rank == 0:
            self.storage.mark_complete(step, {"step": step, "train": train, "saved_at": time.time()})
            for old in steps_to_prune(self.storage, self.keep):
                self.storage.remove(old)
        return time.perf_counter() - start

    def _agree_on_latest(self) -> int | None:
        """Rank 0 picks the newest complete checkpoint, removes newer partial ones, and tells everyone."""
        choice: list[int | None] = [None]
        if self.rank == 0:
            choice[0] = latest_complete(self.storage)
            for step in self.storage.list_steps():
                if (choice[0] is None or step > choice[0]) and not self.storage.is_complete(step):
                    self.storage.remove(step)  # cut short; this run will write it again
        if self.distributed:
            dist.broadcast_object_list(choice, src=0)
        return choice[0]

    def load_latest(self, model: nn.Module, optimizer: torch.optim.Optimizer, train: dict[str, int]) -> dict[str, int] | None:
        """Restore the newest complete checkpoint into ``model`` and ``optimizer`` in place.

        Every rank must call this. ``train`` gives the keys (and current values)
        of the integers saved alongside.

        Returns:
            The saved ``train`` integers, or ``None`` when there is no complete checkpoint.
        """
        step = self._agree_on_latest()
        if step is None:
            return None
        state = self._state(model, optimizer, train)
        with self._quiet():
            dcp.load(state, checkpoint_id=self.storage.path(step), no_dist=not self.distributed)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return {k: int(v.item()) for k, v in state["train"].items()}
