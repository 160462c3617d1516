"""Entry point: ``python -m railtrain.trainer`` or ``torchrun ... -m railtrain.trainer``.

Exit codes follow :mod:`railtrain.crds.contract`: 0 done, 2 bad input (one
line on stderr naming the flag or variable, no traceback), 1 anything else.
"""

from __future__ import annotations

import sys
from typing import Sequence

from railtrain.crds.contract import EXIT_OK, EXIT_USER_ERROR
from railtrain.trainer.config import parse_args
from railtrain.trainer.parallel import shutdown_distributed
from railtrain.trainer.train import Trainer


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), train, and return the exit code."""
    try:
        trainer = Trainer(parse_args(argv))
    except ValueError as err:  # includes contract.ContractError
        print(f"railtrain.trainer: error: {err}", file=sys.stderr, flush=True)
        shutdown_distributed()
        return EXIT_USER_ERROR
    try:
        trainer.train()
    finally:
        trainer.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
