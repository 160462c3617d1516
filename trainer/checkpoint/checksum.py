"""Checksums of checkpoint files: xxh3-128 for what railtrain writes, sha256 still verified where a manifest has it.

Every checkpoint file has a checksum in its manifest, verified before anything
is restored (docs/checkpoints.md). What it guards against is corruption (a torn
write, a flipped bit on a disk or in a node's RAM, a truncated upload), not an
adversary: whoever can rewrite a shard can rewrite its manifest too. So the
hash need not be cryptographic; it needs enough bits that a corrupt file
matching by chance is out of the question, and to cost little next to the
write itself.

sha256 (what manifests recorded before) runs at about 2 GB/s per core even with
the SHA extensions, as fast as writing to page cache or tmpfs: on the 2-core
development VM it kept the per-rank tiers at 0.53-0.68x of the raw write
(docs/bench-checkpoint.md). XXH3 with 128-bit output (Collet, xxHash; the
``xxhash`` package) runs at about 35 GB/s there, and its 128 bits put a chance
collision far below any hardware error rate. New manifests record
``"xxh3_128": <hex>``; a manifest written by an older railtrain records
``"sha256": <hex>`` and is verified with sha256, so existing checkpoints still
load.

Imports: the standard library and ``xxhash``; nothing else of railtrain.
"""

from __future__ import annotations

import hashlib
from typing import IO, Any, Protocol

import xxhash

ALGORITHM = "xxh3_128"
"""The checksum new manifests record, as the key of the hex digest (``{"xxh3_128": ..., "bytes": ...}``)."""
KNOWN = ("xxh3_128", "sha256")
"""Checksums a manifest may hold, in the order a verifier prefers them."""
CHUNK = 8 << 20
"""Bytes read at a time when hashing a file (8 MiB)."""


class Hasher(Protocol):
    """What :func:`new` returns: the ``hashlib`` interface."""

    def update(self, data: Any) -> None:
        """Add bytes-like ``data``."""
        ...

    def hexdigest(self) -> str:
        """The digest of everything added, as lowercase hex."""
        ...


def new(algorithm: str = ALGORITHM) -> Hasher:
    """A fresh hasher for ``algorithm`` (one of :data:`KNOWN`).

    Raises:
        ValueError: another algorithm.
    """
    if algorithm == "xxh3_128":
        return xxhash.xxh3_128()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum {algorithm!r}: railtrain knows {', '.join(KNOWN)}")


def of_bytes(data: bytes | bytearray | memoryview, algorithm: str = ALGORITHM) -> str:
    """Hex digest of ``data`` with ``algorithm``."""
    hasher = new(algorithm)
    hasher.update(data)
    return hasher.hexdigest()


def of_stream(fh: IO[bytes], algorithm: str = ALGORITHM) -> tuple[str, int]:
    """``(hex digest, byte count)`` of everything left in ``fh``, read :data:`CHUNK` bytes at a time."""
    hasher, size = new(algorithm), 0
    while chunk := fh.read(CHUNK):
        hasher.update(chunk)
        size += len(chunk)
    return hasher.hexdigest(), size


def entry(digest: str, size: int, algorithm: str = ALGORITHM) -> dict[str, Any]:
    """The manifest fields for one file: ``{algorithm: digest, "bytes": size}``."""
    return {algorithm: digest, "bytes": size}


def expected(manifest: dict[str, Any] | None) -> tuple[str, str]:
    """``(algorithm, hex digest)`` that ``manifest`` (a file's entry or a shard manifest) records.

    Returns:
        The first of :data:`KNOWN` present with a string value; ``("", "")``
        when there is none (such a file never verifies).
    """
    for algorithm in KNOWN:
        value = (manifest or {}).get(algorithm)
        if isinstance(value, str):
            return algorithm, value
    return "", ""


def mismatch(manifest: dict[str, Any] | None, digest: str, size: int, algorithm: str) -> str:
    """``""`` when ``digest`` (computed with ``algorithm``) and ``size`` match ``manifest``, else what differs.

    Returns:
        E.g. ``"does not match its xxh3_128 (corrupt)"``, ``"is 10 bytes, its
        manifest says 12 (truncated or corrupt)"``, or ``"has no checksum in its
        manifest"``.
    """
    want_alg, want = expected(manifest)
    if not want_alg:
        return "has no checksum in its manifest"
    if size != (manifest or {}).get("bytes"):
        return f"is {size} bytes, its manifest says {(manifest or {}).get('bytes')} (truncated or corrupt)"
    if want_alg != algorithm or digest != want:
        return f"does not match its {want_alg} (corrupt)"
    return ""


def verify_stream(manifest: dict[str, Any] | None, fh: IO[bytes]) -> str:
    """Hash ``fh`` with the algorithm ``manifest`` records and compare; ``""`` if it matches, else what differs."""
    algorithm, _ = expected(manifest)
    if not algorithm:
        return "has no checksum in its manifest"
    digest, size = of_stream(fh, algorithm)
    return mismatch(manifest, digest, size, algorithm)


def verify_bytes(manifest: dict[str, Any] | None, data: bytes | bytearray | memoryview) -> str:
    """Like :func:`verify_stream` for bytes in memory."""
    algorithm, _ = expected(manifest)
    if not algorithm:
        return "has no checksum in its manifest"
    return mismatch(manifest, of_bytes(data, algorithm), memoryview(data).nbytes, algorithm)
