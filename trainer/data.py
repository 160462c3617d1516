"""Training data: byte-level text or a pre-tokenized token file; sample training windows.

``--data-format bytes`` (the default): a data spec is a file, a directory (all files below it), a glob (``**``
allowed), or ``pkg://<package>/<glob>``, a glob inside an installed package
resolved with :mod:`importlib.resources` (``pkg://email/*.py`` is the standard
library's e-mail package source: real code and English prose on every Python);
token ids are the byte values (vocabulary 256). ``--data-format tokens``: one
flat binary of token ids with its declared dtype and vocabulary
(:mod:`railtrain.trainer.tokens`, docs/data.md), memory-mapped.

Sampling is stateless: the windows of step ``s`` are a pure function of
``(seed, s)``, and data-parallel rank ``r`` of ``d`` takes the ``r``-th of ``d``
equal slices of the global batch; under context parallelism, context-parallel
rank ``c`` of ``n`` then keeps its two chunks of every sequence of that slice
(:func:`railtrain.trainer.context_parallel.shard_positions`). A run resumed at step ``s`` therefore sees
exactly the batches an uninterrupted run would, and the global batch does not
depend on how many ranks share it. The "data position" to checkpoint is the step.
"""

from __future__ import annotations

import glob
import importlib.resources
import os
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

import numpy as np
import torch

from railtrain.trainer import tokens as token_files
from railtrain.trainer.context_parallel import shard_positions
from railtrain.trainer.presets import VOCAB_SIZE

PKG_SCHEME = "pkg://"

_MASK64 = (1 << 64) - 1


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a ``/``-separated glob into a regex over relative POSIX paths.

    ``*`` and ``?`` stay within one path segment, ``[...]`` is a character
    class, and a ``**`` segment matches zero or more directories (the
    ``glob.glob(recursive=True)`` rules).
    """
    out = []
    segments = pattern.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        j = 0
        while j < len(seg):
            ch = seg[j]
            if ch == "*":
                out.append("[^/]*")
            elif ch == "?":
                out.append("[^/]")
            elif ch == "[" and "]" in seg[j + 1 :]:
                end = seg.index("]", j + 1)
                body = seg[j + 1 : end]
                out.append("[^" + re.escape(body[1:]) + "]" if body.startswith("!") else "[" + re.escape(body) + "]")
                j = end
            else:
                out.append(re.escape(ch))
            j += 1
        if not last:
            out.append("/")
    return re.compile("".join(out) + r"\Z")


def _walk(node: Traversable, prefix: str = ""):
    for child in node.iterdir():
        rel = prefix + child.name
        if child.is_dir():
            if child.name != "__pycache__":
                yield from _walk(child, rel + "/")
        elif child.is_file():
            yield rel, child


def _package_files(spec: str) -> list[tuple[str, bytes]]:
    rest = spec[len(PKG_SCHEME) :]
    package, _, pattern = rest.partition("/")
    if not package or not pattern:
        raise ValueError(f"--data {spec!r} must look like 'pkg://<package>/<glob>', e.g. 'pkg://email/*.py'")
    try:
        root = importlib.resources.files(package)
    except (ModuleNotFoundError, TypeError) as err:
        raise ValueError(f"--data {spec!r}: package {package!r} cannot be imported ({err})") from None
    regex = glob_regex(pattern)
    matches = sorted((rel, node) for rel, node in _walk(root) if regex.match(rel))
    return [(f"{PKG_SCHEME}{package}/{rel}", node.read_bytes()) for rel, node in matches]


def _filesystem_files(spec: str) -> list[tuple[str, bytes]]:
    if os.path.isdir(spec):
        paths = glob.glob(os.path.join(spec, "**", "*"), recursive=True)
    elif glob.has_magic(spec):
        paths = glob.glob(spec, recursive=True)
    else:
        paths = [spec] if os.path.exists(spec) else []
    out = []
    for path in sorted(p for p in paths if os.path.isfile(p)):
        with open(path, "rb") as fh:
            out.append((path, fh.read()))
    return out


def resolve_files(spec: str) -> list[tuple[str, bytes]]:
    """Find and read the files a data spec names.

    Args:
        spec: a path, directory, glob, or ``pkg://<package>/<glob>``.

    Returns:
        ``(name, content)`` pairs sorted by name, so every rank and every run
        concatenates the same bytes in the same order.

    Raises:
        ValueError: the spec is malformed, its package cannot be imported, or it
            matches no non-empty file; the message names ``--data``.
    """
    files = _package_files(spec) if spec.startswith(PKG_SCHEME) else _filesystem_files(spec)
    files = [(name, content) for name, content in files if content]
    if not files:
        raise ValueError(f"--data {spec!r} matched no non-empty files")
    return files


@dataclass(frozen=True)
class ByteCorpus:
    """The concatenated bytes of a data spec's files.

    Attributes:
        tokens: uint8 tensor ``(n_bytes,)``; token ids are the byte values.
        names: the files it was read from, in order.
    """

    tokens: torch.Tensor
    names: tuple[str, ...]
    vocab_size: int = VOCAB_SIZE
    unit = "bytes"

    @classmethod
    def load(cls, spec: str) -> "ByteCorpus":
        """Read every file of ``spec`` (see :func:`resolve_files`, which names what it raises)."""
        files = resolve_files(spec)
        blob = b"".join(content for _, content in files)
        return cls(torch.frombuffer(bytearray(blob), dtype=torch.uint8), tuple(name for name, _ in files))

    def __len__(self) -> int:
        return self.tokens.numel()

    @property
    def nbytes(self) -> int:
        """Size of the data in bytes (what a checkpoint records as ``data_bytes``)."""
        return self.tokens.numel()

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """The token ids at ``index`` (int64 positions), as int64 of the same shape."""
        return self.tokens[index].long()


@dataclass(frozen=True)
class TokenCorpus:
    """A pre-tokenized token file, memory-mapped (:func:`railtrain.trainer.tokens.open_tokens`).

    Attributes:
        tokens: read-only 1-D :class:`numpy.memmap` of the declared dtype.
        names: the one file it maps.
        vocab_size: the model's vocabulary: ``--vocab-size``, else the declared one (never smaller).
    """

    tokens: np.ndarray
    names: tuple[str, ...]
    vocab_size: int
    unit = "tokens"

    @classmethod
    def load(cls, path: str, token_dtype: str | None = None, vocab_size: int | None = None) -> "TokenCorpus":
        """Map ``path`` with its declaration (:func:`railtrain.trainer.tokens.declare`, which names what it raises with
        :func:`~railtrain.trainer.tokens.open_tokens`)."""
        declared = token_files.declare(path, token_dtype, vocab_size)
        return cls(token_files.open_tokens(path, declared), (path,), vocab_size or declared.vocab_size)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        """Size of the token file in bytes (what a checkpoint records as ``data_bytes``)."""
        return int(self.tokens.nbytes)

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """The token ids at ``index`` (int64 positions), as int64 of the same shape; reads only those pages of the file."""
        return torch.from_numpy(self.tokens[index.numpy()].astype(np.int64))


Corpus = ByteCorpus | TokenCorpus


def load_corpus(spec: str, data_format: str = "bytes", token_dtype: str | None = None, vocab_size: int | None = None) -> Corpus:
    """The training data of ``--data`` read as ``--data-format``.

    Args:
        spec: ``--data``; data_format: ``"bytes"`` or ``"tokens"``.
        token_dtype, vocab_size: ``--token-dtype`` and ``--vocab-size`` (``None``: not given); under ``bytes`` the
            vocabulary is 256 and ``vocab_size`` may only pad it.

    Raises:
        ValueError: one sentence naming the flag or file (:meth:`ByteCorpus.load`, :meth:`TokenCorpus.load`);
            ``--vocab-size`` below 256 for bytes; a token file (one with a declaration beside it) read as bytes.
    """
    if data_format == "tokens":
        return TokenCorpus.load(spec, token_dtype, vocab_size)
    if os.path.isfile(spec) and os.path.isfile(token_files.declaration_path(spec)):
        raise ValueError(f"--data {spec} is a token file (declared by {token_files.declaration_path(spec)}): add --data-format tokens")
    if vocab_size is not None and vocab_size < VOCAB_SIZE:
        raise ValueError(f"--vocab-size {vocab_size} is smaller than the {VOCAB_SIZE} byte values of --data-format bytes")
    corpus = ByteCorpus.load(spec)
    return corpus if vocab_size is None else ByteCorpus(corpus.tokens, corpus.names, vocab_size)


def batch_seed(seed: int, step: int) -> int:
    """A 64-bit generator seed for ``(seed, step)``, decorrelated with splitmix64 (Steele et al. 2014)."""
    z = (seed * 0x9E3779B97F4A7C15 + step + 1) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class WindowSampler:
    """Deterministic (batch, seq) windows of a corpus, sharded by data-parallel rank.

    Args:
        corpus: the token ids to sample from (a :class:`ByteCorpus` or a :class:`TokenCorpus`).
        seq_len: tokens per sample (inputs and targets each have ``seq_len``).
        global_batch: samples per step summed over all data-parallel ranks.
        seed: data seed; with the step it fixes every window.
        dp_rank: this rank's index among the data-parallel ranks.
        dp_degree: number of data-parallel ranks; must divide ``global_batch``.
        cp_rank: this rank's index in its context-parallel group.
        cp_degree: context-parallel degree: each sequence is cut into
            ``2 × cp_degree`` chunks and this rank keeps chunks ``cp_rank``
            and ``2 × cp_degree - 1 - cp_rank``.

    Raises:
        ValueError: the corpus is shorter than ``seq_len + 1`` tokens, the
            batch does not split evenly across ranks, or the sequence does not
            split into ``2 × cp_degree`` chunks.
    """

    def __init__(
        self, corpus: Corpus, seq_len: int, global_batch: int, seed: int, dp_rank: int = 0, dp_degree: int = 1, cp_rank: int = 0, cp_degree: int = 1
    ) -> None:
        if len(corpus) < seq_len + 1:
            raise ValueError(f"--data holds {len(corpus)} {corpus.unit}, fewer than --seq-len + 1 = {seq_len + 1}")
        if global_batch % dp_degree:
            raise ValueError(f"--batch-size {global_batch} is not divisible by the data-parallel degree {dp_degree}")
        if not 0 <= dp_rank < dp_degree:
            raise ValueError(f"data-parallel rank {dp_rank} is outside [0, {dp_degree})")
        self.corpus = corpus
        self.seq_len = seq_len
        self.global_batch = global_batch
        self.seed = seed
        self.dp_rank = dp_rank
        self.local_batch = global_batch // dp_degree
        self._offsets = torch.arange(seq_len + 1)
        self._positions = shard_positions(seq_len, cp_degree, cp_rank) if cp_degree > 1 else None

    def global_starts(self, step: int) -> torch.Tensor:
        """Start offsets (int64, ``(global_batch,)``) of every window of ``step``, on all ranks alike."""
        gen = torch.Generator().manual_seed(batch_seed(self.seed, step))
        return torch.randint(0, len(self.corpus) - self.seq_len, (self.global_batch,), generator=gen)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's inputs and targets for ``step``.

        Returns:
            ``(inputs, targets)``, both int64 ``(local_batch, seq_len / cp_degree)``
            on the CPU; ``targets[:, t]`` is the token after ``inputs[:, t]``.
        """
        lo = self.dp_rank * self.local_batch
        starts = self.global_starts(step)[lo : lo + self.local_batch]
        windows = self.corpus.take(starts[:, None] + self._offsets)
        inputs, targets = windows[:, :-1], windows[:, 1:]
        if self._positions is not None:
            inputs, targets = inputs[:, self._positions], targets[:, self._positions]
        return inputs, targets

    def state(self) -> dict[str, int]:
        """What a checkpoint needs to check that a resume samples the same stream."""
        return {"data_seed": self.seed, "data_bytes": self.corpus.nbytes, "global_batch": self.global_batch, "seq_len": self.seq_len}
