"""``railtrain data tokenize``: turn a folder of text files into a token file the built-in trainer reads.

The output is a flat binary of token ids (the nanoGPT/Megatron convention) and its declaration
``<out>.json`` (dtype, vocabulary size, token count; :mod:`railtrain.trainer.tokens`), trained on with
``python -m railtrain.trainer --data <out> --data-format tokens`` (docs/data.md).

The tokenizer is a file the user gives: a Hugging Face ``tokenizers`` ``tokenizer.json``, loaded with
``Tokenizer.from_file`` (nothing is downloaded). ``tokenizers`` and numpy are imported only when the
command runs (the ``data`` extra: ``pip install 'railtrain[data]'``). tiktoken is not supported: its
encodings are fetched at run time, or need their split pattern supplied by hand beside a ``.tiktoken``
file, which the file itself does not record.

Both files are written under temporary names in the output's folder and renamed at the end: a failure or
Ctrl-C leaves no half-written output.
"""

from __future__ import annotations

import contextlib
import glob
import os
import uuid
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from railtrain.cli.errors import CliError
from railtrain.cli.options import say

data_app = typer.Typer(help="Training data for the built-in trainer: tokenize a folder of text files into a token file.", no_args_is_help=True)


@data_app.command("tokenize")
def data_tokenize(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="The folder of text files (UTF-8), read in sorted path order.", show_default=False)],
    tokenizer: Annotated[Path, typer.Option("--tokenizer", metavar="FILE", help="A Hugging Face tokenizers tokenizer.json (read from the file; nothing is downloaded).", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="The token file to write; its declaration goes to FILE.json beside it.")] = Path("data.bin"),
    pattern: Annotated[str, typer.Option("--glob", metavar="PATTERN", help="Which files under DIR to read (** crosses folders; hidden files are skipped).")] = "**/*",
    eot: Annotated[Optional[str], typer.Option("--eot", metavar="TOKEN", help="A token of the tokenizer (e.g. '<|endoftext|>') appended after each file, so the model sees where documents end.", show_default=False)] = None,
) -> None:
    """Tokenize every text file under DIR into a flat binary of token ids plus its declaration (dtype, vocabulary).

    The ids are uint16 when the tokenizer's vocabulary (added tokens included) fits, else uint32.
    Train on the result with: python -m railtrain.trainer --data FILE --data-format tokens (docs/data.md).

    Example: railtrain data tokenize corpus/ --tokenizer tokenizer.json --out data.bin
    """
    files = text_files(folder, pattern)
    tok = load_tokenizer(tokenizer)
    eot_id = None
    if eot is not None:
        eot_id = tok.token_to_id(eot)
        if eot_id is None:
            raise CliError(f"--eot {eot!r} is not a token of {tokenizer}; give one of its special tokens or leave --eot out", exit_code=2)
    if not out.parent.is_dir():
        raise CliError(f"--out {out}: its folder {out.parent} does not exist", exit_code=2)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    tokens, dtype = write_tokens(files, tok, out, vocab, eot_id, {"tokenizer": tokenizer.name, "files": len(files), "eot": eot})
    typer.echo(f"{out}: {tokens} tokens ({dtype}, vocabulary {vocab}) from {len(files)} {'file' if len(files) == 1 else 'files'}; declaration {out}.json")
    say(f"train on it with: python -m railtrain.trainer --data {out} --data-format tokens")


def text_files(folder: Path, pattern: str) -> list[Path]:
    """The files ``pattern`` matches under ``folder``, sorted by path (hidden ones skipped, as :func:`glob.glob` does).

    Raises:
        CliError: (exit 2) ``folder`` is not a directory, or no file matches.
    """
    if not folder.is_dir():
        raise CliError(f"DIR {folder} is not a directory", exit_code=2)
    files = sorted(Path(p) for p in glob.glob(os.path.join(glob.escape(str(folder)), pattern), recursive=True) if os.path.isfile(p))
    if not files:
        raise CliError(f"no files match --glob {pattern!r} under {folder}", exit_code=2)
    return files


def load_tokenizer(path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` read from ``path``.

    Raises:
        CliError: (exit 2) ``tokenizers`` is not installed, or ``path`` is missing or not a tokenizer.json it can read.
    """
    try:
        from tokenizers import Tokenizer
    except ModuleNotFoundError:
        raise CliError("railtrain data tokenize needs the tokenizers library: pip install 'railtrain[data]'", exit_code=2) from None
    if not path.is_file():
        raise CliError(f"--tokenizer {path} is not a file (give a Hugging Face tokenizer.json)", exit_code=2)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # noqa: BLE001 - tokenizers raises plain Exception for a file it cannot parse
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise CliError(f"--tokenizer {path} cannot be read as a Hugging Face tokenizer.json ({first})", exit_code=2) from None


def write_tokens(files: list[Path], tok: Any, out: Path, vocab: int, eot_id: int | None, extra: dict[str, object]) -> tuple[int, str]:
    """Encode ``files`` in order with ``tok`` (no special tokens added, ``eot_id`` after each file when given) into
    ``out`` and its declaration ``out.json``, both renamed into place only when complete.

    Returns:
        ``(tokens written, dtype)``.

    Raises:
        CliError: (exit 2) a file is not UTF-8 text, or the files hold no tokens at all; nothing is left behind.
    """
    import numpy as np
    from railtrain.trainer.tokens import Declaration, declaration_path, dtype_for

    dtype = dtype_for(vocab)
    little = np.dtype(dtype).newbyteorder("<")
    temps: list[str] = []
    try:
        bin_tmp = _temporary(out)
        temps.append(bin_tmp)
        count = 0
        with open(bin_tmp, "xb") as fh:  # created with the umask's mode, like the file it replaces
            for path in files:
                ids = tok.encode(_read_text(path), add_special_tokens=False).ids
                if eot_id is not None:
                    ids.append(eot_id)
                np.asarray(ids, dtype=little).tofile(fh)
                count += len(ids)
        if count == 0:
            raise CliError(f"the matched files ({len(files)}) hold no text to tokenize", exit_code=2)
        json_tmp = _temporary(out)
        temps.append(json_tmp)
        with open(json_tmp, "x", encoding="utf-8") as fh:
            fh.write(Declaration(dtype, vocab, count).to_json(**extra))
        os.replace(bin_tmp, out)
        os.replace(json_tmp, declaration_path(str(out)))
        temps.clear()
        return count, dtype
    finally:
        for leftover in temps:
            with contextlib.suppress(OSError):  # already gone
                os.unlink(leftover)


def _temporary(out: Path) -> str:
    """A new hidden name beside ``out`` for a file renamed onto it when complete."""
    return str(out.parent / f".{out.name}.{uuid.uuid4().hex[:12]}.tmp")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CliError(f"{path} is not UTF-8 text (byte {err.start}); narrow the files with --glob, e.g. '**/*.txt'", exit_code=2) from None
    except OSError as err:
        raise CliError(f"{path} cannot be read: {err.strerror}", exit_code=2) from None

