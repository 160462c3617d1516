"""Shard I/O from buffers kept across saves, checksummed as it is written.

The per-rank tiers (:class:`~railtrain.trainer.checkpoint.shards.ShardTier`)
checksum every shard (:mod:`~railtrain.trainer.checkpoint.checksum`). Done one
after the other (serialize into a fresh buffer, hash, write; for the memory
tier's copy: receive into a fresh buffer, hash it, write it), each pass over
the shard cost about as much as the write itself, and the memory tier wrote at
0.42x of the raw bandwidth (docs/bench-checkpoint.md). Here:

* the shard is serialized into a :class:`ShardBuffer` kept across saves (its
  pages are faulted in once; ``torch.save`` into a new ``BytesIO`` grows and
  copies it at every save);
* :func:`write_hashed` writes it in chunks and hashes each chunk right after
  writing it, while it is still in the CPU's cache; with XXH3 (about 35 GB/s
  a core) that adds a few per cent to the write, where sha256 on a helper
  thread (about 2 GB/s) competed with the writes for the same cores;
* the neighbour's copy is received in chunks
  (:meth:`~railtrain.trainer.checkpoint.comm.Comm.swap`), each written and
  hashed while the next one arrives.

Imports: the standard library, :mod:`.checksum` and :mod:`.report`.
"""

from __future__ import annotations

import os
from typing import IO, Any, Callable

from railtrain.trainer.checkpoint import checksum
from railtrain.trainer.checkpoint.report import describe_error


class ShardBuffer:
    """A growable byte buffer kept across saves, so its pages are faulted in once, not at every save.

    ``torch.save`` writes into it through :meth:`write` (the file-object protocol);
    :meth:`view` is what was written since :meth:`reset`.
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.size = 0

    def reset(self, capacity: int = 0) -> "ShardBuffer":
        """Forget the contents; make room for ``capacity`` bytes."""
        self.size = 0
        if capacity > len(self.buf):
            self.buf = bytearray(capacity)
        return self

    def write(self, data: Any) -> int:
        """Append ``data`` (bytes-like), growing the buffer by doubling when needed; returns its length."""
        view = memoryview(data).cast("B")
        end = self.size + view.nbytes
        if end > len(self.buf):
            grown = bytearray(max(end, 2 * len(self.buf)))
            grown[: self.size] = memoryview(self.buf)[: self.size]
            self.buf = grown
        self.buf[self.size : end] = view
        self.size = end
        return view.nbytes

    def flush(self) -> None:
        """Nothing to flush."""

    def view(self) -> memoryview:
        """The bytes written since the last :meth:`reset`."""
        return memoryview(self.buf)[: self.size]


def write_hashed(path: str, data: memoryview, fsync: bool, chunk: int = 4 << 20) -> str:
    """Write ``data`` to ``path`` in ``chunk``-byte pieces, hashing each piece right after writing it.

    Returns:
        The hex digest of ``data`` with :data:`~railtrain.trainer.checkpoint.checksum.ALGORITHM`.

    Raises:
        OSError: the file cannot be written.
    """
    hasher = checksum.new()
    with open(path, "wb") as fh:
        for i in range(0, data.nbytes, chunk):
            piece = data[i : i + chunk]
            fh.write(piece)
            hasher.update(piece)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    return hasher.hexdigest()


class CopySink:
    """Writes a neighbour's copy to its file chunk by chunk as it arrives, hashing each chunk right
    after writing it; a write error is kept (the transfer must still complete) and raised by :meth:`close`.

    Args:
        begin: prepares the file and returns its path (an ``OSError`` it raises is kept, like a write error).
        fsync: sync the file to its device on :meth:`close`.
    """

    def __init__(self, begin: Callable[[], str], fsync: bool) -> None:
        self.digest, self.error, self.fsync = checksum.new(), "", fsync
        self.fh: IO[bytes] | None = None
        try:
            self.fh = open(begin(), "wb")
        except OSError as err:
            self.error = describe_error(err)

    def write(self, piece: memoryview) -> None:
        """Write ``piece`` (unless an earlier write failed) and add it to :attr:`digest`."""
        try:
            if self.fh is not None and not self.error:
                self.fh.write(piece)
        except OSError as err:
            self.error = describe_error(err)
        self.digest.update(piece)

    def close(self) -> None:
        """Close (and fsync) the file.

        Raises:
            OSError: with the first error of the file's preparation, a write, or the close.
        """
        try:
            if self.fh is not None:
                if self.fsync and not self.error:
                    self.fh.flush()
                    os.fsync(self.fh.fileno())
                self.fh.close()
        except OSError as err:
            self.error = self.error or describe_error(err)
        if self.error:
            raise OSError(self.error)
