"""``python -m railtrain.operator [--namespace NS] [--kubeconfig PATH] [--topology-preset P | --topology-levels K1,K2,...] [--fabric-profile F] [--unreachable-seconds S]``."""

from __future__ import annotations

import argparse
import os
import sys

from railtrain.crds.fabric import ENV_PROFILE, PROFILES, resolve_profile
from railtrain.operator.topology import ENV_LEVELS, ENV_PRESET, PRESETS, resolve_levels


def main() -> None:
    """Parse flags and run the operator in the foreground."""
    parser = argparse.ArgumentParser(prog="railtrain-operator", description="Run the railtrain operator.")
    parser.add_argument("--namespace", default=None, help="Watch only this namespace (default: all).")
    parser.add_argument("--kubeconfig", default=None, help="Kubeconfig path (default: $KUBECONFIG or in-cluster).")
    parser.add_argument("--resync-seconds", type=float, default=2.0, help="Period of the resync of unfinished jobs.")
    parser.add_argument(
        "--topology-preset", choices=sorted(PRESETS), default=None,
        help=f"Node labels of a known platform (docs/topology.md); default ${ENV_PRESET}, else railtrain.",
    )
    parser.add_argument(
        "--topology-levels", default=None,
        help=f"Comma-separated node label keys of the topology levels, widest first (overrides the preset; default ${ENV_LEVELS}).",
    )
    parser.add_argument(
        "--fabric-profile", choices=list(PROFILES), default=None,
        help=f"NCCL/libfabric variables of a known platform written into every rank (docs/fabric.md); default ${ENV_PROFILE}, else railtrain.",
    )
    parser.add_argument(
        "--unreachable-seconds", type=float, default=60.0,
        help="Stop with exit status 1 once the API server has not answered for this long (default 60).",
    )
    args = parser.parse_args()
    try:
        resolve_levels(args.topology_preset, args.topology_levels, os.environ)
        resolve_profile(args.fabric_profile, os.environ)
    except ValueError as err:
        parser.error(str(err))
    from railtrain.operator.main import OperatorError, run

    try:
        run(args.namespace, args.kubeconfig, args.resync_seconds, args.topology_preset, args.topology_levels, args.unreachable_seconds, args.fabric_profile)
    except OperatorError as err:
        print(f"railtrain-operator: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
