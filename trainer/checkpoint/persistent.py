"""The persistent tier: one DCP checkpoint of all ranks per step in shared storage, reshardable to another world size.

Saving is two phases, data then manifests, driven by the manager
(:class:`~railtrain.trainer.checkpoint.manager.Checkpointer`): every rank DCP-saves
its part and checksums the files it wrote, then rank 0 writes the manifest
listing every file's checksum. Loading verifies every file's checksum (split
across ranks) and that the model's tensors fit before DCP loads anything.
Every method that takes a :class:`~railtrain.trainer.checkpoint.comm.Comm` must
be called by all ranks.

Imports: torch (DCP) and the package's lower modules: :mod:`.checksum`, :mod:`.comm`,
:mod:`.files`, :mod:`.report`, :mod:`.retention`, :mod:`.state`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

from railtrain.trainer.checkpoint import checksum
from railtrain.trainer.checkpoint.comm import Comm
from railtrain.trainer.checkpoint.files import GLOBAL_FORMAT, open_storage
from railtrain.trainer.checkpoint.report import TierResult, describe_error
from railtrain.trainer.checkpoint.retention import GOOD_KEY, newest_good, prune_plan
from railtrain.trainer.checkpoint.state import CheckpointMismatch, model_mismatch, saved_states_only


class PersistentTier:
    """The shared, reshardable tier: one DCP checkpoint per step, manifest by rank 0.

    Raises:
        ValueError: ``location`` is a URI fsspec cannot open.
    """

    name = "persistent"

    def __init__(self, location: str, interval: int, keep: int, rank: int, world_size: int) -> None:
        self.storage = open_storage(location)
        self.location, self.interval, self.keep = location, interval, keep
        self.rank, self.world_size = rank, world_size
        self._files: dict[str, dict[str, Any]] = {}

    def describe(self) -> str:
        """E.g. ``persistent(s3://b/x every 100 keep 2)``."""
        return f"{self.name}({self.location} every {self.interval} keep {self.keep})"

    # --- save ---
    def write_data(self, step: int, staged: dict[str, Any], comm: Comm) -> TierResult:
        """DCP-save ``staged`` into ``step`` and checksum every file (collective)."""
        result, start = TierResult(self.name), time.perf_counter()
        if self.rank == 0:
            self.storage.remove(step)  # a leftover of an earlier attempt must not mix with this one
        comm.barrier()
        writer = self.storage.writer(step)
        files: dict[str, dict[str, Any]] = {}
        err = ""
        try:
            dcp.save(staged, storage_writer=writer, process_group=comm.group, no_dist=not comm.distributed)
            names = list(getattr(writer, "written", [])) + ([".metadata"] if self.rank == 0 else [])
            for name in names:
                digest, size = self.storage.hash_file(step, name)
                files[name] = checksum.entry(digest, size)
        except Exception as exc:  # noqa: BLE001 - reported on every rank, never half-applied
            err = describe_error(exc)
        gathered = comm.all_gather((files, err))
        errors = [f"rank {r}: {e}" for r, (_, e) in enumerate(gathered) if e]
        self._files = {} if errors else {k: v for f, _ in gathered for k, v in f.items()}
        result.error = "; ".join(errors[:3])
        result.bytes = sum(v["bytes"] for v in files.values())
        result.seconds = time.perf_counter() - start
        return result

    def write_manifests(self, step: int, train: dict[str, int], layout: str) -> None:
        """Rank 0 writes the manifest, once every file has its checksum."""
        if self.rank == 0 and self._files:
            self.storage.mark_complete(
                step,
                {"format": GLOBAL_FORMAT, "step": step, "world_size": self.world_size, "layout": layout, "train": train, "files": self._files, "saved_at": time.time(),
                 GOOD_KEY: True},  # Checkpointer.save checked the state finite on every rank before staging it
            )
        self._files = {}

    def prune(self) -> list[int]:
        """Rank 0 deletes complete checkpoints beyond ``keep`` and older leftovers."""
        if self.rank != 0:
            return []
        series = {s: self.storage.is_complete(s) for s in self.storage.list_steps()}
        good = newest_good([s for s, ok in series.items() if ok], self.storage.read_manifest)
        doomed = prune_plan(series, self.keep, good)
        for step in doomed:
            self.storage.remove(step)
        return doomed

    # --- load ---
    def claims(self) -> dict[int, dict[str, Any]]:
        """Rank 0's view: ``{step: manifest}`` of every complete checkpoint (other ranks: ``{}``)."""
        if self.rank != 0:
            return {}
        return {s: m for s in self.storage.list_steps() if (m := self.storage.read_manifest(s))}

    def _check_fits(self, step: int, template: dict[str, Any], comm: Comm) -> None:
        """Raise :class:`CheckpointMismatch` on every rank when ``step``'s model tensors do not fit ``template``'s (collective).

        DCP alone would raise a ``CheckpointException`` for a tensor the checkpoint lacks and
        silently skip one this model lacks (a deeper model's extra layers).
        """
        shapes = {k: tuple(v.shape) for k, v in template.get("model", {}).items() if isinstance(v, torch.Tensor)}
        union: dict[str, tuple[int, ...]] = {}
        for part in comm.all_gather(shapes):  # pipeline stages hold different layers
            union.update(part)
        problem = ""
        if comm.rank == 0:
            try:
                metadata = self.storage.reader(step).read_metadata()
                saved = {k.removeprefix("model."): tuple(m.size) for k, m in metadata.state_dict_metadata.items() if k.startswith("model.") and hasattr(m, "size")}
                problem = model_mismatch(union, saved)
            except Exception:  # noqa: BLE001 - unreadable metadata is dcp.load's to report, with its own words
                pass
        problem = comm.all_gather(problem)[0]
        if problem:
            raise CheckpointMismatch(
                f"the persistent checkpoint at {self.location} (step {step}) does not fit this model: {problem}; "
                "it was written by another model (preset, layers or shapes): point spec.checkpoint.location (--checkpoint-dir) "
                "at this model's checkpoints, or move that one away to start this model from scratch"
            )

    def try_load(self, step: int, template: dict[str, Any], manifest: dict[str, Any], comm: Comm) -> tuple[dict[str, Any] | None, TierResult]:
        """Verify every file's checksum (split across ranks), then DCP-load into ``template`` (collective).

        Raises:
            CheckpointMismatch: the checkpoint's model tensors do not fit this model (on every rank).
        """
        result, start = TierResult(self.name), time.perf_counter()
        files = sorted(manifest["files"])
        errors = []
        for name in files[comm.rank :: comm.world_size]:
            want = manifest["files"][name]
            algorithm, _ = checksum.expected(want)
            if not algorithm:
                errors.append(f"{name} has no checksum in its manifest")
                continue
            try:
                digest, size = self.storage.hash_file(step, name, algorithm)
            except OSError as err:
                errors.append(f"{name} unreadable ({err.strerror or err})")
                continue
            if problem := checksum.mismatch(want, digest, size, algorithm):
                errors.append(f"{name} {problem}")
        all_errors = [e for errs in comm.all_gather(errors) for e in errs]
        if all_errors:
            result.error = f"{self.name} step {step}: " + "; ".join(all_errors[:3])
            return None, result
        self._check_fits(step, template, comm)
        if "states" in template:  # only the loop's stateful objects this checkpoint holds (DCP refuses a missing key)
            keys = self.storage.reader(step).read_metadata().state_dict_metadata if comm.rank == 0 else {}
            held = comm.all_gather([n for n in template["states"] if any(k == f"states.{n}" or k.startswith(f"states.{n}.") for k in keys)])[0]
            template = saved_states_only(template, held)
        dcp.load(template, storage_reader=self.storage.reader(step), process_group=comm.group, no_dist=not comm.distributed)
        result.bytes = sum(v["bytes"] for v in manifest["files"].values()) // comm.world_size
        result.seconds = time.perf_counter() - start
        return template, result
