"""The collectives of the checkpoint code, on a process group of its own, and who keeps whose copy.

:class:`Comm` wraps the gloo group every tier's collective methods run on (or
stands in for it in a single process); :class:`Peers` maps a rank to the rank
on the next node that keeps its memory-tier copy. Every method of :class:`Comm`
must be called by all ranks (point-to-point ones by the matching peers).

Imports: the standard library, torch, and :mod:`.io` (the buffer a copy is received into).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from railtrain.trainer.checkpoint.io import ShardBuffer

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
