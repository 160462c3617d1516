"""``python -m railtrain.operator [--namespace NS] [--kubeconfig PATH]``."""

from __future__ import annotations

import argparse


def main() -> None:
    """Parse flags and run the operator in the foreground."""
    parser = argparse.ArgumentParser(prog="railtrain-operator", description="Run the railtrain operator.")
    parser.add_argument("--namespace", default=None, help="Watch only this namespace (default: all).")
    parser.add_argument("--kubeconfig", default=None, help="Kubeconfig path (default: $KUBECONFIG or in-cluster).")
    parser.add_argument("--resync-seconds", type=float, default=2.0, help="Period of the resync of unfinished jobs.")
    args = parser.parse_args()
    from railtrain.operator.main import run

    run(args.namespace, args.kubeconfig, args.resync_seconds)


if __name__ == "__main__":
    main()
