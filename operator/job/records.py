"""The admission and hold records a job's status carries, read back (pure).

``status.admission`` names the nodes of the gang being created, ``status.hold``
the nodes a restarting gang keeps; both are written by the operator before it
creates pods, so a crash between the two leaves a record to finish from.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.scheduling`` and
``railtrain.operator.job`` modules; never kopf or the kubernetes client.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping

from railtrain.crds.times import parse_time
from railtrain.crds.api import AdmissionRecord, HoldRecord, TrainingJobStatus
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.stored import read_status



REQUEUE_BASE_SECONDS = 10
"""Backoff after the first gang timeout; it doubles with each further timeout."""


REQUEUE_MAX_SECONDS = 600
"""Longest backoff between gang timeouts."""


StatusLike = TrainingJobStatus | Mapping[str, Any]
"""A status read through the model, or as stored (then read by :func:`~railtrain.operator.job.stored.read_status`)."""


def stored_admission(status: StatusLike) -> AdmissionRecord | None:
    """``status.admission`` as stored, parsed (in force or not), or None when absent or malformed (pure)."""
    return read_status(status).admission


def _in_force(record: AdmissionRecord | HoldRecord, status: TrainingJobStatus) -> bool:
    """Whether a record belongs to the current gang (its ``restarts`` is ``status.restarts``) of a job neither finished nor suspended."""
    return record.restarts == status.restarts and status.phase not in (*cond.TERMINAL_PHASES, cond.SUSPENDED)


def admission_record(status: StatusLike) -> AdmissionRecord | None:
    """The admitted placement of the current gang (``status.admission``) while it is in force, else None (pure).

    A record is in force while its ``restarts`` equals ``status.restarts``, the
    Scheduled condition is True and the job is neither finished nor suspended:
    every path that stops a gang (restart, gang timeout, suspend, pods in the
    way) sets Scheduled False or raises the restart count, which voids it.

    Args:
        status: the job's ``status`` (:data:`StatusLike`; may be empty).

    Returns:
        The record (:class:`~railtrain.crds.api.AdmissionRecord`: ``restarts``, ``nodes`` by rank,
        ``created``), or None (also for a record without nodes or that does not match the model).
    """
    status = read_status(status)
    record = status.admission
    if record is None or not record.nodes or not _in_force(record, status):
        return None
    return record if cond.true_of(status, cond.SCHEDULED) else None


def hold_record(status: StatusLike, now: datetime | None = None) -> HoldRecord | None:
    """The nodes a restarting gang holds (``status.hold``) while the hold is in force, else None (pure).

    A hold is in force while its ``restarts`` equals ``status.restarts``, no
    admission record of that gang is in force yet (:func:`admission_record`:
    admitting it replaces the hold), the job is neither finished nor
    suspended, and ``now`` is before its ``until`` (the restart's backoff plus
    ``runPolicy.gangTimeoutSeconds``: a gang that cannot come back does not
    keep its nodes forever). ``now`` None skips the time rule.

    Args:
        status: the job's ``status`` (:data:`StatusLike`); now: UTC, or None.

    Returns:
        The record (:class:`~railtrain.crds.api.HoldRecord`: ``restarts``, ``nodes`` by rank, "" where
        none is held, ``until``), or None (also for a record that holds no node or does not match the model).
    """
    status = read_status(status)
    record = status.hold
    if record is None or not any(record.nodes) or not _in_force(record, status):
        return None
    if admission_record(status) is not None:
        return None
    if now is not None and now >= record.until:
        return None
    return record


def requeue_delay(requeues: int) -> timedelta:
    """Backoff before the ``requeues``-th re-admission: 10 s, 20 s, 40 s ... at most 600 s."""
    return timedelta(seconds=min(REQUEUE_MAX_SECONDS, REQUEUE_BASE_SECONDS * 2 ** max(0, requeues - 1)))


def waiting_since(status: StatusLike, meta: Mapping[str, Any]) -> datetime | None:
    """When the job started waiting for its current gang: Scheduled turning False, else creation (``meta.creationTimestamp``)."""
    c = cond.condition_of(read_status(status), cond.SCHEDULED)
    if c is not None and c.status != "True":
        return c.last_transition_time
    return parse_time(meta.get("creationTimestamp"))
