"""Prometheus metrics of the health checks, in the trainer's registry (:class:`railtrain.trainer.metrics.TrainerMetrics`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class HealthMetrics:
    """One metric family per detector; every rank computes the gathered figures, local rank 0 serves them.

    Args:
        registry: the registry the trainer serves.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.checks = Counter("railtrain_health_checks", "Health checks run, per check (fingerprint, known_answer, timing, numeric).", ["check"], registry=r)
        self.mismatches = Counter("railtrain_health_mismatches", "Health checks that found a disagreement or anomaly, per check.", ["check"], registry=r)
        self.straggler_score = Gauge("railtrain_health_straggler_score", "Window-median relative excess compute time of each rank over the others' median.", ["rank"], registry=r)
        self.stragglers = Gauge("railtrain_health_stragglers", "Ranks flagged as stragglers at the last timing check.", registry=r)
        self.heartbeat_age = Gauge("railtrain_health_heartbeat_age_seconds", "Age of the oldest rank's last progress, as this rank's watchdog saw it.", registry=r)
        self.hang_deadline = Gauge("railtrain_health_hang_deadline_seconds", "The watchdog's current no-progress deadline.", registry=r)
        self.reexecutions = Counter("railtrain_health_reexecutions", "Steps re-executed to classify an anomaly.", registry=r)
        self.skipped_batches = Counter("railtrain_health_skipped_batches", "Batches skipped as data anomalies.", registry=r)
