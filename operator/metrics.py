"""The operator's Prometheus metrics (prometheus-client), served with its health endpoints by :mod:`railtrain.operator.serve`.

Names follow Prometheus' conventions: the ``railtrain_`` prefix, the unit in
the name (``_seconds``), ``_total`` on counters (prometheus-client appends it
to a Counter's name). Every metric is process-wide: a standby operator
(it does not hold the Lease) exports its own, with ``railtrain_operator_leader 0``.

The pure helpers here take plain data (a job listing, an error) and return
what to record, so they are tested without a registry or a cluster.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

from collections import Counter as Tally
from typing import Any, Iterable, Mapping

from prometheus_client import Counter, Gauge, Histogram

from railtrain.crds import reasons
from railtrain.crds.goodput import REASON_CAUSE
from railtrain.crds.api import TrainingJobStatus
from railtrain.crds.times import parse_time_or_none
from railtrain.operator.job.conditions import RUNNING, SCHEDULED, condition_of
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.job.stored import read_status
from railtrain.operator.kube.connection import unreachable
from railtrain.operator.kube.errors import classify
from railtrain.operator.scheduling.quarantine import is_quarantined

PHASES = ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended")
"""status.phase values (crds/api.py ``JobPhase``); a job without a phase yet counts as Pending."""

QUARANTINED_NODES = Gauge("railtrain_quarantined_nodes", "Nodes carrying the railtrain.dev/quarantined taint, as last listed by the operator.")
QUARANTINES = Counter("railtrain_quarantines_total", "Nodes the operator quarantined, by verdict.", ["verdict"])
RESTARTS = Counter("railtrain_gang_restarts_total", "Gang restarts the operator made, by condition reason (NodeLost, RankVanished, Restarting...).", ["reason"])
JOBS = Gauge("railtrain_jobs", "TrainingJobs by status.phase, as last listed by the leading operator's resync.", ["phase"])
TIME_TO_RUNNING = Histogram(
    "railtrain_job_time_to_running_seconds", "Seconds from a job's creation to every rank of its first gang Running (status.startTime).",
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, float("inf")),
)
ADMISSION_PASS_SECONDS = Histogram(
    "railtrain_admission_pass_duration_seconds", "Seconds of one admission pass (list jobs, pods and nodes; schedule; release the admitted gangs).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, float("inf")),  # bench/scale.py saw 69 s passes at 10,000 GPUs
)
ADMISSION_QUEUE = Gauge("railtrain_admission_queue_length", "Gangs waiting for admission at the last admission pass.")
RECONCILE_SECONDS = Histogram(
    "railtrain_reconcile_duration_seconds", "Seconds of one reconcile of one job (read, plan, apply, status write).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf")),
)
RECONCILE_ERRORS = Counter(
    "railtrain_reconcile_errors_total", "Reconciles that raised, by kind: conflict, not_found, forbidden, invalid, throttled, server, webhook, unreachable, internal.", ["kind"],
)
GANG_TIMEOUTS = Counter("railtrain_gang_timeouts_total", "Gangs released and re-queued because not every rank ran within runPolicy.gangTimeoutSeconds.")
RESYNC_SECONDS = Histogram(
    "railtrain_resync_duration_seconds", "Seconds of one resync pass (every unfinished job reconciled, then one admission pass).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, float("inf")),
)
RESYNC_COMPLETED = Gauge("railtrain_resync_last_completed_timestamp_seconds", "Unix time the last resync pass (or a standby's Lease check) ended; /healthz fails when it is too old.")
GOODPUT_SECONDS = Gauge(
    "railtrain_job_goodput_seconds", "A job's wall time since creation split by cause (status.goodput): queued, starting, training, restart_<reason>, recompute, checkpoint.",
    ["namespace", "trainingjob", "cause"],
)
GOODPUT_RATIO = Gauge("railtrain_job_goodput_ratio", "A job's training seconds over its wall seconds (status.goodput.ratio).", ["namespace", "trainingjob"])
DEGRADED_SECONDS = Gauge(
    "railtrain_job_degraded_seconds", "Training capacity a job with replica groups lost to absent groups, in seconds of the whole job (status.goodput.degradedSeconds; counted inside training, not lost).",
    ["namespace", "trainingjob"],
)
RESTART_REASONS = (reasons.RESTARTING, *REASON_CAUSE)
"""Condition reasons of a gang restart: the job's own (``Restarting``) and each of crds/goodput.py ``REASON_CAUSE``."""
ERROR_KINDS = ("conflict", "not_found", "forbidden", "invalid", "throttled", "server", "webhook", "unreachable", "internal")
"""Every ``kind`` label :func:`error_kind` returns."""
# Prometheus' instrumentation guidance: export a labelled counter's known series at 0 from the start. A series
# born at its first increment is at 1 in its first sample, so increase()/rate() (the chart's dashboard panels)
# never count that first restart or error; found by drawing the dashboard from real data (docs/dashboard.md).
for _reason in RESTART_REASONS:
    RESTARTS.labels(_reason)
for _kind in ERROR_KINDS:
    RECONCILE_ERRORS.labels(_kind)
LEADER = Gauge("railtrain_operator_leader", "1 while this operator holds the Lease and admits and reconciles, 0 while it stands by.")

ENV_PORT = "RAILTRAIN_OPERATOR_METRICS_PORT"
"""Port of the operator's HTTP endpoint (/metrics, /healthz, /readyz); unset or 0 serves none."""


def observe_nodes(nodes: Iterable[dict[str, Any]]) -> int:
    """Set :data:`QUARANTINED_NODES` from a Node listing; returns the count."""
    count = sum(1 for n in nodes if is_quarantined(n))
    QUARANTINED_NODES.set(count)
    return count


def phase_counts(jobs: Iterable[Observed | Mapping[str, Any]]) -> dict[str, int]:
    """Jobs (as observed, or as read) per status.phase (pure): every phase of :data:`PHASES` is a key, 0 when none;
    no phase yet counts as Pending."""
    tally = Tally((observed(j).status.phase or "Pending") for j in jobs)
    return {phase: tally.get(phase, 0) for phase in PHASES}


def observe_jobs(jobs: Iterable[Observed | Mapping[str, Any]]) -> dict[str, int]:
    """Set :data:`JOBS` from a TrainingJob listing; returns :func:`phase_counts`."""
    counts = phase_counts(jobs)
    for phase, count in counts.items():
        JOBS.labels(phase).set(count)
    return counts


def error_kind(err: BaseException) -> str:
    """The kind label of :data:`RECONCILE_ERRORS` for an error of a reconcile (pure).

    An API server's answer is its typed error's kind (:attr:`railtrain.operator.kube.errors.ApiError.kind`):
    conflict (409), not_found (404), forbidden (401/403), invalid (400/422 and any other 4xx), throttled (429),
    server (5xx), webhook (5xx because an admission webhook failed, e.g. Kueue's while it restarts); no answer at all is unreachable; anything else (a bug) is internal.
    """
    answer = classify(err)
    if answer is not None and answer.status:
        return answer.kind
    return "unreachable" if unreachable(err) else "internal"


def observe_transition(old: TrainingJobStatus | Mapping[str, Any], new: TrainingJobStatus | Mapping[str, Any], created: str | None) -> None:
    """Record what one written status change means (restart reasons, gang timeouts, time to Running).

    Args:
        old: the status before the write; new: the status written (each read through the model, or as stored:
            :func:`~railtrain.operator.job.stored.read_status`).
        created: the job's metadata.creationTimestamp (RFC 3339), or None.
    """
    old, new = read_status(old), read_status(new)
    if new.restarts > old.restarts:
        scheduled = condition_of(new, SCHEDULED)
        RESTARTS.labels(scheduled.reason if scheduled is not None and scheduled.reason else "Unknown").inc()
    if new.requeues > old.requeues:
        GANG_TIMEOUTS.inc()
    seconds = time_to_running(old, new, created)
    if seconds is not None:
        TIME_TO_RUNNING.observe(seconds)


def time_to_running(old: TrainingJobStatus | Mapping[str, Any], new: TrainingJobStatus | Mapping[str, Any], created: str | None) -> float | None:
    """Seconds from creation to the first all-Running gang when this status change is that moment, else None (pure).

    The moment is status.startTime appearing on a job that never had a Running
    condition (a resumed or restarted gang does not count again). Both statuses are read through the model.
    """
    old, new = read_status(old), read_status(new)
    if new.start_time is None or old.start_time is not None or condition_of(old, RUNNING) is not None:
        return None
    start, born = new.start_time, parse_time_or_none(created)
    if start is None or born is None:
        return None
    return max(0.0, (start - born).total_seconds())


def observe_goodput(namespace: str, name: str, goodput: Mapping[str, Any]) -> None:
    """Set :data:`GOODPUT_SECONDS` (cause: queued, starting, training and each lost cause), :data:`GOODPUT_RATIO` and,
    for a job with replica groups, :data:`DEGRADED_SECONDS` from a status.goodput (camelCase mapping)."""
    causes = {"queued": goodput.get("queuedSeconds", 0), "starting": goodput.get("startingSeconds", 0), "training": goodput.get("trainingSeconds", 0)}
    causes |= dict(goodput.get("lostSeconds") or {})
    for cause, seconds in causes.items():
        GOODPUT_SECONDS.labels(namespace, name, cause).set(float(seconds))
    GOODPUT_RATIO.labels(namespace, name).set(float(goodput.get("ratio", 0)))
    if goodput.get("degradedSeconds") is not None:
        DEGRADED_SECONDS.labels(namespace, name).set(float(goodput["degradedSeconds"]))


GOODPUT_CAUSES = ("queued", "starting", "training", "restart_job", "restart_node_lost", "restart_quarantine", "restart_elastic", "recompute", "checkpoint")
"""Every ``cause`` label :func:`observe_goodput` can set (crds/goodput.py)."""


def forget_job(namespace: str, name: str) -> None:
    """Drop a deleted job's goodput series, so a dashboard does not show it for ever."""
    for cause in GOODPUT_CAUSES:
        try:
            GOODPUT_SECONDS.remove(namespace, name, cause)
        except KeyError:
            pass
    for gauge in (GOODPUT_RATIO, DEGRADED_SECONDS):
        try:
            gauge.remove(namespace, name)
        except KeyError:
            pass
