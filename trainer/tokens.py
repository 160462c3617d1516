"""Pre-tokenized token files: a flat binary of token ids and the declaration beside it.

The file is the nanoGPT/Megatron convention: token ids one after another, native
little-endian ``uint16`` or ``uint32``, no header. Its declaration is a small JSON
file beside it, ``<file>.json`` (``data.bin`` → ``data.bin.json``), written by
``railtrain data tokenize``::

    {"format": "railtrain-tokens", "version": 1, "dtype": "uint16", "vocab_size": 8192, "tokens": 1048576, ...}

A file without a declaration (e.g. nanoGPT's ``train.bin``) is declared with the
trainer's flags ``--token-dtype`` and ``--vocab-size`` instead (docs/data.md).

The file is opened with :class:`numpy.memmap` (read-only, nothing copied); every
id is checked once against the declared vocabulary, in chunks, so a file much
larger than memory is fine. torch-free: the ``railtrain`` CLI imports this module
to write the declaration.

Imports: numpy and the standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

FORMAT = "railtrain-tokens"
VERSION = 1
DTYPES = ("uint16", "uint32")
"""Token id types: uint16 for vocabularies up to 65,536 ids, uint32 above."""
SCAN_CHUNK = 1 << 24
"""Token ids checked per chunk when a file is opened (64 MiB of uint32)."""


def declaration_path(path: str) -> str:
    """Where the declaration of token file ``path`` lives: ``path + ".json"``."""
    return path + ".json"


def dtype_for(vocab_size: int) -> str:
    """The smallest of :data:`DTYPES` that holds every id below ``vocab_size``."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


@dataclass(frozen=True)
class Declaration:
    """What a token file holds.

    Attributes:
        dtype: one of :data:`DTYPES`.
        vocab_size: every id is below it (the tokenizer's vocabulary, special tokens included).
        tokens: the number of ids in the file, or ``None`` when unknown (declared by flags).
        source: the declaration file it came from; ``""`` when the trainer's flags declared it.
    """

    dtype: str
    vocab_size: int
    tokens: int | None = None
    source: str = ""

    def origin(self, flag: str) -> str:
        """What declared a value, for a sentence: the declaration file, else ``flag`` (e.g. ``--vocab-size 1000``)."""
        return self.source or flag

    def to_json(self, **extra: object) -> str:
        """The declaration file's text, with ``extra`` keys (e.g. the tokenizer's name) after the required ones."""
        body = {"format": FORMAT, "version": VERSION, "dtype": self.dtype, "vocab_size": self.vocab_size, "tokens": self.tokens, **extra}
        return json.dumps(body, indent=2) + "\n"


def read_declaration(path: str) -> Declaration | None:
    """The declaration beside token file ``path``, or ``None`` when there is none.

    Raises:
        ValueError: the declaration is not JSON, or its format, dtype, vocab_size or tokens are missing or
            malformed; one sentence naming the declaration file.
    """
    where = declaration_path(path)
    if not os.path.exists(where):
        return None
    try:
        with open(where, encoding="utf-8") as fh:
            body = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{where} (the declaration of --data {path}) cannot be read as JSON: {err}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError(f"{where} is not a token file declaration: it needs \"format\": \"{FORMAT}\" (railtrain data tokenize writes one)")
    dtype, vocab, tokens = body.get("dtype"), body.get("vocab_size"), body.get("tokens")
    if dtype not in DTYPES:
        raise ValueError(f"{where}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if not _positive_int(vocab):
        raise ValueError(f"{where}: vocab_size must be an integer >= 1, got {vocab!r}")
    if tokens is not None and not (_positive_int(tokens) or tokens == 0):
        raise ValueError(f"{where}: tokens must be an integer >= 0, got {tokens!r}")
    return Declaration(dtype, vocab, tokens, where)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def declare(path: str, token_dtype: str | None, vocab_size: int | None) -> Declaration:
    """The declaration of token file ``path``: its JSON declaration, else the flags.

    Args:
        path: the token file (``--data``).
        token_dtype: ``--token-dtype`` or ``None``.
        vocab_size: ``--vocab-size`` or ``None``: the model's vocabulary. With a declaration file it may exceed the
            declared vocabulary (padding, e.g. 50304 for GPT-2's 50257), never fall short of it.

    Raises:
        ValueError: no declaration and a flag missing; ``--token-dtype`` differs from the declared dtype;
            ``--vocab-size`` is smaller than the declared vocabulary; the declaration is malformed.
    """
    found = read_declaration(path)
    if found is None:
        if token_dtype is None or vocab_size is None:
            raise ValueError(
                f"--data-format tokens needs --token-dtype and --vocab-size for {path}, which has no declaration "
                f"{declaration_path(path)} (railtrain data tokenize writes one)"
            )
        return Declaration(token_dtype, vocab_size)
    if token_dtype is not None and token_dtype != found.dtype:
        raise ValueError(f"--token-dtype {token_dtype} differs from the dtype {found.dtype} declared in {found.source}; drop the flag")
    if vocab_size is not None and vocab_size < found.vocab_size:
        raise ValueError(
            f"--vocab-size {vocab_size} is smaller than the vocabulary of {found.vocab_size} declared in {found.source}: "
            "the model needs a row for every token id"
        )
    return found


def open_tokens(path: str, declared: Declaration) -> np.memmap:
    """Map token file ``path`` read-only and check it against its declaration.

    Returns:
        A 1-D read-only :class:`numpy.memmap` of ``declared.dtype`` (nothing is copied into memory).

    Raises:
        ValueError: the file is missing, is a directory, is empty, its length is not a multiple of the dtype's size,
            it holds another number of ids than declared, or an id is >= the declared vocabulary; one sentence naming
            ``--data`` and the file.
    """
    if not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "not a file"
        raise ValueError(f"--data {path} is {what}: --data-format tokens reads one token file (e.g. data.bin from railtrain data tokenize)")
    size, itemsize = os.path.getsize(path), np.dtype(declared.dtype).itemsize
    if size == 0:
        raise ValueError(f"--data {path} is empty")
    if size % itemsize:
        raise ValueError(f"--data {path} holds {size} bytes, not a multiple of {itemsize} ({declared.dtype} per token, from {declared.origin('--token-dtype')}): the file is truncated or its dtype is wrong")
    tokens = np.memmap(path, dtype=np.dtype(declared.dtype).newbyteorder("<"), mode="r")
    if declared.tokens is not None and len(tokens) != declared.tokens:
        raise ValueError(f"--data {path} holds {len(tokens)} tokens but {declared.source} declares {declared.tokens}: the file is truncated or not the one declared")
    for lo in range(0, len(tokens), SCAN_CHUNK):
        chunk = tokens[lo : lo + SCAN_CHUNK]
        top = int(chunk.max())
        if top >= declared.vocab_size:
            at = lo + int(np.argmax(chunk >= declared.vocab_size))
            raise ValueError(
                f"--data {path} holds token id {int(tokens[at])} at position {at}, outside the vocabulary of "
                f"{declared.vocab_size} declared by {declared.origin('--vocab-size')}"
            )
    return tokens
