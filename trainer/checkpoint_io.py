"""Shard I/O that hashes while it writes, from buffers kept across saves.

The per-rank tiers (:class:`~railtrain.trainer.checkpoint_shards.ShardTier`)
checksum every shard with sha256 (the manifest's ``sha256``). Done one after
the other on one thread (serialize into a fresh buffer, hash, write; for the
memory tier's copy: receive into a fresh buffer, hash it, write it), each pass
over the shard cost about as much as the write itself, and the memory tier
wrote at 0.42x of the raw bandwidth (docs/bench-checkpoint.md). Here:

* the shard is serialized into a :class:`ShardBuffer` kept across saves (its
  pages are faulted in once; ``torch.save`` into a new ``BytesIO`` grows and
  copies it at every save);
* :func:`write_hashed` writes it in chunks while the helper thread
  :data:`HASH_POOL` hashes the same chunk (``hashlib`` and file writes both
  release the GIL, so the two overlap);
* the neighbour's copy is received in chunks
  (:meth:`~railtrain.trainer.checkpoint_tiers.Comm.swap`), each written and
  hashed while the next one arrives.

The checksums stay what they were: sha256 of each file's bytes, verified
again on every restore.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HASH_POOL = ThreadPoolExecutor(1, thread_name_prefix="railtrain-sha256")
"""The helper thread that hashes a chunk while the caller writes it (``hashlib`` and file writes release the GIL)."""


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


def write_hashed(path: str, data: memoryview, fsync: bool, chunk: int = 16 << 20) -> str:
    """Write ``data`` to ``path`` in chunks, sha256-hashing each chunk on the helper thread while it is written.

    Returns:
        The hex sha256 of ``data``.

    Raises:
        OSError: the file cannot be written.
    """
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for i in range(0, data.nbytes, chunk):
            piece = data[i : i + chunk]
            hashed = HASH_POOL.submit(digest.update, piece)
            fh.write(piece)
            hashed.result()
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    return digest.hexdigest()
