"""Leader election over a coordination.k8s.io/v1 Lease (pure): who holds it, whether this operator may take it, what to write.

Two operators admitting at once could promise the same GPUs to two jobs (the
scheduling lock is per process), so only the holder of the Lease
``railtrain-operator`` admits and reconciles; every other operator stands by,
polling the Lease, and takes it once the holder gives it up (on SIGTERM) or
stops renewing it for ``leaseDurationSeconds``. The fields are those Kubernetes
components use for their own leader election (coordination.k8s.io/v1 Lease:
holderIdentity, acquireTime, renewTime, leaseDurationSeconds, leaseTransitions).
kopf's own peering would need kopf's peering CRD; railtrain runs kopf
``standalone``. :mod:`railtrain.operator.leader` runs the loop.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from railtrain.crds.times import format_micro_time, parse_time_or_none

LEASE_NAME = "railtrain-operator"
LEASE_SECONDS = 8
"""Default leaseDurationSeconds: a holder that has not renewed for this long is gone (the chart allows 5..15)."""


def holder(lease: dict[str, Any] | None, now: datetime) -> str | None:
    """The identity holding the Lease at ``now``: its holderIdentity when it renewed within its leaseDurationSeconds, else None.

    Args:
        lease: the Lease as read (camelCase dict), or None when it does not exist.
        now: current time (UTC, timezone-aware).
    """
    spec = (lease or {}).get("spec") or {}
    name = spec.get("holderIdentity")
    renewed = parse_time_or_none(spec.get("renewTime"))  # None also when malformed: nobody holds it
    if not name or renewed is None:
        return None
    duration = spec.get("leaseDurationSeconds") or LEASE_SECONDS
    return name if now - renewed < timedelta(seconds=int(duration)) else None


def other_holder(lease: dict[str, Any] | None, identity: str, now: datetime) -> str | None:
    """Who else holds the Lease at ``now`` (:func:`holder` unless that is ``identity``); None when this operator may take it."""
    name = holder(lease, now)
    return None if name == identity else name


def lease_spec(identity: str, now: datetime, seconds: int = LEASE_SECONDS, seen: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Lease spec this operator writes to take or renew the Lease at ``now``.

    Args:
        identity: this operator's holderIdentity.
        now: current time (UTC).
        seconds: leaseDurationSeconds.
        seen: the Lease as read before the write (None: it does not exist); a
            renewal keeps its acquireTime, a takeover counts one more leaseTransitions.
    """
    old = (seen or {}).get("spec") or {}
    renewal = old.get("holderIdentity") == identity and old.get("acquireTime")
    transitions = int(old.get("leaseTransitions") or 0) + (0 if renewal or not old.get("holderIdentity") else 1)
    return {
        "holderIdentity": identity, "leaseDurationSeconds": int(seconds), "acquireTime": old["acquireTime"] if renewal else format_micro_time(now),
        "renewTime": format_micro_time(now), "leaseTransitions": transitions,
    }  # fmt: skip
