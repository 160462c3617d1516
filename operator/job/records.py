"""The admission and hold records a job's status carries, read back (pure).

``status.admission`` names the nodes of the gang being created, ``status.hold``
the nodes a restarting gang keeps; both are written by the operator before it
creates pods, so a crash between the two leaves a record to finish from.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.scheduling`` and
``railtrain.operator.job`` modules; never kopf or the kubernetes client.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from railtrain.crds.times import parse_time
from railtrain.crds.api import AdmissionRecord, HoldRecord
from railtrain.operator.job import conditions as cond



REQUEUE_BASE_SECONDS = 10
"""Backoff after the first gang timeout; it doubles with each further timeout."""


REQUEUE_MAX_SECONDS = 600
"""Longest backoff between gang timeouts."""


def _stored(model: type[BaseModel], value: Any) -> Any:
    """``value`` parsed as ``model`` (an :class:`~railtrain.crds.api.AdmissionRecord` or
    :class:`~railtrain.crds.api.HoldRecord`), or None when it is absent or does not match the model."""
    if not isinstance(value, dict):
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


def stored_admission(status: dict[str, Any]) -> AdmissionRecord | None:
    """``status.admission`` as stored, parsed (in force or not), or None when absent or malformed (pure)."""
    return _stored(AdmissionRecord, status.get("admission"))


def _in_force(record: AdmissionRecord | HoldRecord, status: dict[str, Any]) -> bool:
    """Whether a record belongs to the current gang (its ``restarts`` is ``status.restarts``) of a job neither finished nor suspended."""
    return record.restarts == int(status.get("restarts") or 0) and status.get("phase") not in (*cond.TERMINAL_PHASES, cond.SUSPENDED)


def admission_record(status: dict[str, Any]) -> AdmissionRecord | None:
    """The admitted placement of the current gang (``status.admission``) while it is in force, else None (pure).

    A record is in force while its ``restarts`` equals ``status.restarts``, the
    Scheduled condition is True and the job is neither finished nor suspended:
    every path that stops a gang (restart, gang timeout, suspend, pods in the
    way) sets Scheduled False or raises the restart count, which voids it.

    Args:
        status: the job's ``status`` as stored (may be empty).

    Returns:
        The record (:class:`~railtrain.crds.api.AdmissionRecord`: ``restarts``, ``nodes`` by rank,
        ``created``), or None (also for a record without nodes or that does not match the model).
    """
    record = stored_admission(status)
    if record is None or not record.nodes or not _in_force(record, status):
        return None
    return record if cond.is_true(status.get("conditions") or [], cond.SCHEDULED) else None


def hold_record(status: dict[str, Any], now: datetime | None = None) -> HoldRecord | None:
    """The nodes a restarting gang holds (``status.hold``) while the hold is in force, else None (pure).

    A hold is in force while its ``restarts`` equals ``status.restarts``, no
    admission record of that gang is in force yet (:func:`admission_record`:
    admitting it replaces the hold), the job is neither finished nor
    suspended, and ``now`` is before its ``until`` (the restart's backoff plus
    ``runPolicy.gangTimeoutSeconds``: a gang that cannot come back does not
    keep its nodes forever). ``now`` None skips the time rule.

    Returns:
        The record (:class:`~railtrain.crds.api.HoldRecord`: ``restarts``, ``nodes`` by rank, "" where
        none is held, ``until``), or None (also for a record that holds no node or does not match the model).
    """
    record = _stored(HoldRecord, status.get("hold"))
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


def waiting_since(obj: dict[str, Any]) -> datetime | None:
    """When the job started waiting for its current gang: Scheduled turning False, else creation."""
    c = cond.find((obj.get("status") or {}).get("conditions") or [], cond.SCHEDULED)
    if c and c.get("status") != "True":
        return parse_time(c.get("lastTransitionTime"))
    return parse_time(obj["metadata"].get("creationTimestamp"))
