"""Entry point: ``python -m railtrain.trainer`` or ``torchrun ... -m railtrain.trainer``.

Exit codes follow :mod:`railtrain.crds.contract`: 0 done, 2 bad input (one
line on stderr naming the flag or variable, no traceback), 1 anything else.
On failure the process also leaves its verdict in the termination message
(:func:`railtrain.crds.contract.write_termination_message`), because torchrun
turns every failed worker's exit code into 1: a health check's verdict
(``hardware-suspect``, ``straggler``, ``user-error`` for a data anomaly; ``hang`` is
written by the watchdog thread itself) with its suspects; ``user-error`` for bad input,
for a checkpoint written by another model (``CheckpointMismatch``, naming the tensor),
for a run whose updates or state turned non-finite (``NonFiniteUpdate``: a health verdict during
training, or no finite checkpoint to resume from)
and for running out of device memory, which a retry with the same settings
would repeat; ``retryable`` for anything else, with the exception's class as
the reason. Every exception that ends the trainer gets one, ``BaseException``
subclasses included (torch's ``CheckpointException`` is one); only ``SystemExit(0)``
does not.
"""

from __future__ import annotations

from typing import Sequence

from railtrain.crds.contract import EXIT_OK, EXIT_USER_ERROR, VERDICT_USER_ERROR, write_termination_message
from railtrain.trainer.config import ArgumentsError, parse_args
from railtrain.trainer.health.monitor import HealthVerdict
from railtrain.trainer.outcome import expected, failure_verdict, verdict_of, write_verdict  # noqa: F401  (verdict_of: tests import it from here)
from railtrain.crds.process import leave_process, say
from railtrain.trainer.parallel import shutdown_distributed
from railtrain.trainer.train import Trainer


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), train, and return the exit code.

    Raises:
        BaseException: whatever ended the trainer unexpectedly, after its verdict is written
            (a deterministic user error returns :data:`EXIT_USER_ERROR` with one line instead).
    """
    try:
        trainer = Trainer(parse_args(argv))
    except ValueError as err:  # includes contract.ContractError and argparse's refusal (ArgumentsError)
        say(f"railtrain.trainer: error: {err}")
        reason = "InvalidArguments" if isinstance(err, ArgumentsError) else "InvalidConfiguration"
        write_termination_message(VERDICT_USER_ERROR, reason, str(err))
        shutdown_distributed()
        return EXIT_USER_ERROR
    except SystemExit:  # --help (argparse's refusals raise ArgumentsError, above)
        raise
    except BaseException as err:  # noqa: BLE001 - written down, then re-raised
        write_termination_message(*failure_verdict(err))
        shutdown_distributed()
        raise
    try:
        trainer.train()
    except BaseException as err:  # noqa: BLE001 - every way out leaves a verdict
        if isinstance(err, SystemExit) and err.code in (None, 0):
            raise
        shared = None if isinstance(err, HealthVerdict) else trainer.health.shared_hang()
        # the library's verdict writer (railtrain.trainer.outcome): a finding or bad input is one line and its exit code
        code = write_verdict(err, shared=shared, prog="railtrain.trainer")
        if not expected(err, shared):
            raise  # a bug: its traceback is the evidence
        return code
    finally:
        trainer.close()
    return EXIT_OK


if __name__ == "__main__":
    # Every return of main() has written its verdict and closed the trainer: leave before interpreter
    # finalization (railtrain.crds.process.leave_process). An exception still ends the process the usual way, traceback and all.
    leave_process(main())
