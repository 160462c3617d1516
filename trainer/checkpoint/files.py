"""Checkpoint files: step directories, manifests with checksums, and the storages that hold them.

Two layouts, both ``<root>/step-<N>/``:

* **global** (the persistent tier, :class:`LocalStorage` or
  :class:`FsspecStorage`): one ``torch.distributed.checkpoint`` (DCP)
  checkpoint written by all ranks together (``__<rank>_<i>.distcp`` and
  ``.metadata``), then :data:`MANIFEST`, written last by rank 0: the step, the
  training integers, the world size, and the size and checksum of every file
  (:mod:`~railtrain.trainer.checkpoint.checksum`).
  DCP can load it at any world size (it reshards).
* **per rank** (the memory and local tiers, :class:`ShardDir`):
  ``rank-<R>.pt`` is rank R's own shard (its local tensors, ``torch.save``)
  and ``rank-<R>.json`` its manifest; ``peer-<R>.pt``/``peer-<R>.json`` is a
  copy of rank R's shard kept on another node. Such a checkpoint loads only
  at the world size and layout it was saved with.

Writers write the data first and the manifest last (a temporary file, then a
rename), so a step whose manifest is missing or unreadable is a save that was
cut short and is never loaded. Nothing here uses ``torch.distributed``'s
collectives.

Imports: the standard library, DCP's storage classes (fsspec lazily), :mod:`.checksum`
and :mod:`.retention`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Iterator, Protocol

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter, StorageReader, StorageWriter

from railtrain.trainer.checkpoint import checksum
from railtrain.trainer.checkpoint.retention import newest_good, prune_plan

MANIFEST = "railtrain-manifest.json"
"""The global manifest in ``step-<N>/``; written last, its presence makes the checkpoint complete."""
GLOBAL_FORMAT = "railtrain-dcp/1"
SHARD_FORMAT = "railtrain-shard/1"
_STEP_DIR = re.compile(r"step-(\d+)\Z")
_SHARD_FILE = re.compile(r"(rank|peer)-(\d+)\.(pt|json)\Z")


def write_atomic(path: str, data: bytes, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through ``<path>.tmp`` and ``os.replace``, so readers never see half of it."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def parse_manifest(raw: bytes | str | None, fmt: str) -> dict[str, Any] | None:
    """A manifest of format ``fmt`` as a dict, or ``None`` if missing, unreadable or another format."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != fmt or not isinstance(data.get("step"), int):
        return None
    return data


def _steps_in(names: Iterator[str] | list[str]) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_STEP_DIR.match, names) if m)


# --- the global layout ---------------------------------------------------------


class CheckpointStorage(Protocol):
    """Where global checkpoints live: what retention and "which one do I resume from" need."""

    def list_steps(self) -> list[int]:
        """Steps that have a ``step-<N>`` directory, complete or not, ascending."""
        ...

    def is_complete(self, step: int) -> bool:
        """Whether ``step``'s checkpoint has its manifest."""
        ...

    def mark_complete(self, step: int, manifest: dict) -> None:
        """Write the manifest of ``step`` atomically."""
        ...

    def remove(self, step: int) -> None:
        """Delete ``step``'s checkpoint (missing is fine)."""
        ...

    def path(self, step: int) -> str:
        """The DCP ``checkpoint_id`` of ``step``."""
        ...


def _recording(base: type) -> type:
    """A DCP writer class that remembers the files this rank wrote (``.written``), for their checksums."""

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.written: list[str] = []

        def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
            fut = super().write_data(plan, planner)
            self.written = sorted({r.storage_data.relative_path for r in fut.wait()})
            return fut

    Recording.__name__ = f"Recording{base.__name__}"
    return Recording


_RecordingFileSystemWriter = _recording(FileSystemWriter)


class LocalStorage:
    """Global checkpoints in a local or mounted directory; ``file://`` prefixes are stripped."""

    def __init__(self, root: str) -> None:
        self.root = root.removeprefix("file://")
        self.url = self.root

    def path(self, step: int) -> str:
        """``<root>/step-<step>``."""
        return os.path.join(self.root, f"step-{step}")

    def list_steps(self) -> list[int]:
        """Steps with a ``step-<N>`` directory under the root, ascending (``[]`` if the root is missing)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return [s for s in _steps_in(names) if os.path.isdir(self.path(s))]

    def is_complete(self, step: int) -> bool:
        """Whether ``step-<step>/`` holds :data:`MANIFEST`."""
        return os.path.isfile(os.path.join(self.path(step), MANIFEST))

    def read_manifest(self, step: int) -> dict[str, Any] | None:
        """The parsed manifest of ``step``, or ``None``."""
        try:
            with open(os.path.join(self.path(step), MANIFEST), "rb") as fh:
                return parse_manifest(fh.read(), GLOBAL_FORMAT)
        except OSError:
            return None

    def mark_complete(self, step: int, manifest: dict) -> None:
        """Write :data:`MANIFEST` via a temporary file and ``os.replace``."""
        write_atomic(os.path.join(self.path(step), MANIFEST), json.dumps(manifest, indent=1, sort_keys=True).encode())

    def remove(self, step: int) -> None:
        """Delete ``step-<step>/``, its manifest first (so a half-deleted one is not complete)."""
        try:
            os.remove(os.path.join(self.path(step), MANIFEST))
        except FileNotFoundError:
            pass
        shutil.rmtree(self.path(step), ignore_errors=True)

    def hash_file(self, step: int, name: str, algorithm: str = checksum.ALGORITHM) -> tuple[str, int]:
        """``(hex digest, bytes)`` of file ``name`` of ``step`` with ``algorithm``.

        Raises:
            OSError: it cannot be read.
        """
        with open(os.path.join(self.path(step), name), "rb") as fh:
            return checksum.of_stream(fh, algorithm)

    def writer(self, step: int) -> StorageWriter:
        """A DCP writer into ``step``'s directory that records the files it wrote."""
        return _RecordingFileSystemWriter(self.path(step), thread_count=2, overwrite=True)

    def reader(self, step: int) -> StorageReader:
        """A DCP reader of ``step``'s directory."""
        return FileSystemReader(self.path(step))


class FsspecStorage:
    """Global checkpoints behind an fsspec URI (``s3://``, ``gs://``, ``memory://`` ...).

    Raises:
        ValueError: fsspec does not know the protocol, or its package is not installed.
    """

    def __init__(self, url: str) -> None:
        import fsspec
        from fsspec.core import url_to_fs

        protocol = url.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
            self.fs, self.root = url_to_fs(url)
        except (ImportError, ValueError) as err:
            raise ValueError(f"checkpoint location {url!r}: fsspec cannot open {protocol}:// ({err})") from None
        self.url = url.rstrip("/")
        self.root = self.root.rstrip("/")

    def _p(self, step: int, name: str = "") -> str:
        return f"{self.root}/step-{step}" + (f"/{name}" if name else "")

    def path(self, step: int) -> str:
        """``<url>/step-<step>``."""
        return f"{self.url}/step-{step}"

    def list_steps(self) -> list[int]:
        """Steps with a ``step-<N>`` directory under the root, ascending."""
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return _steps_in([e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory"])

    def is_complete(self, step: int) -> bool:
        """Whether ``step`` has :data:`MANIFEST`."""
        return bool(self.fs.exists(self._p(step, MANIFEST)))

    def read_manifest(self, step: int) -> dict[str, Any] | None:
        """The parsed manifest of ``step``, or ``None``."""
        try:
            return parse_manifest(self.fs.cat_file(self._p(step, MANIFEST)), GLOBAL_FORMAT)
        except (OSError, FileNotFoundError):
            return None

    def mark_complete(self, step: int, manifest: dict) -> None:
        """Write :data:`MANIFEST` in one put (atomic on object stores; a torn local write does not parse)."""
        self.fs.pipe_file(self._p(step, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True).encode())

    def remove(self, step: int) -> None:
        """Delete ``step``, its manifest first."""
        for target, recursive in ((self._p(step, MANIFEST), False), (self._p(step), True)):
            try:
                self.fs.rm(target, recursive=recursive)
            except FileNotFoundError:
                pass

    def hash_file(self, step: int, name: str, algorithm: str = checksum.ALGORITHM) -> tuple[str, int]:
        """``(hex digest, bytes)`` of file ``name`` of ``step`` with ``algorithm``."""
        with self.fs.open(self._p(step, name), "rb") as fh:
            return checksum.of_stream(fh, algorithm)

    def writer(self, step: int) -> StorageWriter:
        """A DCP ``FsspecWriter`` into ``step`` that records the files it wrote."""
        from torch.distributed.checkpoint import FsspecWriter

        return _recording(FsspecWriter)(self.path(step), overwrite=True)

    def reader(self, step: int) -> StorageReader:
        """A DCP ``FsspecReader`` of ``step``."""
        from torch.distributed.checkpoint import FsspecReader

        return FsspecReader(self.path(step))


def open_storage(location: str) -> LocalStorage | FsspecStorage:
    """:class:`LocalStorage` for a path or ``file://``, else :class:`FsspecStorage`.

    Raises:
        ValueError: the URI's protocol is unknown to fsspec or its package is missing.
    """
    if "://" not in location or location.startswith("file://"):
        return LocalStorage(location)
    return FsspecStorage(location)


# --- the per-rank layout --------------------------------------------------------


class ShardDir:
    """A node-local tier directory of per-rank shards (see the module docstring).

    ``kind`` is ``"rank"`` for a rank's own shard and ``"peer"`` for a copy of
    another node's rank held here.
    """

    def __init__(self, root: str, fsync: bool) -> None:
        self.root = root
        self.fsync = fsync

    def step_dir(self, step: int) -> str:
        """``<root>/step-<step>``."""
        return os.path.join(self.root, f"step-{step}")

    def data_path(self, step: int, kind: str, rank: int) -> str:
        """The file of a shard's bytes."""
        return self._paths(step, kind, rank)[0]

    def _paths(self, step: int, kind: str, rank: int) -> tuple[str, str]:
        base = os.path.join(self.step_dir(step), f"{kind}-{rank}")
        return base + ".pt", base + ".json"

    def begin(self, step: int, kind: str, rank: int) -> str:
        """Prepare to write a shard: create the step directory, remove any manifest and data it had
        (so the old manifest never vouches for new bytes); returns the data file's path."""
        path, manifest = self._paths(step, kind, rank)
        os.makedirs(self.step_dir(step), exist_ok=True)
        for stale in (manifest, path):
            try:
                os.remove(stale)
            except FileNotFoundError:
                pass
        return path

    def write_data(self, step: int, kind: str, rank: int, data: bytes | memoryview) -> None:
        """Write a shard's bytes (see :meth:`begin`)."""
        path = self.begin(step, kind, rank)
        with open(path, "wb") as fh:
            fh.write(data)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())

    def write_manifest(self, step: int, kind: str, rank: int, manifest: dict[str, Any]) -> None:
        """Write a shard's manifest, after its data."""
        write_atomic(self._paths(step, kind, rank)[1], json.dumps(manifest, sort_keys=True).encode(), self.fsync)

    def read_manifest(self, step: int, kind: str, rank: int) -> dict[str, Any] | None:
        """A shard's parsed manifest, or ``None``."""
        try:
            with open(self._paths(step, kind, rank)[1], "rb") as fh:
                return parse_manifest(fh.read(), SHARD_FORMAT)
        except OSError:
            return None

    def read_data(self, step: int, kind: str, rank: int) -> bytes:
        """A shard's bytes.

        Raises:
            OSError: missing or unreadable.
        """
        with open(self._paths(step, kind, rank)[0], "rb") as fh:
            return fh.read()

    def remove(self, step: int, kind: str, rank: int) -> None:
        """Delete a shard (manifest first) and the step directory once it is empty."""
        for path in reversed(self._paths(step, kind, rank)):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.step_dir(step))
        except OSError:
            pass  # other shards are still there

    def entries(self) -> dict[tuple[str, int], dict[int, bool]]:
        """Every shard on disk: ``{(kind, rank): {step: has_manifest}}``."""
        out: dict[tuple[str, int], dict[int, bool]] = {}
        try:
            steps = _steps_in(os.listdir(self.root))
        except FileNotFoundError:
            return out
        for step in steps:
            try:
                names = os.listdir(self.step_dir(step))
            except OSError:
                continue
            for m in map(_SHARD_FILE.match, names):
                if m:
                    seen = out.setdefault((m.group(1), int(m.group(2))), {})
                    seen[step] = seen.get(step, False) or m.group(3) == "json"
        return out

    def prune(self, kind: str, rank: int, keep: int) -> list[int]:
        """Apply retention to one shard series (:func:`~railtrain.trainer.checkpoint.retention.prune_plan`); returns the steps removed."""
        series = self.entries().get((kind, rank), {})
        good = newest_good([s for s, ok in series.items() if ok], lambda s: self.read_manifest(s, kind, rank))
        doomed = prune_plan(series, keep, good)
        for step in doomed:
            self.remove(step, kind, rank)
        return doomed
