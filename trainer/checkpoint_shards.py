"""The per-rank checkpoint tiers (``memory`` and ``local``): each rank's shard in a node-local directory.

Each rank writes its own shard (:mod:`~railtrain.trainer.checkpoint_state`)
into a node-local :class:`~railtrain.trainer.checkpoint_files.ShardDir`; the
memory tier also sends it to the rank with the same local rank on the next
node, which keeps it as a ``peer`` copy, so the shards of a lost node survive
on its neighbour. :func:`write_shards` serializes once and writes every due
tier, hashing while it writes (:mod:`~railtrain.trainer.checkpoint_io`).
Such a checkpoint loads only at the world size and layout it was saved with;
the persistent tier (:mod:`~railtrain.trainer.checkpoint_tiers`) reshards.
Every method that takes a :class:`~railtrain.trainer.checkpoint_tiers.Comm`
must be called by all ranks.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.utils.serialization as torch_serialization

from railtrain.trainer import checkpoint_checksum as checksum
from railtrain.trainer.checkpoint_files import SHARD_FORMAT, ShardDir, is_good
from railtrain.trainer.checkpoint_io import ShardBuffer, write_hashed
from railtrain.trainer.checkpoint_state import ShardMismatch, deserialize, load_file, rebuild
from railtrain.trainer.checkpoint_tiers import Comm, Peers, TierResult, _describe


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
                if checksum.mismatch(theirs, sink.digest.hexdigest(), size, checksum.ALGORITHM):
                    raise OSError(f"copy of rank {src} arrived with another checksum")
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

    def clear(self, all_ranks: bool) -> int:
        """Delete this rank's shards and the copies it keeps, every step (``all_ranks``: every shard in this node's directory).

        Returns:
            How many shards were deleted (a file already gone counts as deleted).
        """
        mine = {("rank", self.rank)} | ({("peer", self.peers.src(self.rank))} if self.peers else set())
        removed = 0
        for key, steps in self.dir.entries().items():
            if all_ranks or key in mine:
                for step in steps:
                    self.dir.remove(step, *key)
                    removed += 1
        return removed

    # --- load ---
    def claims(self) -> dict[str, Any]:
        """What this rank finds on its node: ``{"own": {step: manifest}, "held": {"<kind>-<R>": {step: manifest}}, "partial": [steps]}``.

        ``own`` are this rank's shards with a readable manifest; ``held`` every
        other shard or copy in this node's directory (another rank's own shard,
        a neighbour's copy, whatever rank saved it), so a restarted gang whose
        ranks landed on other nodes still finds them; ``partial`` this rank's
        shards whose manifest is missing.
        """
        entries = self.dir.entries()
        mine = entries.get(("rank", self.rank), {})
        own = {s: m for s in mine if (m := self.dir.read_manifest(s, "rank", self.rank))}
        held: dict[str, dict[int, dict[str, Any]]] = {}
        for (kind, rank), steps in sorted(entries.items()):
            if (kind, rank) != ("rank", self.rank):
                found = {s: m for s in steps if (m := self.dir.read_manifest(s, kind, rank))}
                if found:
                    held[f"{kind}-{rank}"] = found
        return {"own": own, "held": held, "partial": sorted(s for s in mine if s not in own)}

    def candidates(self, gathered: list[dict[str, Any]], layout: str, run_id: str = "") -> tuple[list[int], list[str]]:
        """Steps for which every rank's shard exists on some node (its own, or a copy anywhere), newest first, and notes on the others.

        Args:
            gathered: every rank's :meth:`claims`.
            layout: this run's parallel layout; shards of another one are not candidates.
            run_id: this run's identity (``RAILTRAIN_RUN_ID``); when set, shards whose manifest names
                another run (or none) are not candidates: they belong to an earlier job of the same name.
        """
        steps = sorted({s for c in gathered for s in [*c["own"], *c["partial"], *(s for h in c["held"].values() for s in h)]}, reverse=True)
        out, notes = [], []
        for step in steps:
            metas = [m for c in gathered for m in [c["own"].get(step), *(h.get(step) for h in c["held"].values())] if m]
            if run_id and (others := sorted({str(m.get("run") or "none") for m in metas} - {run_id})):
                notes.append(f"{self.name} step {step}: saved by run {others[0]}, this run is {run_id} (spec.checkpoint.runId, else the job's uid)")
                continue
            if any(is_good(m) is False for m in metas):
                notes.append(f"{self.name} step {step}: marked not good (its state was not finite)")
                continue
            foreign = {(m.get("world_size"), m.get("layout")) for m in metas} - {(self.world_size, layout)}
            if foreign:
                ws, lay = sorted(foreign, key=str)[0]
                notes.append(f"{self.name} step {step}: saved by {ws} ranks as '{lay}', this run is {self.world_size} as '{layout}' (only the persistent tier reshards)")
                continue
            missing = [r for r in range(self.world_size) if step not in gathered[r]["own"] and not _holders(gathered, r, step)]
            if missing:
                notes.append(f"{self.name} step {step}: no manifest for rank(s) {_ranks(missing)} and no copy (save cut short or node lost)")
                continue
            out.append(step)
        return out, notes

    def _holder_order(self, rank: int) -> list[int]:
        """Who should serve ``rank``'s shard, best first: the rank itself (no transfer), its copy's usual holder, then the rest."""
        usual = self.peers.dst(rank) if self.peers else rank
        return sorted(range(self.world_size), key=lambda h: (h != rank, h != usual, h))

    def try_load(self, step: int, template: dict[str, Any], gathered: list[dict[str, Any]], comm: Comm) -> tuple[dict[str, Any] | None, TierResult]:
        """Verify and fetch every rank's shard of ``step``, then rebuild this rank's state (collective).

        A rank whose own shard is missing or corrupt gets a verified copy from
        the best holder (:meth:`_holder_order`): a copy on its own node, the
        neighbour that kept it, or any node that has it (a restarted gang's
        ranks may have landed on other nodes than the ones that saved).

        Returns:
            ``(state, result)``; ``state`` is ``None`` when some rank's shard and
            every copy of it are missing or corrupt or do not fit, with the
            reason in ``result.error`` (the same on every rank).
        """
        result, start = TierResult(self.name), time.perf_counter()
        own_err = self._verify_file(step, "rank", self.rank, gathered[self.rank]["own"].get(step))
        own_errs = comm.all_gather(own_err)
        needy = [r for r, e in enumerate(own_errs) if e]
        # Each rank verifies what it holds of the needy ranks' shards and offers it.
        offers: dict[int, str] = {}
        copy_errs: dict[int, str] = {}
        for r in needy:
            for kind in ("rank", "peer"):
                manifest = gathered[self.rank]["held"].get(f"{kind}-{r}", {}).get(step)
                if manifest is None:
                    continue
                err = self._verify_file(step, kind, r, manifest)
                if not err:
                    offers[r] = kind
                    break
                copy_errs.setdefault(r, err)
        all_offers = comm.all_gather(offers)
        all_copy_errs = {r: e for errs in comm.all_gather(copy_errs) for r, e in errs.items()}
        source = {r: h for r in needy if (h := next((h for h in self._holder_order(r) if r in all_offers[h]), -1)) >= 0}
        lost = [r for r in needy if r not in source]
        if lost:
            detail = "; ".join(f"rank {r}: {own_errs[r]}, copy: {all_copy_errs.get(r, 'none')}" for r in lost[:4])
            result.error = f"{self.name} step {step}: {detail}"
            return None, result
        payload: bytes | bytearray | None = None
        err = ""
        try:
            sends = {r: self.dir.read_data(step, offers[r], r) for r in needy if source[r] == self.rank and r != self.rank}
            if source.get(self.rank) == self.rank:
                payload = self.dir.read_data(step, offers[self.rank], self.rank)
        except OSError as exc:  # verified a moment ago; the transfer must still happen, so send nothing usable
            err, sends = _describe(exc), {r: b"" for r in needy if source[r] == self.rank and r != self.rank}
        needs_transfer = self.rank in needy and source[self.rank] != self.rank
        received = comm.exchange(sends, [source[self.rank]] if needs_transfer else [])
        if needs_transfer:
            payload = received.get(source[self.rank])
        if self.rank in needy:
            where = "its own node" if source[self.rank] == self.rank else f"rank {source[self.rank]}"
            result.notes.append(f"rank {self.rank}'s shard came from the copy on {where}")
        state = None
        try:
            if err:
                raise OSError(err)
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
            holder = source[self.rank]
            manifest = gathered[holder]["held"][f"{all_offers[holder][self.rank]}-{self.rank}"][step]
            try:
                self.dir.write_data(step, "rank", self.rank, payload)
                self.dir.write_manifest(step, "rank", self.rank, manifest)
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
                problem = checksum.verify_stream(manifest, fh)
        except OSError as err:
            return f"unreadable ({err.strerror or err})"
        return f"{kind}-{rank}.pt {problem}" if problem else ""


class _CopySink:
    """Writes a neighbour's copy to its ``peer-<R>.pt`` chunk by chunk as it arrives, hashing each chunk right
    after writing it; a write error is kept (the transfer must still complete) and raised by :meth:`close`."""

    def __init__(self, shards: ShardDir, step: int, src: int) -> None:
        self.digest, self.error, self.fh, self.fsync = checksum.new(), "", None, shards.fsync
        try:
            self.fh = open(shards.begin(step, "peer", src), "wb")
        except OSError as err:
            self.error = _describe(err)

    def write(self, piece: memoryview) -> None:
        try:
            if self.fh is not None and not self.error:
                self.fh.write(piece)
        except OSError as err:
            self.error = _describe(err)
        self.digest.update(piece)

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
    first tier with its checksum computed while it is written
    (:func:`~railtrain.trainer.checkpoint_io.write_hashed`), then to the other
    tiers and (memory tier) to the neighbour from the same buffer. A tier that
    cannot write reports it in its result; the neighbour's copy is still sent.

    Args:
        state: this rank's local tensors (:func:`~railtrain.trainer.checkpoint_state.to_local`).
        manifest: the shard manifest without ``bytes`` and the checksum (added here).

    Returns:
        One :class:`TierResult` per tier, in order; each one's seconds include the shared serialization.
    """
    start = time.perf_counter()
    # The zip records' CRC-32 (torch computes it by default) would be a second checksum over every byte, next to
    # the manifest's, which is the one verified before loading; without it serialization is a copy (~2.5x faster).
    with torch_serialization.config.patch({"save.compute_crc32": False}):
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
    full = {**manifest, **checksum.entry(digest or checksum.of_bytes(payload), payload.nbytes)}
    serialize_s = time.perf_counter() - start
    results = []
    for i, tier in enumerate(tiers):
        result = tier.write_data(step, payload, full, comm, written.get(i))
        result.seconds += serialize_s
        results.append(result)
    return results


def _holders(gathered: list[dict[str, Any]], rank: int, step: int) -> list[int]:
    """The ranks whose node holds a copy of ``rank``'s shard of ``step`` (see :meth:`ShardTier.claims`)."""
    return [h for h, c in enumerate(gathered) if any(step in c["held"].get(f"{kind}-{rank}", {}) for kind in ("rank", "peer"))]


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
