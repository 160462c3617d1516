"""The operator's settings: one frozen object made once at start from its flags (pure; no kopf, no typer).

Both ``railtrain-operator`` (``python -m railtrain.operator``, the Helm chart's
command) and ``railtrain operator`` parse their arguments with :func:`parse`,
so a flag, its default and its refusal sentence exist once. Runtime state (the
API client, the stop signal, the Lease) is not here: it lives in
:class:`railtrain.operator.context.OperatorContext`, which carries these
settings to every handler through kopf's ``memo``.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from railtrain.crds.fabric import DEFAULT_PROFILE, ENV_PROFILE, PROFILES, FabricProfile, resolve_profile
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.logformat import FORMATS
from railtrain.operator.lease import LEASE_SECONDS
from railtrain.operator.scheduling.topology import DEFAULT_LEVELS, ENV_LEVELS, ENV_PRESET, PRESETS, resolve_levels

DEFAULT_MAX_QUARANTINES_PER_HOUR = 8
"""How many nodes the operator may quarantine per hour across the whole cluster unless the platform team says otherwise."""
DEFAULT_STOP_SECONDS = 10.0
"""How long SIGTERM/SIGINT may take to stop the operator (the Helm pod's grace period is 30 s)."""
DEFAULT_REQUEST_SECONDS = 30.0
"""How long one API call may wait for its answer unless told otherwise (the API server's own limit for a request is 60 s)."""


DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace name (RFC 1123 label)."""


class SettingsError(ValueError):
    """A flag the operator cannot run with; ``str()`` is one sentence naming the flag and what is allowed."""


@dataclass(frozen=True)
class Settings:
    """What the operator was told at start; never changed while it runs.

    Attributes:
        kubeconfig: kubeconfig path, or None for $KUBECONFIG, ~/.kube/config, then in-cluster credentials.
        namespace: the only namespace watched and admitted, or None for every namespace.
        resync_seconds: period of the level-triggered resync of unfinished jobs (seconds, > 0).
        topology_levels: node label keys of the topology levels, widest first.
        unreachable_seconds: how long every resync may fail to reach the API server
            before the operator stops with exit status 1 (seconds, > 0).
        max_quarantines_per_hour: the platform team's cluster-wide bound on nodes the
            operator quarantines per hour (>= 0; 0 quarantines nothing); a job's own
            setting may only lower it (issue 15, kind 1).
        lease_namespace: namespace of the leader-election Lease ``railtrain-operator``
            (the chart passes its own namespace; default ``$POD_NAMESPACE``, else ``default``).
        lease_seconds: leaseDurationSeconds of the Lease (seconds, 1..60; the chart allows 5..15).
        log_format: ``text`` (one line per record) or ``json`` (one JSON object per line).
        stale_seconds: ``/healthz`` fails once the last completed resync pass is older (seconds, > 0).
        stop_seconds: how long a SIGTERM/SIGINT stop may take before the operator
            exits anyway (seconds, > 0).
        fabric: the fabric profile whose NCCL/libfabric variables every rank gets
            (:mod:`railtrain.crds.fabric`, docs/fabric.md).
        kueue_queue: the LocalQueue given to a job without the ``kueue.x-k8s.io/queue-name`` label (Kueue admits
            every job then); None: such a job is railtrain's own queue's (docs/kueue.md, "Turning it on").
        kueue_only: refuse a job that names no LocalQueue (when there is no ``kueue_queue``).
        request_seconds: how long one API call (connect and answer) may take before it is given up
            (seconds, > 0); Lease calls wait at most a quarter of ``lease_seconds``, watches their
            own server-side timeout plus 15 s (docs/operator.md, "Leader fencing").
    """

    kubeconfig: str | None = None
    namespace: str | None = None
    resync_seconds: float = 2.0
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS
    unreachable_seconds: float = 60.0
    max_quarantines_per_hour: int = DEFAULT_MAX_QUARANTINES_PER_HOUR
    lease_namespace: str = "default"
    lease_seconds: float = float(LEASE_SECONDS)
    log_format: str = "text"
    stale_seconds: float = 120.0
    stop_seconds: float = DEFAULT_STOP_SECONDS
    fabric: FabricProfile = PROFILES[DEFAULT_PROFILE]
    request_seconds: float = DEFAULT_REQUEST_SECONDS
    kueue_queue: str | None = None
    kueue_only: bool = False

    @property
    def plan(self) -> PlanSettings:
        """What the planner and the admission pass decide with: the topology levels, the fabric profile, the quarantine
        bound and the Kueue defaults."""
        return PlanSettings(self.topology_levels, self.fabric, self.max_quarantines_per_hour, self.kueue_queue, self.kueue_only)


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`SettingsError` instead of printing usage and exiting 2."""

    def error(self, message: str):  # type: ignore[override]
        raise SettingsError(message)


class _Formatter(argparse.HelpFormatter):
    def add_usage(self, usage, actions, groups, prefix=None):  # noqa: D102
        super().add_usage(usage, actions, groups, "Usage: " if prefix is None else prefix)


DESCRIPTION = "Run the railtrain operator in the foreground (Ctrl-C or SIGTERM stops it within 10 s; it stops by itself when the API server is gone)."


def parser(prog: str = "railtrain-operator") -> argparse.ArgumentParser:
    """The operator's one argument parser (``-h``/``--help`` print its help and exit 0).

    Args:
        prog: the program name its help shows (``railtrain operator`` from the CLI).

    Returns:
        An ``argparse.ArgumentParser`` whose errors raise :class:`SettingsError`.
    """
    p = _Parser(prog=prog, description=DESCRIPTION, formatter_class=_Formatter, epilog=f"Example: {prog} --topology-preset gke")
    p.add_argument("-n", "--namespace", default=None, metavar="NAMESPACE", help="Watch only this namespace (default: every namespace).")
    p.add_argument("--kubeconfig", default=None, metavar="FILE", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster credentials).")
    p.add_argument("--resync-seconds", type=float, default=2.0, metavar="SECONDS", help="Period of the resync of unfinished jobs (default 2).")
    p.add_argument(
        "--topology-preset", default=None, metavar="PRESET",
        help=f"Node labels of a known platform: {', '.join(sorted(PRESETS))} (docs/topology.md); default ${ENV_PRESET}, else railtrain.",
    )
    p.add_argument(
        "--topology-levels", default=None, metavar="KEYS",
        help=f"Comma-separated node label keys of the topology levels, widest first; overrides the preset (default ${ENV_LEVELS}).",
    )
    p.add_argument(
        "--fabric-profile", default=None, metavar="PROFILE",
        help=f"NCCL/libfabric variables written into every rank: {', '.join(PROFILES)} (docs/fabric.md); default ${ENV_PROFILE}, else railtrain.",
    )
    p.add_argument(
        "--unreachable-seconds", type=float, default=60.0, metavar="SECONDS",
        help="Stop with exit status 1 once the API server has not answered for this many seconds (default 60).",
    )
    p.add_argument(
        "--max-quarantines-per-hour", type=int, default=DEFAULT_MAX_QUARANTINES_PER_HOUR, metavar="COUNT",
        help=f"Most nodes quarantined per hour across the whole cluster; a job may only lower it (default {DEFAULT_MAX_QUARANTINES_PER_HOUR}; 0: none).",
    )
    p.add_argument(
        "--lease-namespace", default=None, metavar="NAMESPACE",
        help="Namespace of the leader-election Lease railtrain-operator (default $POD_NAMESPACE, else default); only its holder admits and reconciles.",
    )
    p.add_argument(
        "--lease-seconds", type=float, default=float(LEASE_SECONDS), metavar="SECONDS",
        help=f"Lease duration: a standby takes over once the leader has not renewed for this long (default {LEASE_SECONDS}).",
    )
    p.add_argument(
        "--request-seconds", type=float, default=DEFAULT_REQUEST_SECONDS, metavar="SECONDS",
        help=f"Give up one API call that has not been answered in this many seconds; Lease calls wait at most a quarter of --lease-seconds (default {DEFAULT_REQUEST_SECONDS:g}).",
    )
    p.add_argument(
        "--kueue-default-queue", default=None, metavar="LOCALQUEUE",
        help="Give a TrainingJob without the kueue.x-k8s.io/queue-name label this LocalQueue (the label is written on it), so Kueue admits every job.",
    )
    p.add_argument("--kueue-only", action="store_true", help="Refuse a TrainingJob that names no LocalQueue (with no --kueue-default-queue): it waits with reason QueueNameRequired.")
    p.add_argument("--log-format", default="text", metavar="FORMAT", help="text (one line per record) or json (one JSON object per line, for log pipelines).")
    p.add_argument(
        "--stale-seconds", type=float, default=120.0, metavar="SECONDS",
        help="/healthz fails once the last completed resync pass is older than this (default 120).",
    )
    return p


def parse(argv: Sequence[str], environ: Mapping[str, str] | None = None, prog: str = "railtrain-operator") -> Settings:
    """Turn the operator's command-line arguments into :class:`Settings`.

    Args:
        argv: the arguments after the program name.
        environ: where ``$RAILTRAIN_TOPOLOGY_PRESET``/``$RAILTRAIN_TOPOLOGY_LEVELS``
            and ``$RAILTRAIN_FABRIC_PROFILE`` are read when the flags are absent
            (default ``os.environ``).
        prog: the program name for ``--help``.

    Returns:
        The frozen settings.

    Raises:
        SettingsError: an unknown flag, a value of the wrong type, an unknown
            topology preset or fabric profile, malformed levels, or a number out of range (one sentence).
        SystemExit: ``-h``/``--help`` (after printing the help; status 0).
    """
    args = parser(prog).parse_args(list(argv))
    env = os.environ if environ is None else environ
    try:
        levels = resolve_levels(args.topology_preset, args.topology_levels, env)
        profile = resolve_profile(args.fabric_profile, env)
    except ValueError as err:
        raise SettingsError(str(err)) from None
    for flag, value in (("--resync-seconds", args.resync_seconds), ("--unreachable-seconds", args.unreachable_seconds)):
        if not value > 0:
            raise SettingsError(f"{flag}: must be more than 0 seconds, got {value:g}")
    for flag, value in (("--stale-seconds", args.stale_seconds), ("--request-seconds", args.request_seconds)):
        if not value > 0:
            raise SettingsError(f"{flag}: must be more than 0 seconds, got {value:g}")
    if not 1 <= args.lease_seconds <= 60:
        raise SettingsError(f"--lease-seconds: must be 1 to 60 seconds, got {args.lease_seconds:g}")
    if args.log_format not in FORMATS:
        raise SettingsError(f"--log-format: must be one of {', '.join(FORMATS)}, got {args.log_format!r}")
    lease_namespace = args.lease_namespace or env.get("POD_NAMESPACE") or "default"
    if not DNS_1123_LABEL.fullmatch(lease_namespace):
        raise SettingsError(f"--lease-namespace: {lease_namespace!r} is not a namespace name (lower-case letters, digits and '-', at most 63)")
    if args.kueue_default_queue is not None and not DNS_1123_LABEL.fullmatch(args.kueue_default_queue):
        raise SettingsError(f"--kueue-default-queue: {args.kueue_default_queue!r} is not a LocalQueue name (lower-case letters, digits and '-', at most 63)")
    if args.max_quarantines_per_hour < 0:
        raise SettingsError(f"--max-quarantines-per-hour: must be 0 or more, got {args.max_quarantines_per_hour}")
    return Settings(
        kubeconfig=args.kubeconfig,
        namespace=args.namespace or None,
        resync_seconds=args.resync_seconds,
        topology_levels=levels,
        unreachable_seconds=args.unreachable_seconds,
        max_quarantines_per_hour=args.max_quarantines_per_hour,
        fabric=profile,
        lease_namespace=lease_namespace,
        lease_seconds=args.lease_seconds,
        log_format=args.log_format,
        stale_seconds=args.stale_seconds,
        request_seconds=args.request_seconds,
        kueue_queue=args.kueue_default_queue,
        kueue_only=args.kueue_only,
    )
