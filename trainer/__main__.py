"""Entry point: ``python -m railtrain.trainer`` or ``torchrun ... -m railtrain.trainer``.

Exit codes follow :mod:`railtrain.crds.contract`: 0 done, 2 bad input (one
line on stderr naming the flag or variable, no traceback), 1 anything else.
On failure the process also leaves its verdict in the termination message
(:func:`railtrain.crds.contract.write_termination_message`), because torchrun
turns every failed worker's exit code into 1: a health check's verdict
(``hardware-suspect``, ``straggler``, ``user-error`` for a data anomaly; ``hang`` is
written by the watchdog thread itself) with its suspects; ``user-error`` for bad input
(and for running out of device memory, which a retry with the same settings
would repeat), ``retryable`` for anything else, with the exception's class as
the reason.
"""

from __future__ import annotations

import re
import sys
from typing import Sequence

import torch

from railtrain.crds.contract import EXIT_FAILED, EXIT_OK, EXIT_USER_ERROR, VERDICT_RETRYABLE, VERDICT_USER_ERROR, write_termination_message
from railtrain.trainer.config import ArgumentsError, parse_args
from railtrain.trainer.health.monitor import HealthVerdict
from railtrain.trainer.parallel import shutdown_distributed
from railtrain.trainer.train import Trainer


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), train, and return the exit code."""
    try:
        trainer = Trainer(parse_args(argv))
    except ValueError as err:  # includes contract.ContractError and argparse's refusal (ArgumentsError)
        print(f"railtrain.trainer: error: {err}", file=sys.stderr, flush=True)
        reason = "InvalidArguments" if isinstance(err, ArgumentsError) else "InvalidConfiguration"
        write_termination_message(VERDICT_USER_ERROR, reason, str(err))
        shutdown_distributed()
        return EXIT_USER_ERROR
    try:
        trainer.train()
    except Exception as err:
        verdict = err if isinstance(err, HealthVerdict) else trainer.health.shared_hang()
        if verdict is None:
            kind, reason = verdict_of(err)
            # the reason already names the exception's class when it can; the message does not repeat it
            write_termination_message(kind, reason, str(err) if reason == type(err).__name__ else f"{type(err).__name__}: {err}")
            raise
        # a finding, not a bug: one line, no traceback
        print(f"railtrain.trainer: health: verdict={verdict.verdict} reason={verdict.reason} ranks={verdict.ranks} nodes={verdict.nodes} step={verdict.step}: {verdict.message}", file=sys.stderr, flush=True)
        write_termination_message(verdict.verdict, verdict.reason, verdict.message, **verdict.details())
        return EXIT_USER_ERROR if verdict.verdict == VERDICT_USER_ERROR else EXIT_FAILED
    finally:
        trainer.close()
    return EXIT_OK


def verdict_of(err: BaseException) -> tuple[str, str]:
    """``(verdict, reason)`` of an exception raised while training."""
    if isinstance(err, torch.OutOfMemoryError):
        return VERDICT_USER_ERROR, "OutOfMemory"
    if isinstance(err, FloatingPointError):
        return VERDICT_RETRYABLE, "LossNotFinite"
    name = type(err).__name__
    return VERDICT_RETRYABLE, name if re.fullmatch(r"[A-Z][A-Za-z0-9]*", name) else "TrainerFailed"


if __name__ == "__main__":
    sys.exit(main())
