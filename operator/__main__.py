"""``railtrain-operator [FLAGS]`` (``python -m railtrain.operator``): the operator's flags are those of :func:`railtrain.operator.settings.parser`.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import sys

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


if __name__ == "__main__":
    main()
