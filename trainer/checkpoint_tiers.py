"""The checkpoint tiers, and the collectives they run on.

* :class:`~railtrain.trainer.checkpoint_shards.ShardTier` (``memory`` and
  ``local``, in :mod:`~railtrain.trainer.checkpoint_shards`): each rank's own
  shard in a node-local directory, the memory tier with a copy on the next node;
* :class:`PersistentTier`: one DCP checkpoint of all ranks in shared storage,
  reshardable to another world size;
* :class:`Comm`, :class:`Peers`, :class:`TierResult`: what both kinds share.

Saving is two phases, data then manifests, driven by
:class:`railtrain.trainer.checkpoint.Checkpointer`; loading is one collective
``try_load`` per candidate step that verifies every checksum before anything is
restored. Every method that takes a :class:`Comm` must be called by all ranks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from railtrain.trainer import checkpoint_checksum as checksum
from railtrain.trainer.checkpoint_files import GLOBAL_FORMAT, GOOD_KEY, is_good, newest_good, open_storage, prune_plan
from railtrain.trainer.checkpoint_io import ShardBuffer
from railtrain.trainer.checkpoint_state import CheckpointMismatch, model_mismatch

SWAP_CHUNK = 16 << 20
"""Bytes per message of a memory-tier copy: the receiver hashes one chunk while the next arrives."""


class Comm:
    """Collectives of the checkpoint code on a group of its own.

    A background save runs collectives while the step loop runs its own; on a
    separate gloo group (as torchtitan does for async checkpoints) the two
    never interleave. In a single process every collective is local.
    """

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group = group
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def start(cls, distributed: bool) -> "Comm":
        """A new gloo group over all ranks (collective) or the single-process stand-in."""
        if not distributed:
            return cls(None, 0, 1)
        return cls(dist.new_group(backend="gloo"), dist.get_rank(), dist.get_world_size())

    @property
    def distributed(self) -> bool:
        """Whether there is a group."""
        return self.group is not None

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def ranks_where(self, flag: bool) -> list[int]:
        """The ranks whose ``flag`` is true, agreed by every rank with one all-reduce of a world-size vector."""
        if not self.distributed:
            return [0] if flag else []
        v = torch.zeros(self.world_size, dtype=torch.int64)
        v[self.rank] = int(flag)
        dist.all_reduce(v, group=self.group)
        return [r for r, x in enumerate(v.tolist()) if x]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.distributed:
            dist.barrier(group=self.group)

    def exchange(self, sends: dict[int, bytes | bytearray | memoryview], recvs: list[int]) -> dict[int, bytearray]:
        """Point-to-point byte messages: ``sends[dst]`` to each ``dst``, one message from each rank in ``recvs``.

        The peers' calls must match (``r`` in my ``recvs`` iff I am in ``r``'s ``sends``).
        """
        if not sends and not recvs:
            return {}
        sizes_out = {dst: torch.tensor([len(data)], dtype=torch.int64) for dst, data in sends.items()}
        sizes_in = {src: torch.zeros(1, dtype=torch.int64) for src in recvs}
        self._wait([dist.isend(t, dst, group=self.group) for dst, t in sizes_out.items()] + [dist.irecv(t, src, group=self.group) for src, t in sizes_in.items()])
        bufs = {src: bytearray(int(t.item())) for src, t in sizes_in.items()}
        outgoing = {dst: torch.frombuffer(data if not isinstance(data, bytes) else bytearray(data), dtype=torch.uint8) for dst, data in sends.items() if len(data)}
        incoming = {src: torch.frombuffer(buf, dtype=torch.uint8) for src, buf in bufs.items() if len(buf)}
        self._wait([dist.isend(t, dst, group=self.group) for dst, t in outgoing.items()] + [dist.irecv(t, src, group=self.group) for src, t in incoming.items()])
        return bufs

    def swap(self, dst: int, payload: memoryview, src: int, into: ShardBuffer, on_chunk: Callable[[memoryview], None], chunk: int = SWAP_CHUNK) -> int:
        """Send ``payload`` to ``dst`` while receiving ``src``'s into ``into``, in chunks (the peers' calls must match:
        I send to ``dst`` iff ``dst`` receives from me).

        ``on_chunk`` gets each received chunk in order while the following ones
        arrive (gloo moves them on its own threads), so writing and hashing the
        copy overlap the transfer.

        Returns:
            The number of bytes received.
        """
        sizes = torch.tensor([payload.nbytes], dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
        self._wait([dist.isend(sizes[0], dst, group=self.group), dist.irecv(sizes[1], src, group=self.group)])
        size = int(sizes[1].item())
        into.reset(size).size = size
        view = into.view()
        out = torch.frombuffer(payload, dtype=torch.uint8) if payload.nbytes else torch.empty(0, dtype=torch.uint8)
        inc = torch.frombuffer(view, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
        sends = [dist.isend(out[i : i + chunk], dst, group=self.group, tag=k) for k, i in enumerate(range(0, payload.nbytes, chunk))]
        recvs = [(dist.irecv(inc[i : i + chunk], src, group=self.group, tag=k), i) for k, i in enumerate(range(0, size, chunk))]
        for work, i in recvs:
            work.wait()
            on_chunk(view[i : i + chunk])
        self._wait(sends)
        return size

    @staticmethod
    def _wait(works: list[Any]) -> None:
        for work in works:
            work.wait()


@dataclass(frozen=True)
class Peers:
    """Which rank holds whose memory-tier copy: same local rank, next node (ranks are node-major, as torchrun numbers them)."""

    world_size: int
    local_world_size: int

    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return self.world_size // self.local_world_size

    def dst(self, rank: int) -> int:
        """The rank that keeps ``rank``'s copy."""
        return (rank + self.local_world_size) % self.world_size

    def src(self, rank: int) -> int:
        """The rank whose copy ``rank`` keeps."""
        return (rank - self.local_world_size) % self.world_size


@dataclass
class TierResult:
    """One tier's part of a save or load on this rank."""

    tier: str
    seconds: float = 0.0
    bytes: int = 0
    error: str = ""
    notes: list[str] = field(default_factory=list)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


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
            err = _describe(exc)
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
        dcp.load(template, storage_reader=self.storage.reader(step), process_group=comm.group, no_dist=not comm.distributed)
        result.bytes = sum(v["bytes"] for v in manifest["files"].values()) // comm.world_size
        result.seconds = time.perf_counter() - start
        return template, result
