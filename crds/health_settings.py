"""The trainer's health-check settings and the heartbeat format.

Part of the pod-environment contract (re-exported by :mod:`railtrain.crds.contract`,
which callers import): :class:`HealthSettings` travels to the pod as
``RAILTRAIN_HEALTH_*`` variables (:func:`health_env`/:func:`read_health`) and may be
changed while the job runs through :data:`ENV_HEALTH_FILE`; :class:`Heartbeat` is what
each rank publishes out of band for the hang watchdog. Read by
:mod:`railtrain.trainer.health`; documented in docs/health.md. This module imports
neither kopf nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from railtrain.crds.contract_errors import ContractError, coerce

ENV_HEALTH = "RAILTRAIN_HEALTH"
"""``1`` (default) runs the trainer's health checks, ``0`` turns all of them off."""
ENV_HEALTH_FILE = "RAILTRAIN_HEALTH_FILE"
"""Optional path of a JSON object of :class:`HealthSettings` fields that the trainer re-reads
(when its mtime changes) at every fingerprint check, to change thresholds and actions while the
job runs; fields it lacks keep their values."""
_HEALTH_ENV_PREFIX = "RAILTRAIN_HEALTH_"


@dataclass(frozen=True)
class HealthSettings:
    """Intervals, thresholds and actions of the trainer's health checks, per job.

    Each field ``f`` is read from ``RAILTRAIN_HEALTH_<F>`` (upper case), see
    :func:`health_env`/:func:`read_health`, and may be changed while the job
    runs through :data:`ENV_HEALTH_FILE`.

    Attributes:
        fingerprint_interval: steps between cross-replica parameter fingerprint comparisons (K).
        kat_interval: steps between known-answer tests (M); one also runs at start.
        timing_interval: steps between gathers of per-rank compute/wait times (N).
        straggler_threshold: robust score (median absolute deviations over the median
            compute time, with a relative floor, see ``trainer.health.stats``) above which a
            rank is slow in a window.
        straggler_window: consecutive timing samples in a window; a rank is flagged when its
            score's window median exceeds the threshold.
        straggler_action: ``report`` (log + metric) or ``stop`` (verdict ``straggler``).
        straggler_stop_share: with ``stop``: the share of throughput the slow rank must cost
            (its excess time over the median, per step) before the job stops, e.g. 0.1.
        spike_threshold: robust z-score of loss or grad norm over its running median that counts as a spike
            (together with ``spike_ratio``).
        spike_ratio: a spike must also exceed this multiple of the running median (natural
            gradient-norm spikes of small-batch training reach ~8x; Megatron-LM's rerun check uses 10x).
        anomaly_action: on a reproducible (data) anomaly: ``skip`` the batch or ``stop`` (user-error).
        max_skipped_batches: batches that may be skipped before the job stops with user-error.
        hang_factor: the watchdog's deadline is ``max(hang_factor x median step time, hang_floor_s)``.
        hang_floor_s: lower bound of the watchdog's deadline, seconds (10: a hang on 0.5 s steps is
            found in about 10 s, not in a minute; docs/health.md, "Hang deadlines").
        hang_warmup_s: seconds allowed without progress while the gang initialises (process start to
            the watchdog's start: process group, model, checkpoint load), in its first steps
            (compile, lazy communicators) and in a checkpoint save; never less than the step deadline.
    """

    fingerprint_interval: int = 50
    kat_interval: int = 500
    timing_interval: int = 1
    straggler_threshold: float = 0.12
    straggler_window: int = 8
    straggler_action: str = "report"
    straggler_stop_share: float = 0.1
    spike_threshold: float = 12.0
    spike_ratio: float = 10.0
    anomaly_action: str = "skip"
    max_skipped_batches: int = 5
    hang_factor: float = 3.0
    hang_floor_s: float = 10.0
    hang_warmup_s: float = 600.0

    def validate(self) -> None:
        """Raises :class:`ContractError` naming the variable of a value out of range."""
        for name in ("fingerprint_interval", "kat_interval", "timing_interval", "straggler_window"):
            if getattr(self, name) < 1:
                raise ContractError(f"{health_variable(name)} must be >= 1, got {getattr(self, name)}")
        for name in ("straggler_threshold", "straggler_stop_share", "spike_threshold", "spike_ratio", "hang_factor", "hang_floor_s", "hang_warmup_s", "max_skipped_batches"):
            if getattr(self, name) < 0:
                raise ContractError(f"{health_variable(name)} must be >= 0, got {getattr(self, name)}")
        if self.straggler_action not in ("report", "stop"):
            raise ContractError(f"{health_variable('straggler_action')} must be 'report' or 'stop', got {self.straggler_action!r}")
        if self.anomaly_action not in ("skip", "stop"):
            raise ContractError(f"{health_variable('anomaly_action')} must be 'skip' or 'stop', got {self.anomaly_action!r}")


def health_variable(field_name: str) -> str:
    """The environment variable of a :class:`HealthSettings` field, e.g. ``RAILTRAIN_HEALTH_KAT_INTERVAL``."""
    return _HEALTH_ENV_PREFIX + field_name.upper()



def health_env(settings: HealthSettings) -> dict[str, str]:
    """:class:`HealthSettings` as ``RAILTRAIN_HEALTH_*`` variables (every field)."""
    return {health_variable(f.name): str(getattr(settings, f.name)) for f in fields(HealthSettings)}


def read_health(environ: Mapping[str, str], base: HealthSettings | None = None) -> HealthSettings:
    """Read ``RAILTRAIN_HEALTH_*`` variables over ``base`` (default: the defaults).

    Raises:
        ContractError: a value of the wrong type or out of range; the message names the variable.
    """
    return health_from_mapping({f.name: environ[health_variable(f.name)] for f in fields(HealthSettings) if health_variable(f.name) in environ}, base)


def health_from_mapping(values: Mapping[str, Any], base: HealthSettings | None = None, where: str = "") -> HealthSettings:
    """Apply ``{field: value}`` (e.g. the JSON of :data:`ENV_HEALTH_FILE`) over ``base``.

    Raises:
        ContractError: an unknown field, a value of the wrong type, or out of range.
    """
    base = base or HealthSettings()
    known = {f.name: f for f in fields(HealthSettings)}
    updates = {}
    for key, raw in values.items():
        if key not in known:
            raise ContractError(f"{where or 'health settings'}: unknown field {key!r}; allowed: {', '.join(known)}")
        updates[key] = coerce(known[key].type, raw, f"{where} {key}".strip() if where else health_variable(key))
    out = HealthSettings(**{f: getattr(base, f) for f in known} | updates)
    out.validate()
    return out


HEARTBEAT_KEY_PREFIX = "railtrain/health/heartbeat/"
"""Rendezvous-store key prefix of a rank's heartbeat: ``<prefix><global rank>``."""
HANG_VERDICT_KEY = "railtrain/health/hang"
"""Rendezvous-store key the first watchdog to fire sets (compare-and-set) to its verdict JSON, so
every rank writes the same hang verdict."""


@dataclass(frozen=True)
class Heartbeat:
    """A rank's progress, published out of band (rendezvous TCPStore, never a collective).

    Attributes:
        rank: global rank.
        step: the optimizer step the rank is in (the last one it started).
        phase: ``compute`` or ``collective`` (what the rank is doing now) or ``idle``.
        time: the rank's wall-clock time of the beat, seconds since the epoch.
        node: the rank's node name (:data:`ENV_NODE_NAME`).
    """

    rank: int
    step: int
    phase: str
    time: float
    node: str = ""


def format_heartbeat(beat: Heartbeat) -> str:
    """A heartbeat as ``rank,step,phase,time,node`` (the node name last: it may hold no comma but anything else)."""
    return f"{beat.rank},{beat.step},{beat.phase},{beat.time:.6f},{beat.node}"


def parse_heartbeat(text: str | bytes) -> Heartbeat:
    """Inverse of :func:`format_heartbeat`.

    Raises:
        ContractError: not five comma-separated fields of the right types.
    """
    if isinstance(text, bytes):
        text = text.decode()
    parts = text.split(",", 4)
    if len(parts) != 5:
        raise ContractError(f"heartbeat must be 'rank,step,phase,time,node', got {text!r}")
    try:
        return Heartbeat(int(parts[0]), int(parts[1]), parts[2], float(parts[3]), parts[4])
    except ValueError:
        raise ContractError(f"heartbeat must be 'rank,step,phase,time,node', got {text!r}") from None

