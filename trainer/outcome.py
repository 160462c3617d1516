"""The verdict writer: any exception or detector finding becomes the termination message and exit code the operator acts on.

Part of the library surface :mod:`railtrain.trainer` (docs/library.md), and what ``python -m railtrain.trainer``
itself uses. The rules (docs/contract.md, "Exit codes" and "The termination message"):

* a health finding (:class:`~railtrain.trainer.health.verdict.HealthVerdict`, or the gang's shared hang verdict):
  its own verdict, suspects and evidence; exit 2 when it is ``user-error``, else 1; one line, no traceback;
* bad input: a contract variable missing or malformed (:class:`~railtrain.crds.contract.ContractError`,
  ``InvalidConfiguration``), a checkpoint of another model (``CheckpointMismatch``), a state that turned
  non-finite (``NonFiniteUpdate``), running out of device memory (``OutOfMemory``): ``user-error``, exit 2, one line;
* anything else: ``retryable`` with the exception's class as the reason, exit 1, and the caller re-raises it
  (the traceback is a bug's evidence).

Imports: torch (only for its out-of-memory class), :mod:`railtrain.crds`, the trainer's health verdict and
checkpoint errors.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Protocol

import torch
from railtrain.crds import contract
from railtrain.crds.process import say
from railtrain.trainer.checkpoint.state import CheckpointMismatch, NonFiniteState
from railtrain.trainer.health.verdict import HealthVerdict

_WRITTEN = "_railtrain_verdict_written"
"""Attribute set on an exception whose verdict :func:`exit_with_verdict` has written."""


class _SharesHang(Protocol):
    def shared_hang(self) -> HealthVerdict | None: ...


def verdict_of(err: BaseException) -> tuple[str, str]:
    """``(verdict, reason)`` of an exception raised while training (not a :class:`HealthVerdict`, which carries its own).

    Returns:
        ``user-error`` with ``OutOfMemory``, ``CheckpointMismatch``, ``NonFiniteUpdate`` or ``InvalidConfiguration``
        (a :class:`~railtrain.crds.contract.ContractError`); ``retryable`` ``LossNotFinite`` for a
        ``FloatingPointError``; else ``retryable`` with the class name (``TrainerFailed`` if it is not CamelCase).
    """
    if isinstance(err, torch.OutOfMemoryError):
        return contract.VERDICT_USER_ERROR, "OutOfMemory"
    if isinstance(err, CheckpointMismatch):
        return contract.VERDICT_USER_ERROR, contract.REASON_CHECKPOINT_MISMATCH
    if isinstance(err, NonFiniteState):
        return contract.VERDICT_USER_ERROR, contract.REASON_NON_FINITE_UPDATE
    if isinstance(err, contract.ContractError):
        return contract.VERDICT_USER_ERROR, "InvalidConfiguration"
    if isinstance(err, FloatingPointError):
        return contract.VERDICT_RETRYABLE, "LossNotFinite"
    name = type(err).__name__
    return contract.VERDICT_RETRYABLE, name if re.fullmatch(r"[A-Z][A-Za-z0-9]*", name) else "TrainerFailed"


def failure_verdict(err: BaseException) -> tuple[str, str, str]:
    """``(verdict, reason, message)`` of an exception that ended the trainer (:func:`verdict_of`).

    The message is the exception's own text; it names the class only when the reason does
    not (``"ValueError: ..."`` under ``TrainerFailed``), and says so when the text is empty.
    """
    kind, reason = verdict_of(err)
    try:
        text = str(err).strip() or f"{type(err).__name__} with no message"
    except Exception:  # noqa: BLE001 - a library's __str__ that fails must not cost the verdict
        text = repr(err)
    plain = reason == type(err).__name__ or isinstance(err, (CheckpointMismatch, NonFiniteState, contract.ContractError))
    return kind, reason, text if plain else f"{type(err).__name__}: {text}"


def expected(err: BaseException, shared: HealthVerdict | None = None) -> bool:
    """Whether ``err`` ends the run as a finding or bad input (one line, no traceback) rather than as a bug.

    Args:
        err: what ended the loop; shared: the gang's hang verdict, if a watchdog set one.
    """
    return shared is not None or isinstance(err, HealthVerdict) or verdict_of(err)[0] == contract.VERDICT_USER_ERROR and not isinstance(err, torch.OutOfMemoryError)


def write_verdict(err: BaseException, *, shared: HealthVerdict | None = None, prog: str = "railtrain") -> int:
    """Write the termination message for ``err`` and return the exit code the process should end with.

    For a finding or bad input (:func:`expected`) one line goes to stderr (``<prog>: health: verdict=...`` or
    ``<prog>: error: ...``); for anything else nothing is printed: the caller re-raises ``err`` for its traceback.
    The message is written only where one is collected (docs/contract.md: the file must exist).

    Args:
        err: the exception that ended the loop (a :class:`HealthVerdict` for a detector's finding).
        shared: the gang's hang verdict (``StepHook.shared_hang()``): a rank whose collective broke because a hung
            peer's process ended reports the hang instead of its own error.
        prog: the name the stderr line starts with.

    Returns:
        :data:`~railtrain.crds.contract.EXIT_USER_ERROR` (2) for ``user-error``, else
        :data:`~railtrain.crds.contract.EXIT_FAILED` (1).
    """
    finding = shared if shared is not None else err if isinstance(err, HealthVerdict) else None
    if finding is not None:
        say(f"{prog}: health: verdict={finding.verdict} reason={finding.reason} ranks={finding.ranks} nodes={finding.nodes} step={finding.step}: {finding.message}")
        contract.write_termination_message(finding.verdict, finding.reason, finding.message, **finding.details())
        return contract.EXIT_USER_ERROR if finding.verdict == contract.VERDICT_USER_ERROR else contract.EXIT_FAILED
    kind, reason, message = failure_verdict(err)
    contract.write_termination_message(kind, reason, message)
    if expected(err):
        say(f"{prog}: error: {err}")
    return contract.EXIT_USER_ERROR if kind == contract.VERDICT_USER_ERROR else contract.EXIT_FAILED


@contextlib.contextmanager
def exit_with_verdict(hook: _SharesHang | None = None, prog: str = "railtrain") -> Iterator[None]:
    """Run a training loop inside ``with exit_with_verdict(hook):``; whatever ends it leaves a verdict.

    A finding or bad input writes its message and one line, then raises ``SystemExit`` with its exit code (2 for
    ``user-error``, 1 otherwise); any other exception writes a ``retryable`` message and propagates unchanged
    (traceback and all; Python exits 1). ``SystemExit`` passes untouched (the loop's own ``sys.exit(code)``:
    the operator judges the code, docs/contract.md). Blocks nest: the inner one (given the hook) writes the
    verdict, the outer one (around the set-up, e.g. :func:`read_contract`) does not write it again.

    Args:
        hook: a :class:`~railtrain.trainer.hook.StepHook` (or anything with ``shared_hang()``), for the gang's
            shared hang verdict; ``None``: no hang detection.
        prog: the name the stderr line starts with.

    Raises:
        SystemExit: the exit code of a finding or bad input.
    """
    try:
        yield
    except SystemExit:  # the loop's own exit code (or an inner exit_with_verdict's): the operator reads it as is
        raise
    except BaseException as err:
        if getattr(err, _WRITTEN, False):  # an inner exit_with_verdict wrote it
            raise
        shared = hook.shared_hang() if hook is not None else None
        code = write_verdict(err, shared=shared, prog=prog)
        if expected(err, shared):
            raise SystemExit(code) from None
        try:
            setattr(err, _WRITTEN, True)
        except AttributeError:  # an exception type without a __dict__: at worst written twice, the same text
            pass
        raise
