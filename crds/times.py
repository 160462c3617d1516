"""Timestamps as the Kubernetes API writes them: RFC 3339 in UTC with ``Z``, to the second (``metav1.Time``) or to the
microsecond (``metav1.MicroTime``: a Lease's renewTime, an Event's eventTime, railtrain's attempt records).

The one parser and formatter of API timestamps for the operator, the command line and the API models: the
operator's status fields, conditions, Lease, Events and quarantine annotation, and the times the command line shows.

May import: the standard library only (``crds`` is the floor every wing imports).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def parse_time(text: str | None) -> datetime | None:
    """Read an RFC 3339 timestamp (``2026-01-02T03:04:05Z``, with or without a fraction of a second, ``Z`` or an offset).

    Args:
        text: the timestamp as stored; None or ``""`` when the field is unset.

    Returns:
        The moment as a timezone-aware datetime (one without an offset is read as UTC), or None for no text.

    Raises:
        ValueError: ``text`` is not a timestamp (a field no writer of the API would set so: the caller says whose).
    """
    if not text:
        return None
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def parse_time_or_none(value: Any) -> datetime | None:
    """:func:`parse_time` of ``str(value)`` for a value that may be anything (a label, a user's annotation, a view's
    field): None when it is absent or not a timestamp."""
    if not value:
        return None
    try:
        return parse_time(str(value))
    except ValueError:
        return None


def format_time(at: datetime, digits: int = 0) -> str:
    """``at`` in UTC as the API writes it: ``2026-01-02T03:04:05Z`` (``metav1.Time``), or with ``digits`` (3 or 6)
    of the second's fraction, truncated (6: ``metav1.MicroTime``). A naive ``at`` is taken as UTC."""
    utc = at.astimezone(timezone.utc) if at.tzinfo else at
    fraction = f".{utc.microsecond:06d}"[: digits + 1] if digits else ""
    return f"{utc.strftime('%Y-%m-%dT%H:%M:%S')}{fraction}Z"


def format_micro_time(at: datetime) -> str:
    """``at`` as a ``metav1.MicroTime``: ``2026-01-02T03:04:05.123456Z`` (:func:`format_time` with 6 digits)."""
    return format_time(at, 6)
