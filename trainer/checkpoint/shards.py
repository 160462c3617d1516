"""The per-rank checkpoint tiers (``memory`` and ``local``): each rank's shard in a node-local directory.

Each rank writes its own shard (:mod:`~railtrain.trainer.checkpoint.state`)
into a node-local :class:`~railtrain.trainer.checkpoint.files.ShardDir`; the
memory tier also sends it to the rank with the same local rank on the next
node, which keeps it as a ``peer`` copy, so the shards of a lost node survive
on its neighbour. A :class:`ShardWriter` serializes once and writes every due
tier, hashing while it writes (:mod:`~railtrain.trainer.checkpoint.io`).
Such a checkpoint loads only at the world size and layout it was saved with;
the persistent tier (:mod:`~railtrain.trainer.checkpoint.persistent`) reshards.
Every method that takes a :class:`~railtrain.trainer.checkpoint.comm.Comm`
must be called by all ranks.

Imports: torch and the package's lower modules: :mod:`.checksum`, :mod:`.comm`,
:mod:`.files`, :mod:`.io`, :mod:`.report`, :mod:`.retention`, :mod:`.state`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.serialization as torch_serialization

from railtrain.trainer.checkpoint import checksum
from railtrain.trainer.checkpoint.comm import Comm, Peers
from railtrain.trainer.checkpoint.files import SHARD_FORMAT, ShardDir, parse_manifest
from railtrain.trainer.checkpoint.io import CopySink, ShardBuffer, write_hashed
from railtrain.trainer.checkpoint.report import TierResult, describe_error
from railtrain.trainer.checkpoint.retention import is_good
from railtrain.trainer.checkpoint.state import ShardMismatch, deserialize, load_file, rebuild, saved_states_only


@dataclass(frozen=True)
class _Sources:
    """Who serves the shards of a step that some ranks lack (:meth:`ShardTier._choose_sources`).

    Attributes:
        needy: ranks whose own shard is missing or corrupt.
        offers: ``{rank: kind}`` of the verified copies this rank holds of the needy ranks' shards.
        all_offers: every rank's ``offers``, in rank order.
        source: ``{needy rank: the rank that serves its shard}``.
        lost: ``""``, or why some needy rank has no copy anywhere (up to 4 of them).
    """

    needy: list[int]
    offers: dict[int, str]
    all_offers: list[dict[int, str]]
    source: dict[int, int]
    lost: str


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
            written: ``""`` when the shard was already written here (by :class:`ShardWriter`),
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
            result.error = describe_error(err) if written is None else str(err)
        if self.peers:
            dst, src = self.peers.dst(self.rank), self.peers.src(self.rank)
            theirs = parse_manifest(bytes(comm.exchange({dst: json.dumps(manifest, sort_keys=True).encode()}, [src])[src]), SHARD_FORMAT) or {}
            sink = CopySink(lambda: self.dir.begin(step, "peer", src), self.dir.fsync)
            size = comm.swap(dst, payload, src, self._received, sink.write)
            try:
                sink.close()
                if checksum.mismatch(theirs, sink.digest.hexdigest(), size, checksum.ALGORITHM):
                    raise OSError(f"copy of rank {src} arrived with another checksum")
                self._pending.append(("peer", src, theirs))
            except OSError as exc:
                result.error = result.error or describe_error(exc)
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

        Args:
            template: the live state the shard is rebuilt into (not modified).
            gathered: every rank's :meth:`claims`.

        Returns:
            ``(state, result)``; ``state`` is ``None`` when some rank's shard and
            every copy of it are missing or corrupt or do not fit, with the
            reason in ``result.error`` (the same on every rank).
        """
        result, start = TierResult(self.name), time.perf_counter()
        sources = self._choose_sources(step, gathered, comm)
        if sources.lost:
            result.error = f"{self.name} step {step}: {sources.lost}"
            return None, result
        payload, err = self._fetch(step, sources, comm)
        if self.rank in sources.needy:
            where = "its own node" if sources.source[self.rank] == self.rank else f"rank {sources.source[self.rank]}"
            result.notes.append(f"rank {self.rank}'s shard came from the copy on {where}")
        state = None
        try:
            if err:
                raise OSError(err)
            # The own shard is read straight from its (verified) file into tensors: no intermediate bytes.
            loaded = deserialize(payload) if payload is not None else load_file(self.dir.data_path(step, "rank", self.rank))
            state = rebuild(saved_states_only(template, loaded.get("states", {}) if isinstance(loaded, dict) else {}), loaded)
        except (ShardMismatch, RuntimeError, ValueError, OSError) as exc:
            err = describe_error(exc)
        errs = comm.all_gather(err)
        if any(errs):
            result.error = f"{self.name} step {step}: " + "; ".join(f"rank {r}: {e}" for r, e in enumerate(errs) if e)
            return None, result
        if payload is not None:  # put this node's own shard back, so the next failure finds two copies again
            self._restore_own(step, gathered, sources, payload)
        result.bytes = len(payload) if payload is not None else int(gathered[self.rank]["own"][step]["bytes"])
        result.seconds = time.perf_counter() - start
        restored_from = comm.all_gather(result.notes)
        result.notes = [n for notes in restored_from for n in notes]
        return state, result

    def _choose_sources(self, step: int, gathered: list[dict[str, Any]], comm: Comm) -> _Sources:
        """Which rank serves each rank whose own shard of ``step`` is missing or corrupt (collective).

        Each rank verifies its own shard, then what it holds of the needy ranks' shards, and offers
        the copies that verify; each needy rank takes the best holder (:meth:`_holder_order`) that offers one.
        """
        own_err = self._verify_file(step, "rank", self.rank, gathered[self.rank]["own"].get(step))
        own_errs = comm.all_gather(own_err)
        needy = [r for r, e in enumerate(own_errs) if e]
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
        detail = "; ".join(f"rank {r}: {own_errs[r]}, copy: {all_copy_errs.get(r, 'none')}" for r in lost[:4])
        return _Sources(needy, offers, all_offers, source, detail)

    def _fetch(self, step: int, sources: _Sources, comm: Comm) -> tuple[bytes | bytearray | None, str]:
        """Send the copies this rank serves and receive this rank's own shard if another rank serves it (collective).

        Returns:
            ``(payload, error)``: the bytes of this rank's shard when it came from a copy (``None``: read its own
            file), and ``""`` or why a verified copy could not be read (the transfer happens anyway).
        """
        needy, source, offers = sources.needy, sources.source, sources.offers
        payload: bytes | bytearray | None = None
        err = ""
        try:
            sends = {r: self.dir.read_data(step, offers[r], r) for r in needy if source[r] == self.rank and r != self.rank}
            if source.get(self.rank) == self.rank:
                payload = self.dir.read_data(step, offers[self.rank], self.rank)
        except OSError as exc:  # verified a moment ago; the transfer must still happen, so send nothing usable
            err, sends = describe_error(exc), {r: b"" for r in needy if source[r] == self.rank and r != self.rank}
        needs_transfer = self.rank in needy and source[self.rank] != self.rank
        received = comm.exchange(sends, [source[self.rank]] if needs_transfer else [])
        if needs_transfer:
            payload = received.get(source[self.rank])
        return payload, err

    def _restore_own(self, step: int, gathered: list[dict[str, Any]], sources: _Sources, payload: bytes | bytearray) -> None:
        """Write the shard that came from a copy back as this rank's own, with the copy's manifest (best effort)."""
        holder = sources.source[self.rank]
        manifest = gathered[holder]["held"][f"{sources.all_offers[holder][self.rank]}-{self.rank}"][step]
        try:
            self.dir.write_data(step, "rank", self.rank, payload)
            self.dir.write_manifest(step, "rank", self.rank, manifest)
        except OSError:
            pass

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


class ShardWriter:
    """Serializes this rank's shard once per save and writes it to every due per-rank tier.

    It owns the buffer the shard is serialized into, kept across saves so its pages stay
    faulted in (one save runs at a time, so one buffer serves them all).
    """

    def __init__(self) -> None:
        self.buffer = ShardBuffer()

    def write(self, tiers: list[ShardTier], step: int, state: Any, manifest: dict[str, Any], comm: Comm) -> list[TierResult]:
        """Serialize ``state`` and write it to each of ``tiers`` (collective when a tier has peers).

        The shard is ``torch.save``-d into :attr:`buffer`, written to the first tier with its
        checksum computed while it is written (:func:`~railtrain.trainer.checkpoint.io.write_hashed`),
        then to the other tiers and (memory tier) to the neighbour from the same buffer. A tier that
        cannot write reports it in its result; the neighbour's copy is still sent.

        Args:
            state: this rank's local tensors (:func:`~railtrain.trainer.checkpoint.state.to_local`).
            manifest: the shard manifest without ``bytes`` and the checksum (added here).

        Returns:
            One :class:`~railtrain.trainer.checkpoint.report.TierResult` per tier, in order; each
            one's seconds include the shared serialization.
        """
        start = time.perf_counter()
        # The zip records' CRC-32 (torch computes it by default) would be a second checksum over every byte, next to
        # the manifest's, which is the one verified before loading; without it serialization is a copy (~2.5x faster).
        with torch_serialization.config.patch({"save.compute_crc32": False}):
            torch.save(state, self.buffer.reset())
        payload = self.buffer.view()
        written: dict[int, str] = {}
        digest = ""
        for i, tier in enumerate(tiers):
            try:
                digest = write_hashed(tier.dir.begin(step, "rank", tier.rank), payload, tier.dir.fsync)
                written[i] = ""
                break
            except OSError as err:
                written[i] = describe_error(err)
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
