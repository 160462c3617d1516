"""Where the ``railtrain`` commands get a manifest from: a file, or standard input for ``-``.

Every command that takes a manifest (``validate FILE``, ``validate --old
STORED``, ``submit FILE``, ``run FILE --local``) reads it through :func:`read`,
so ``-`` means standard input everywhere, as it does for ``kubectl apply -f -``
(``kustomize build | railtrain validate -``). Errors name the input as its path,
or as ``<stdin>``; a file literally named ``-`` is given as ``./-``.

Standard input is read once, whole; a command that needs the manifest twice
(``submit``: validate, then send) keeps the parsed document. Relative paths
inside a manifest (``spec.checkpoint.location`` in ``run --local``) resolve
against the current directory whichever way the manifest arrived, never against
the manifest file's folder, so reading it from standard input changes nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import IO, Any

from railtrain.crds.api import TrainingJob
from railtrain.crds.validation import ManifestError, manifest_document, parse_manifest, read_manifest_data

STDIN_ARG = "-"
"""The argument that means standard input."""
STDIN_SOURCE = "<stdin>"
"""How messages name standard input."""
_PIPE_HINT = "pipe one TrainingJob manifest in (e.g. 'cat job.yaml | railtrain validate -'), or give a file instead of '-'"
HELP = "TrainingJob manifest (YAML, one document); '-' reads it from standard input."
"""The ``--help`` text of a manifest argument."""


@dataclass(frozen=True)
class Manifest:
    """One manifest document as read, not yet validated.

    Attributes:
        data: the parsed YAML document (normally a mapping).
        source: the path as given, or ``<stdin>``; messages start with it.
    """

    data: Any
    source: str

    def job(self) -> TrainingJob:
        """The validated TrainingJob.

        Raises:
            ManifestError: the document does not match the API (one sentence per problem).
        """
        return parse_manifest(self.data, self.source)

    def checked_job(self) -> TrainingJob:
        """The validated TrainingJob whose command, when it is railtrain's trainer, the trainer would also accept.

        The trainer's own parser and degree checks run offline
        (:func:`railtrain.trainer.preflight.problems`), so a mistyped flag
        fails here instead of in every pod after the gang was placed.

        Raises:
            ManifestError: the document does not match the API, or the trainer
                refuses ``spec.args`` (the sentence quotes its reason).
        """
        return checked(self.job(), self.source)


def checked(job: TrainingJob, source: str) -> TrainingJob:
    """``job`` when railtrain's trainer would accept its arguments (see :meth:`Manifest.checked_job`).

    Raises:
        ManifestError: one sentence naming ``spec.args`` and what the trainer refused.
    """
    from railtrain.trainer.preflight import problems  # torch-free

    found = problems(job.spec)
    if found:
        raise ManifestError(found, source)
    return job


def is_stdin(arg: str | None) -> bool:
    """Whether a manifest argument, as typed, means standard input (it is exactly ``-``; ``./-`` is a file)."""
    return arg == STDIN_ARG


def read(arg: str, stdin: IO[Any] | None = None) -> Manifest:
    """Read the one YAML document of a manifest file, or of standard input when ``arg`` is ``-``.

    Args:
        arg: the path as typed on the command line (a string: ``Path("./-")``
            would lose the ``./`` that makes it a file), or ``-``.
        stdin: the stream to read for ``-``; default ``sys.stdin`` (its bytes
            when it has a binary buffer, so the UTF-8 check is ours, not the locale's).

    Returns:
        The :class:`Manifest` (unvalidated; call :meth:`Manifest.job`).

    Raises:
        ManifestError: the file is missing, a directory or unreadable;
            standard input is empty; the text is not UTF-8 YAML; or it holds
            more or fewer than one document (:func:`railtrain.crds.validation.manifest_document`).
    """
    if not is_stdin(arg):
        return Manifest(read_manifest_data(arg), str(arg))
    stream = sys.stdin if stdin is None else stdin
    if stream is None or stream.closed:
        raise ManifestError([f"no input (standard input is closed); {_PIPE_HINT}"], STDIN_SOURCE)
    if _isatty(stream):
        print("railtrain: reading the manifest from standard input (end it with Ctrl-D)", file=sys.stderr)
    buffer = getattr(stream, "buffer", None)
    try:
        raw = buffer.read() if buffer is not None else stream.read().encode("utf-8")
    except OSError as err:
        raise ManifestError([f"cannot read standard input: {err.strerror or 'input/output error'}"], STDIN_SOURCE) from None
    if not raw.strip():
        raise ManifestError([f"empty input; {_PIPE_HINT}"], STDIN_SOURCE)
    return Manifest(manifest_document(raw, STDIN_SOURCE), STDIN_SOURCE)


def _isatty(stream: IO[Any]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
