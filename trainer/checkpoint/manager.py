"""The checkpoint manager the training loop uses: :class:`Checkpointer` saves in the background and resumes from the fastest valid copy.

Saving step N (every rank calls :meth:`Checkpointer.save` when a tier is due):
wait for the previous save (one in flight at a time), copy the state into CPU
RAM, and return; a background thread then serializes this rank's shard once
(one xxh3-128 checksum, computed while it is written), writes it to the due node-local tiers, swaps copies with the
neighbouring nodes, DCP-saves the persistent tier and checksums its files, and
only then writes every manifest and applies each tier's retention. A process
killed at any point leaves steps without manifests, which are never loaded.

Resuming (:meth:`Checkpointer.load_latest`): every rank lists the manifests it
can reach; the candidates are the steps complete in some tier, newest first,
the fastest tier first for the same step. Each candidate is verified
(checksums of every file or shard that would be read) before anything is
restored; a missing or corrupt shard makes it fall back to a copy on the
neighbouring node, the same step in a slower tier, or an older step, and rank
0 logs each decision.

Imports: torch, :mod:`railtrain.crds.contract` (a variable's name in a log line) and
every lower module of the package; nothing imports it but the package's ``__init__``.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from railtrain.crds import contract
from railtrain.trainer.checkpoint.comm import Comm
from railtrain.trainer.checkpoint.files import SHARD_FORMAT
from railtrain.trainer.checkpoint.persistent import PersistentTier
from railtrain.trainer.checkpoint.report import SaveReport, TierResult
from railtrain.trainer.checkpoint.retention import GOOD_KEY, is_good, should_save
from railtrain.trainer.checkpoint.shards import ShardTier, ShardWriter
from railtrain.trainer.checkpoint.state import NonFiniteState, Stager, nonfinite_tensors, plain_tensors, to_local
from railtrain.trainer.checkpoint.tiers import Tier, TierConfig, build_tiers, node_size

Observer = Callable[[str, str, float, int], None]
"""``observe(event, tier, seconds, bytes)`` with event ``"save"``, ``"load"`` or ``"blocked"``."""


class Checkpointer:
    """Saves and restores a run's state across its tiers.

    Args:
        tiers: the job's tiers (any order, each name at most once; :func:`~railtrain.trainer.checkpoint.tiers.build_tiers`).
        rank, world_size: this process's place in the job.
        local_world_size: processes per node (ranks are node-major), for the memory tier's peers.
        distributed: whether a process group is up; the constructor is then a
            collective (it creates the checkpoint group).
        layout: the run's parallel layout, e.g. ``"fsdp data=1 fsdp=4 world=4"``;
            per-rank shards load only into the layout they were saved from.
        async_save: write in a background thread after staging.
        cuda: the state lives on a GPU (pinned staging buffers).
        log: prints a line on rank 0 (the caller decides; called from the writer thread too).
        observe: metrics callback (:data:`Observer`).
        hold_step: fault injection: the writer of this step stops before its manifests.
        run_id: the run that owns the node-local tiers (``RAILTRAIN_RUN_ID``): written into their
            manifests, and their shards of another run are never loaded (``""``: no identity, any).

    Raises:
        ValueError: tier names outside ``memory``, ``local``, ``persistent`` or repeated; a persistent
            location fsspec cannot open.
    """

    def __init__(
        self, tiers: list[TierConfig], *, rank: int, world_size: int, local_world_size: int, distributed: bool, layout: str,
        async_save: bool = True, cuda: bool = False, log: Callable[[str], None] = lambda line: None,
        observe: Observer | None = None, hold_step: int | None = None, run_id: str = "",
    ) -> None:  # fmt: skip
        self.tiers: list[Tier] = build_tiers(tiers, rank, world_size, local_world_size)
        self.rank, self.world_size, self.layout = rank, world_size, layout
        self.async_save, self.log, self.hold_step, self.run_id = async_save, log, hold_step, run_id
        self.observe = observe or (lambda *a: None)
        self.local_world_size = node_size(world_size, local_world_size)
        self.comm = Comm.start(distributed)
        self.stager = Stager(cuda)
        self.shard_writer = ShardWriter()
        self._thread: threading.Thread | None = None
        self._outcome: SaveReport | BaseException | None = None
        self.loaded_from: str = ""
        """After a resume: ``"tier <name>"`` plus what had to be skipped."""
        self.loaded_tier: Tier | None = None
        """After a resume: the tier the state came from."""

    @property
    def interval(self) -> int:
        """The shortest interval of any tier."""
        return min(t.interval for t in self.tiers)

    def describe(self) -> str:
        """One line for the log: the tiers and whether saves are asynchronous."""
        return " ".join(t.describe() for t in self.tiers) + (" async" if self.async_save else " sync")

    def due(self, step: int, last_step: int) -> list[str]:
        """Names of the tiers that save after ``step``."""
        return [t.name for t in self.tiers if should_save(step, t.interval, last_step)]

    def _state(self, model: nn.Module, optimizer: torch.optim.Optimizer, train: Mapping[str, int], states: Mapping[str, Any] | None = None) -> dict[str, Any]:
        model_sd, optim_sd = plain_tensors(get_state_dict(model, optimizer))
        state = {"model": model_sd, "optim": optim_sd, "train": {k: torch.tensor(v, dtype=torch.int64) for k, v in train.items()}}
        if states:  # other stateful objects of the loop (an LR scheduler, a data loader): absent without any
            state["states"] = {name: obj.state_dict() for name, obj in states.items()}
        return state

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        # DCP warns on every single-process save/load that it assumes no_dist, even when asked for it.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is .*unavailable or uninitialized")
            warnings.filterwarnings("ignore", message="Detected an existing checkpoint")
            warnings.filterwarnings("ignore", message="fsync not supported for this stream")  # object stores: a put is durable
            yield

    # --- save -----------------------------------------------------------------------

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, train: Mapping[str, int], last_step: int,
             states: Mapping[str, Any] | None = None) -> float:  # fmt: skip
        """Checkpoint ``step`` to the tiers that are due (every rank must call).

        ``states``: other objects with ``state_dict()``/``load_state_dict()`` saved beside the model (their
        ``state_dict`` holds tensors, numbers, strings and plain containers), by name.

        Returns:
            Seconds the caller was blocked: waiting for the previous save,
            staging, and with ``async_save=False`` the whole write.

        Raises:
            RuntimeError: the previous background save failed outright.
        """
        tiers = [t for t in self.tiers if should_save(step, t.interval, last_step)]
        if not tiers:
            return 0.0
        start = time.perf_counter()
        self.wait()
        state = self._state(model, optimizer, train, states)
        self._refuse_nonfinite(step, state, "saving")
        staged = self.stager.stage(state)
        job = (step, staged, dict(train), tiers)
        if self.async_save:
            self._thread = threading.Thread(target=self._run, args=job, name=f"checkpoint-{step}", daemon=True)
            self._thread.start()
        else:
            self._run(*job)
            self._raise_failure()
        blocked = time.perf_counter() - start
        self.observe("blocked", "", blocked, 0)
        return blocked

    def _refuse_nonfinite(self, step: int, state: dict[str, Any], doing: str) -> None:
        """Raise :class:`NonFiniteState` on every rank when any rank's part of ``state`` holds a NaN or an infinity.

        Each rank checks the local shards it writes (:func:`nonfinite_tensors`); the ranks agree with one
        all-reduce on the checkpoint group, which no background save is using (:meth:`save` waited for it).
        """
        bad = nonfinite_tensors({"model": state["model"], "optim": state["optim"]})
        ranks = self.comm.ranks_where(bool(bad))
        if not ranks:
            return
        names = self.comm.all_gather(bad)  # a second collective only on this path, which every rank takes
        tensors = {str(r): names[r] for r in ranks}
        first = names[ranks[0]][0]
        raise NonFiniteState(
            f"step {step}: the parameters or optimizer state hold NaN or infinite values on rank(s) {ranks} (e.g. {first}); "
            f"not {doing} them", step, {"ranks": ranks, "tensors": tensors},
        )  # fmt: skip

    def wait(self, timeout: float | None = None) -> SaveReport | None:
        """Wait for the save in flight, if any; returns its report.

        Args:
            timeout: seconds to wait at most (None: until it ends); a save still running then is left in flight and
                None is returned.

        Raises:
            RuntimeError: it failed outright (per-tier I/O errors are only logged).
        """
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return None
            self._thread = None
        return self._raise_failure()

    def _raise_failure(self) -> SaveReport | None:
        outcome, self._outcome = self._outcome, None
        if isinstance(outcome, BaseException):
            raise RuntimeError(f"checkpoint save failed: {type(outcome).__name__}: {outcome}") from outcome
        return outcome

    def _run(self, step: int, staged: dict[str, Any], train: dict[str, int], tiers: list[Tier]) -> None:
        try:
            with self._quiet():
                self._outcome = self._write(step, staged, train, tiers)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by wait()
            self._outcome = exc

    def _write(self, step: int, staged: dict[str, Any], train: dict[str, int], tiers: list[Tier]) -> SaveReport:
        start = time.perf_counter()
        results: list[TierResult] = []
        shard_tiers = [t for t in tiers if isinstance(t, ShardTier)]
        if shard_tiers:
            manifest = {"format": SHARD_FORMAT, "step": step, "rank": self.rank, "world_size": self.world_size, "layout": self.layout, "run": self.run_id, "train": train, "saved_at": time.time(),
                        GOOD_KEY: True}  # save() checked the state finite on every rank before staging it
            results.extend(self.shard_writer.write(shard_tiers, step, to_local(staged), manifest, self.comm))
        for tier in tiers:
            if isinstance(tier, PersistentTier):
                results.append(tier.write_data(step, staged, self.comm))
        if step == self.hold_step:
            self.log(f"checkpoint step={step}: holding before the manifests ({contract.ENV_FAULT_HOLD_CHECKPOINT_STEP})")
            threading.Event().wait()  # until the process is killed
        for tier in tiers:
            if isinstance(tier, PersistentTier):
                tier.write_manifests(step, train, self.layout)
            else:
                tier.write_manifests(step)
        for tier in tiers:
            tier.prune()
        errors = [e for errs in self.comm.all_gather([f"{r.tier}: {r.error}" for r in results if r.error]) for e in errs]
        report = SaveReport(step, results, errors, time.perf_counter() - start)
        for r in results:
            self.observe("save", r.tier, r.seconds, r.bytes)
        failed = {e.split(":", 1)[0] for e in errors}
        for r in results:
            state = "failed" if r.tier in failed else "complete"
            self.log(f"checkpoint step={step} tier={r.tier} {state} seconds={r.seconds:.3f} bytes={r.bytes}")
        for e in errors:
            self.log(f"checkpoint step={step} warning: {e}")
        return report

    # --- load -----------------------------------------------------------------------

    def load_latest(self, model: nn.Module, optimizer: torch.optim.Optimizer, train: Mapping[str, int],
                    states: Mapping[str, Any] | None = None) -> dict[str, int] | None:  # fmt: skip
        """Restore the newest complete and valid checkpoint reachable in any tier (every rank must call).

        ``train`` gives the keys (and current values) of the integers saved
        alongside; ``states`` the other stateful objects saved with :meth:`save` (the same names: a checkpoint
        without them does not fit and is passed over). Sets :attr:`loaded_from`.

        Returns:
            The saved ``train`` integers, or ``None`` when no tier holds a usable checkpoint.
        """
        self.log(f"checkpoint: tiers {self.describe()}")
        gathered = self.comm.all_gather({t.name: t.claims() for t in self.tiers})
        candidates = self._candidates(gathered)
        if not candidates:
            return None
        # Built only now: get_state_dict gives the optimizer its state (a zero step), which a fresh run must not have.
        template = self._state(model, optimizer, train, states)
        rejected: list[str] = []
        poisoned: NonFiniteState | None = None
        for step, index in sorted(candidates, key=lambda c: (-c[0], c[1])):
            tier = self.tiers[index]
            with self._quiet():
                if isinstance(tier, ShardTier):
                    state, result = tier.try_load(step, template, [g[tier.name] for g in gathered], self.comm)
                else:
                    state, result = tier.try_load(step, template, gathered[0][tier.name][step], self.comm)
            if state is None:
                self.log(f"checkpoint: rejected {result.error}; falling back")
                rejected.append(f"{tier.name} step {step}")
                continue
            try:
                self._refuse_nonfinite(step, state, "resuming from")
            except NonFiniteState as err:  # written before saves were checked: never resumed
                self.log(f"checkpoint: rejected {tier.name} {err}; falling back")
                rejected.append(f"{tier.name} step {step} (not finite)")
                poisoned = poisoned or err
                continue
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
            for name, obj in (states or {}).items():
                if name in state.get("states", {}):
                    obj.load_state_dict(state["states"][name])
                else:
                    self.log(f"checkpoint: step {step} holds no {name!r} state (saved before the loop passed it): it keeps its own")
            self.loaded_tier = tier
            self.observe("load", tier.name, result.seconds, result.bytes)
            why = "newest complete step" if not rejected else f"after rejecting {', '.join(rejected)}"
            self.loaded_from = f"tier {tier.name}, {why}" + "".join(f"; {n}" for n in result.notes)
            self.log(f"checkpoint: loaded step {step} from {tier.name} ({why}) seconds={result.seconds:.3f} bytes={result.bytes}")
            return {k: int(v.item()) for k, v in state["train"].items()}
        if poisoned is not None:
            # A rejected persistent step was loaded in place into the live tensors: there is no fresh state to start from.
            raise NonFiniteState(
                f"no checkpoint to resume from holds a finite state ({', '.join(rejected)}); they were saved before saves were "
                "checked for NaN and infinity: delete them to start over", poisoned.step, poisoned.evidence,
            )  # fmt: skip
        self.log(f"checkpoint: no valid copy of any step ({', '.join(rejected)}); starting from scratch")
        optimizer.state.clear()  # as fresh as a run that found nothing
        return None

    def _candidates(self, gathered: list[dict[str, Any]]) -> list[tuple[int, int]]:
        """The steps to try, as ``(step, tier index)``, from every rank's claims; logs what each tier has and what it ignores.

        A per-rank tier offers the steps whose shards every rank can reach (:meth:`ShardTier.candidates`); the
        persistent tier the steps of rank 0's manifests not marked bad.
        """
        candidates: list[tuple[int, int]] = []
        found = []
        for index, tier in enumerate(self.tiers):
            views = [g[tier.name] for g in gathered]
            if isinstance(tier, ShardTier):
                steps, notes = tier.candidates(views, self.layout, self.run_id)
                for note in notes:
                    self.log(f"checkpoint: ignored {note}")
            else:
                steps = sorted((s for s, m in views[0].items() if is_good(m) is not False), reverse=True)
            found.append(f"{tier.name}={steps}")
            candidates += [(step, index) for step in steps]
        if candidates:
            self.log(f"checkpoint: complete steps {' '.join(found)}")
        return candidates

    def start_over_hint(self, step: int) -> str:
        """Where the resumed step lives and how to start over: names the tier's own place, never another's.

        A persistent checkpoint is deleted to start over; a node-local one belongs to this run
        (:attr:`run_id`), so a new run id starts over without deleting anything.
        """
        tier = self.loaded_tier
        if isinstance(tier, PersistentTier):
            return f"{tier.location} already holds step {step}"
        if tier is None:
            return f"the checkpoint tiers already hold step {step}"
        owner = f" of run {self.run_id}" if self.run_id else ""
        return f"the {tier.name} tier{owner} (rank 0's shards in {tier.root}) already holds step {step}"

    def release_node_tiers(self, step: int) -> str:
        """The cleanup policy of a run that succeeded at ``step`` (every rank must call, after :meth:`wait`).

        The node-local tiers (memory, local) are emptied when the persistent tier holds a complete
        checkpoint of ``step``: the run is over, and a later run of the same job resumes from the
        persistent copy. Without one they are kept (they are the only copy of the trained state).
        A failed run never gets here, so its node-local tiers stay for its next gang.

        Returns:
            One line for the log (``""`` when there are no node-local tiers).
        """
        shard_tiers = [t for t in self.tiers if isinstance(t, ShardTier)]
        persistent = next((t for t in self.tiers if isinstance(t, PersistentTier)), None)
        if not shard_tiers:
            return ""
        names = ", ".join(t.name for t in shard_tiers)
        held = self.comm.all_gather(persistent is not None and self.rank == 0 and persistent.storage.is_complete(step))[0]
        if not held:
            why = "no persistent tier" if persistent is None else f"the persistent tier has no complete step {step}"
            return f"checkpoint: kept the {names} tier(s) of this run at step {step} ({why}: they hold the only copy)"
        self.comm.barrier()  # every rank is done reading and writing them
        removed = 0
        for tier in shard_tiers:
            try:
                removed += tier.clear(all_ranks=self.rank % self.local_world_size == 0)
            except OSError as err:
                self.log(f"checkpoint: could not empty the {tier.name} tier: {err}")
        total = sum(self.comm.all_gather(removed))
        return f"checkpoint: removed the {names} tier(s) of this run ({total} shard(s)): the run succeeded and {persistent.location} holds step {step}"

    def close(self) -> None:
        """Release staging buffers (a save still in flight is abandoned: it never gets its manifests)."""
        self.stager.close()
