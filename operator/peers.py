"""Noticing a second railtrain operator on the same cluster (pure): the holder of a coordination.k8s.io Lease.

Two operators on one cluster run two admission passes that can promise the
same GPUs (the scheduling lock is per process). kopf's peering would pause
one of them but needs kopf's own peering CRD; railtrain runs kopf
``standalone`` and instead keeps a Lease, ``railtrain-operator`` in the
watched namespace (``default`` for a cluster-wide operator), renewed on every
resync, the way Kubernetes components record leadership (coordination.k8s.io/v1
Lease: holderIdentity, renewTime, leaseDurationSeconds). It only warns: an
operator never stops another one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

LEASE_NAME = "railtrain-operator"
LEASE_SECONDS = 30
"""leaseDurationSeconds written: a holder that has not renewed for this long is gone."""


def parse_micro_time(text: str | None) -> datetime | None:
    """Parse a Lease's renewTime (RFC 3339 with microseconds, ``Z``); None when absent or malformed."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def other_holder(lease: dict[str, Any] | None, identity: str, now: datetime) -> str | None:
    """Who else holds the Lease now, if anyone.

    Args:
        lease: the Lease as read (camelCase dict), or None when it does not exist.
        identity: this operator's holderIdentity.
        now: current time (UTC, timezone-aware).

    Returns:
        The other holder's identity when it renewed within its leaseDurationSeconds;
        None when the Lease is absent, ours, expired or unreadable.
    """
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = parse_micro_time(spec.get("renewTime"))
    if not holder or holder == identity or renewed is None:
        return None
    duration = spec.get("leaseDurationSeconds") or LEASE_SECONDS
    return holder if now - renewed < timedelta(seconds=int(duration)) else None


def lease_spec(identity: str, now: datetime) -> dict[str, Any]:
    """The Lease spec this operator writes when it renews (takes) the Lease at ``now``."""
    return {"holderIdentity": identity, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
