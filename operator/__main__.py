"""``railtrain-operator [FLAGS]`` (``python -m railtrain.operator``): the operator's flags are those of :func:`railtrain.operator.settings.parser`.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import sys

from railtrain.crds.process import exit_status, leave_process

from railtrain.operator.settings import SettingsError, parse


def main(argv: list[str] | None = None) -> None:
    """Parse the flags (:func:`railtrain.operator.settings.parse`) and run the operator in the foreground.

    Exits 2 with one sentence for a bad flag and 1 when the operator cannot start or had to stop.
    """
    try:
        settings = parse(sys.argv[1:] if argv is None else argv)
    except SettingsError as err:
        print(f"railtrain-operator: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    from railtrain.operator.main import OperatorError, run

    try:
        run(settings)
    except OperatorError as err:
        print(f"railtrain-operator: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None


def entry() -> None:
    """The ``railtrain-operator`` script and ``python -m railtrain.operator``: :func:`main`, then leave the process
    without interpreter finalization (:func:`railtrain.crds.process.leave_process`): once the operator has stopped,
    its watch threads may still be blocked in calls to an API server that stopped answering, and finalizing them
    aborts the process now and then (SIGABRT instead of the exit status 1 the stop promises)."""
    try:
        main()
        code = 0
    except SystemExit as done:
        code = exit_status(done.code)
    leave_process(code)


if __name__ == "__main__":
    entry()
