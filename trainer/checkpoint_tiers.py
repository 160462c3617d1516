"""The checkpoint tiers, and the collectives they run on.

* :class:`ShardTier` (``memory`` and ``local``): each rank writes its own shard
  (:mod:`~railtrain.trainer.checkpoint_state`) into a node-local
  :class:`~railtrain.trainer.checkpoint_files.ShardDir`; the memory tier also
  sends it to the rank with the same local rank on the next node, which keeps
  it as a ``peer`` copy, so the shards of a lost node survive on its neighbour.
* :class:`PersistentTier`: one DCP checkpoint of all ranks in shared storage,
  reshardable to another world size.

Saving is two phases, data then manifests, driven by
:class:`railtrain.trainer.checkpoint.Checkpointer`; loading is one collective
``try_load`` per candidate step that verifies every checksum before anything is
restored. Every method that takes a :class:`Comm` must be called by all ranks.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from railtrain.trainer.checkpoint_files import GLOBAL_FORMAT, SHARD_FORMAT, ShardDir, open_storage, prune_plan, sha256_bytes, sha256_stream
from railtrain.trainer.checkpoint_io import HASH_POOL, ShardBuffer, write_hashed
from railtrain.trainer.checkpoint_state import ShardMismatch, deserialize, load_file, rebuild

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


class ShardTier:
    """A node-local tier of per-rank shards (``memory`` or ``local``).

    Args:
        name: ``"memory"`` or ``"local"``.
        root: this node's directory of the tier.
        peers: where copies go (memory tier on several nodes), else ``None``.
        fsync: sync files to the device (pointless on tmpfs).
    """

    def __init__(self, name: str, root: str, interval: int, keep: int, rank: int, world_size: int, peers: Peers | None, fsync: bool) -> None:
        self.name, self.root, self.interval, self.keep = name, root, interval, keep
        self.rank, self.world_size, self.peers = rank, world_size, peers
        self.dir = ShardDir(root, fsync)
        self._received = ShardBuffer()
        self._pending: list[tuple[str, int, dict[str, Any]]] = []

    def describe(self) -> str:
        """E.g. ``memory(/dev/shm/x every 10 keep 1, copy on the next node)``."""
        copy = ", copy on the next node" if self.peers else ""
        return f"{self.name}({self.root} every {self.interval} keep {self.keep}{copy})"

    # --- save ---
    def write_data(self, step: int, payload: memoryview, manifest: dict[str, Any], comm: Comm, written: str | None = None) -> TierResult:
        """Write this rank's shard and, with peers, swap copies with the neighbouring nodes (collective when peers are set).

        Args:
            payload: the shard's bytes (a mapping of the file another tier holds, or memory).
            written: ``""`` when the shard was already written here (by :func:`write_shards`),
                an error message when that attempt failed, ``None`` to write ``payload`` now.
        """
        result, start = TierResult(self.name, bytes=payload.nbytes), time.perf_counter()
        self._pending = []
        try:
            if written is None:
                self.dir.write_data(step, "rank", self.rank, payload)
            elif written:
                raise OSError(written)
            self._pending.append(("rank", self.rank, manifest))
        except OSError as err:
            result.error = _describe(err) if written is None else str(err)
        if self.peers:
            dst, src = self.peers.dst(self.rank), self.peers.src(self.rank)
            theirs = _unjson(comm.exchange({dst: _json(manifest)}, [src])[src])
            sink = _CopySink(self.dir, step, src)
            size = comm.swap(dst, payload, src, self._received, sink.write)
            try:
                sink.close()
                if theirs.get("sha256") != sink.digest.hexdigest() or theirs.get("bytes") != size:
                    raise OSError(f"copy of rank {src} arrived with another sha256")
                self._pending.append(("peer", src, theirs))
            except OSError as exc:
                result.error = result.error or _describe(exc)
        result.seconds = time.perf_counter() - start
        return result

    def write_manifests(self, step: int) -> None:
        """Write the manifests of what :meth:`write_data` wrote, after it."""
        for kind, rank, manifest in self._pending:
            self.dir.write_manifest(step, kind, rank, manifest)
        self._pending = []

    def prune(self) -> list[int]:
        """Retention for this rank's own shards and the copies it keeps."""
        removed = self.dir.prune("rank", self.rank, self.keep)
        if self.peers:
            removed += self.dir.prune("peer", self.peers.src(self.rank), self.keep)
        return sorted(set(removed))

    # --- load ---
    def claims(self) -> dict[str, Any]:
        """What this rank finds: ``{"own": {step: manifest}, "peer": {step: manifest}, "partial": [steps]}``.

        ``own`` are this rank's shards with a readable manifest, ``peer`` the
        copies it keeps, ``partial`` its shards whose manifest is missing.
        """
        entries = self.dir.entries()
        mine = entries.get(("rank", self.rank), {})
        own = {s: m for s in mine if (m := self.dir.read_manifest(s, "rank", self.rank))}
        peer: dict[int, dict[str, Any]] = {}
        if self.peers:
            src = self.peers.src(self.rank)
            peer = {s: m for s in entries.get(("peer", src), {}) if (m := self.dir.read_manifest(s, "peer", src))}
        return {"own": own, "peer": peer, "partial": sorted(s for s in mine if s not in own)}

    def candidates(self, gathered: list[dict[str, Any]], layout: str) -> tuple[list[int], list[str]]:
        """Steps for which every rank's shard exists here or as a copy, newest first, and notes on the others.

        Args:
            gathered: every rank's :meth:`claims`.
            layout: this run's parallel layout; shards of another one are not candidates.
        """
        steps = sorted({s for c in gathered for key in ("own", "peer", "partial") for s in c[key]}, reverse=True)
        out, notes = [], []
        for step in steps:
            metas = [m for c in gathered for key in ("own", "peer") if (m := c[key].get(step))]
            foreign = {(m.get("world_size"), m.get("layout")) for m in metas} - {(self.world_size, layout)}
            if foreign:
                ws, lay = sorted(foreign, key=str)[0]
                notes.append(f"{self.name} step {step}: saved by {ws} ranks as '{lay}', this run is {self.world_size} as '{layout}' (only the persistent tier reshards)")
                continue
            missing = [r for r in range(self.world_size) if step not in gathered[r]["own"] and self._copy_holder(gathered, r, step) is None]
            if missing:
                notes.append(f"{self.name} step {step}: no manifest for rank(s) {_ranks(missing)} and no copy (save cut short or node lost)")
                continue
            out.append(step)
        return out, notes

    def _copy_holder(self, gathered: list[dict[str, Any]], rank: int, step: int) -> int | None:
        if not self.peers:
            return None
        holder = self.peers.dst(rank)
        return holder if step in gathered[holder]["peer"] else None

    def try_load(self, step: int, template: dict[str, Any], gathered: list[dict[str, Any]], comm: Comm) -> tuple[dict[str, Any] | None, TierResult]:
        """Verify and fetch every rank's shard of ``step``, then rebuild this rank's state (collective).

        Returns:
            ``(state, result)``; ``state`` is ``None`` when some rank's shard and
            its copy are both missing or corrupt or do not fit, with the reason
            in ``result.error`` (the same on every rank).
        """
        result, start = TierResult(self.name), time.perf_counter()
        own_err = self._verify_file(step, "rank", self.rank, gathered[self.rank]["own"].get(step))
        own_errs = comm.all_gather(own_err)
        # Ranks whose own shard is missing or bad get the copy from its holder.
        needy = [r for r, e in enumerate(own_errs) if e]
        sends: dict[int, Any] = {}
        copy_errs: dict[int, str] = {}
        if self.peers and self.rank in [self.peers.dst(r) for r in needy]:
            src = self.peers.src(self.rank)
            data, err = self._read_verified(step, "peer", src, gathered[self.rank]["peer"].get(step))
            copy_errs[src] = err
            if not err:
                sends[src] = data
        copy_errs_all = {r: e for errs in comm.all_gather(copy_errs) for r, e in errs.items()}
        lost = [r for r in needy if copy_errs_all.get(r, "no copy") != ""]
        if lost:
            detail = "; ".join(f"rank {r}: {own_errs[r]}, copy: {copy_errs_all.get(r, 'none')}" for r in lost[:4])
            result.error = f"{self.name} step {step}: {detail}"
            return None, result
        received = comm.exchange(sends, [self.peers.dst(self.rank)] if self.peers and self.rank in needy else [])
        payload = received.get(self.peers.dst(self.rank)) if self.peers and self.rank in needy else None
        if payload is not None:
            result.notes.append(f"rank {self.rank}'s shard came from the copy on rank {self.peers.dst(self.rank)}")  # type: ignore[union-attr]
        state, err = None, ""
        try:
            # The own shard is read straight from its (verified) file into tensors: no intermediate bytes.
            loaded = deserialize(payload) if payload is not None else load_file(self.dir.data_path(step, "rank", self.rank))
            state = rebuild(template, loaded)
        except (ShardMismatch, RuntimeError, ValueError, OSError) as exc:
            err = _describe(exc)
        errs = comm.all_gather(err)
        if any(errs):
            result.error = f"{self.name} step {step}: " + "; ".join(f"rank {r}: {e}" for r, e in enumerate(errs) if e)
            return None, result
        if payload is not None:  # put this node's own shard back, so the next failure finds two copies again
            try:
                self.dir.write_data(step, "rank", self.rank, payload)
                self.dir.write_manifest(step, "rank", self.rank, gathered[self.peers.dst(self.rank)]["peer"][step])  # type: ignore[union-attr]
            except OSError:
                pass
        result.bytes = len(payload) if payload is not None else int(gathered[self.rank]["own"][step]["bytes"])
        result.seconds = time.perf_counter() - start
        restored_from = comm.all_gather(result.notes)
        result.notes = [n for notes in restored_from for n in notes]
        return state, result

    def _verify_file(self, step: int, kind: str, rank: int, manifest: dict[str, Any] | None) -> str:
        """``""`` if the shard's file matches its manifest (hashed as it is read, not kept), else the reason."""
        if manifest is None:
            return "no shard"
        try:
            with open(self.dir.data_path(step, kind, rank), "rb") as fh:
                digest, size = sha256_stream(fh)
        except OSError as err:
            return f"unreadable ({err.strerror or err})"
        if size != manifest.get("bytes") or digest != manifest.get("sha256"):
            return f"{kind}-{rank}.pt does not match its sha256 (corrupt)"
        return ""

    def _read_verified(self, step: int, kind: str, rank: int, manifest: dict[str, Any] | None) -> tuple[bytes, str]:
        """``(bytes, "")`` if the shard is present and matches its manifest, else ``(b"", reason)``."""
        if manifest is None:
            return b"", "no shard"
        try:
            data = self.dir.read_data(step, kind, rank)
        except OSError as err:
            return b"", f"unreadable ({err.strerror or err})"
        if len(data) != manifest.get("bytes") or sha256_bytes(data) != manifest.get("sha256"):
            return b"", f"{kind}-{rank}.pt does not match its sha256 (corrupt)"
        return data, ""


class _CopySink:
    """Writes a neighbour's copy to its ``peer-<R>.pt`` chunk by chunk as it arrives, hashing each chunk on the
    helper thread while it is written; a write error is kept (the transfer must still complete) and raised by
    :meth:`close`."""

    def __init__(self, shards: ShardDir, step: int, src: int) -> None:
        self.digest, self.error, self.fh, self.fsync = hashlib.sha256(), "", None, shards.fsync
        try:
            self.fh = open(shards.begin(step, "peer", src), "wb")
        except OSError as err:
            self.error = _describe(err)

    def write(self, piece: memoryview) -> None:
        hashed = HASH_POOL.submit(self.digest.update, piece)
        try:
            if self.fh is not None and not self.error:
                self.fh.write(piece)
        except OSError as err:
            self.error = _describe(err)
        hashed.result()

    def close(self) -> None:
        """Close (and fsync) the file; raises ``OSError`` with the first error."""
        try:
            if self.fh is not None:
                if self.fsync and not self.error:
                    self.fh.flush()
                    os.fsync(self.fh.fileno())
                self.fh.close()
        except OSError as err:
            self.error = self.error or _describe(err)
        if self.error:
            raise OSError(self.error)


_SERIALIZED = ShardBuffer()
"""This process's shard serialized by the last save (one save runs at a time); kept so its pages stay faulted in."""


def write_shards(tiers: list[ShardTier], step: int, state: Any, manifest: dict[str, Any], comm: Comm) -> list[TierResult]:
    """Serialize this rank's shard once and write it to every due per-rank tier (collective when a tier has peers).

    The shard is ``torch.save``-d into a buffer kept across saves, written to the
    first tier with its sha256 computed while it is written
    (:func:`~railtrain.trainer.checkpoint_io.write_hashed`), then to the other
    tiers and (memory tier) to the neighbour from the same buffer. A tier that
    cannot write reports it in its result; the neighbour's copy is still sent.

    Args:
        state: this rank's local tensors (:func:`~railtrain.trainer.checkpoint_state.to_local`).
        manifest: the shard manifest without ``bytes`` and ``sha256`` (added here).

    Returns:
        One :class:`TierResult` per tier, in order; each one's seconds include the shared serialization.
    """
    start = time.perf_counter()
    torch.save(state, _SERIALIZED.reset())
    payload = _SERIALIZED.view()
    written: dict[int, str] = {}
    digest = ""
    for i, tier in enumerate(tiers):
        try:
            digest = write_hashed(tier.dir.begin(step, "rank", tier.rank), payload, tier.dir.fsync)
            written[i] = ""
            break
        except OSError as err:
            written[i] = _describe(err)
    full = {**manifest, "bytes": payload.nbytes, "sha256": digest or sha256_bytes(payload)}
    serialize_s = time.perf_counter() - start
    results = []
    for i, tier in enumerate(tiers):
        result = tier.write_data(step, payload, full, comm, written.get(i))
        result.seconds += serialize_s
        results.append(result)
    return results


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
                files[name] = {"sha256": digest, "bytes": size}
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
                {"format": GLOBAL_FORMAT, "step": step, "world_size": self.world_size, "layout": layout, "train": train, "files": self._files, "saved_at": time.time()},
            )
        self._files = {}

    def prune(self) -> list[int]:
        """Rank 0 deletes complete checkpoints beyond ``keep`` and older leftovers."""
        if self.rank != 0:
            return []
        series = {s: self.storage.is_complete(s) for s in self.storage.list_steps()}
        doomed = prune_plan(series, self.keep)
        for step in doomed:
            self.storage.remove(step)
        return doomed

    # --- load ---
    def claims(self) -> dict[int, dict[str, Any]]:
        """Rank 0's view: ``{step: manifest}`` of every complete checkpoint (other ranks: ``{}``)."""
        if self.rank != 0:
            return {}
        return {s: m for s in self.storage.list_steps() if (m := self.storage.read_manifest(s))}

    def try_load(self, step: int, template: dict[str, Any], manifest: dict[str, Any], comm: Comm) -> tuple[dict[str, Any] | None, TierResult]:
        """Verify every file's checksum (split across ranks), then DCP-load into ``template`` (collective)."""
        result, start = TierResult(self.name), time.perf_counter()
        files = sorted(manifest["files"])
        errors = []
        for name in files[comm.rank :: comm.world_size]:
            want = manifest["files"][name]
            try:
                digest, size = self.storage.hash_file(step, name)
            except OSError as err:
                errors.append(f"{name} unreadable ({err.strerror or err})")
                continue
            if digest != want.get("sha256") or size != want.get("bytes"):
                errors.append(f"{name} does not match its sha256 (corrupt)")
        all_errors = [e for errs in comm.all_gather(errors) for e in errs]
        if all_errors:
            result.error = f"{self.name} step {step}: " + "; ".join(all_errors[:3])
            return None, result
        dcp.load(template, storage_reader=self.storage.reader(step), process_group=comm.group, no_dist=not comm.distributed)
        result.bytes = sum(v["bytes"] for v in manifest["files"].values()) // comm.world_size
        result.seconds = time.perf_counter() - start
        return template, result


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" (+{len(ranks) - 8})" if len(ranks) > 8 else "")


def _json(obj: dict[str, Any]) -> bytes:
    import json

    return json.dumps(obj, sort_keys=True).encode()


def _unjson(data: bytes | bytearray) -> dict[str, Any]:
    import json

    try:
        out = json.loads(bytes(data))
    except ValueError:
        return {}
    return out if isinstance(out, dict) and out.get("format") == SHARD_FORMAT else {}
