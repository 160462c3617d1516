"""The leader-election loop: take or renew the Lease, or stand by polling it (rules in :mod:`railtrain.operator.lease`).

Every operator process runs :func:`keep_lease` next to its resync loop. While
``ctx.state.leader`` is False the kopf handlers and the resync do nothing; the
moment this process takes the Lease it says so in one line and wakes the
resync, whose first pass reconciles every unfinished job and runs an admission
pass, so a standby admits a waiting job at once. A leader steps down (one line)
when it has not renewed within the renew deadline (two thirds of the lease
duration: the API server is away or this process was frozen, and a standby may
take over once the whole duration has passed) or when its own resync loop is
stale (``/healthz`` would fail): the Lease then expires and a healthy standby
takes it. Each Lease call waits at most a quarter of the lease duration
(:func:`railtrain.operator.kube.fence.lease_call_seconds`), so a frozen API server
is noticed as one. What may be written is not decided by this loop's flag but by
``ctx.state.leadership`` (:mod:`railtrain.operator.kube.fence`), from when the last
successful renewal was sent: a leader whose loop has not run yet (a process
resumed after SIGSTOP) writes nothing either. Without RBAC for the Lease
(401/403) the operator leads alone, as before leader election existed, with one
WARNING line.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Callable

from railtrain.operator import metrics
from railtrain.operator.kube import fence
from railtrain.operator import kube
from railtrain.operator.kube.errors import Forbidden
from railtrain.operator import lease
from railtrain.operator.context import OperatorContext

log = logging.getLogger("railtrain.operator")


def poll_seconds(lease_seconds: float) -> float:
    """How often the Lease is renewed by its holder and polled by a standby: an eighth of the lease duration, 0.25..1 s.

    A killed leader is replaced within ``lease_seconds`` + this; one GET (and for
    the leader one PUT) per poll and operator is a negligible load on the API server.
    """
    return min(1.0, max(0.25, lease_seconds / 8))


def _try_lead(ctx: OperatorContext, now: datetime) -> tuple[bool, str | None]:
    """One read-modify-write of the Lease; returns ``(leading, other holder)``."""
    s = ctx.settings
    held = ctx.kube.get_lease(s.lease_namespace, lease.LEASE_NAME)
    other = lease.other_holder(held, ctx.identity, now)
    if other is not None:
        return False, other
    if ctx.state.leader and not ctx.health.live()[0]:
        return False, None  # our resync loop is stuck: let the Lease expire so a standby takes over
    if ctx.stop.is_set():  # stopping: release() may have given the Lease up since the read above; never take it back
        return False, None
    if ctx.kube.put_lease(s.lease_namespace, lease.LEASE_NAME, lease.lease_spec(ctx.identity, now, int(s.lease_seconds), held), held):
        return True, None
    return False, None  # someone wrote it in between: read again at the next poll


async def keep_lease(ctx: OperatorContext, wake: Callable[[], None]) -> None:
    """Run forever: lead while holding the Lease, stand by otherwise (module docstring).

    Args:
        ctx: the operator's context; ``ctx.state.leader`` is set here.
        wake: called when this operator starts leading (wakes the resync loop).
    """
    loop, s = asyncio.get_running_loop(), ctx.settings
    where = f"{s.lease_namespace}/{lease.LEASE_NAME}"
    deadline = fence.renew_deadline(s.lease_seconds)
    renewed = time.monotonic()  # when the last successful take or renewal was sent
    said_holder: str | None = None
    failing = False  # the last Lease read/write got no answer or an error (said once, not per poll)
    while True:
        now, sent = datetime.now(timezone.utc), time.monotonic()  # the renewTime written, and when, by this clock
        try:
            leading, other = await loop.run_in_executor(None, _try_lead, ctx, now)
            if leading:
                renewed = sent
                if ctx.state.leadership is not None:
                    ctx.state.leadership.renewed(sent)
            if failing:
                log.info("the API server answers again: the Lease %s is read and renewed", where)
            failing = False
        except asyncio.CancelledError:
            raise
        except Forbidden as err:  # 401 or 403: no RBAC for the Lease
            log.warning("cannot keep the Lease %s (%s): this operator leads alone; a second operator on this cluster would admit too", where, kube.describe(err))
            if ctx.state.leadership is not None:
                ctx.state.leadership.alone()
            _set(ctx, True, wake, where)
            return
        except Exception as err:  # another answer, or none: keep leading only while the last renewal is within the renew deadline
            leading, other = ctx.state.leader and time.monotonic() - renewed < deadline, None
            failing = _say_failing(failing, where, err)
        if other is not None and other != said_holder:
            log.info("standing by: the Lease %s is held by %s (polled every %.1f s)", where, other, poll_seconds(s.lease_seconds))
        said_holder = other
        _set(ctx, leading, wake, where)
        if not leading:
            ctx.health.passed()  # a standby's pass is its Lease check
        await asyncio.sleep(poll_seconds(s.lease_seconds))


def _say_failing(failing: bool, where: str, err: Exception) -> bool:
    """Log the first failed Lease read/write of a run of failures (one WARNING line, not one per poll); returns True (now failing)."""
    if not failing:
        log.warning("could not renew the Lease %s: %s; retrying every poll, said again only once the API server answers", where, kube.describe(err))
    return True


def _set(ctx: OperatorContext, leading: bool, wake: Callable[[], None], where: str) -> None:
    if leading and not ctx.state.leader:
        log.info("leading: this operator (%s) holds the Lease %s and admits and reconciles", ctx.identity, where)
        refresh = getattr(ctx.kube, "refresh", None)
        if refresh is not None:  # plan on a LIST taken after the Lease changed hands, not on a watch that may lag (operator/kube/cached.py)
            refresh()
        ctx.state.leader = True
        ctx.state.swept = None  # a new leader looks at once for Workloads whose job went while another led (operator/kueue.py: sweep)
        wake()
    elif not leading and ctx.state.leader:
        log.warning("no longer leading: the Lease %s was not renewed; this operator stands by", where)
        ctx.state.leader = False
    if not leading and ctx.state.leadership is not None:
        ctx.state.leadership.lost()
    metrics.LEADER.set(1 if ctx.state.leader else 0)


RELEASE_ATTEMPTS = 3
"""How many read-and-write rounds :func:`release` makes when its write meets a 409 (a renewal in flight)."""


def release(ctx: OperatorContext) -> bool:
    """Give the Lease up (a stopping leader), so a standby takes over at its next poll instead of after the lease duration; best effort.

    A renewal of :func:`keep_lease` may still be running in its executor thread
    when the stop cancels that task (a cancel does not stop the thread): its
    write can land between this read and this write, which then gets a 409. The
    Lease is read and written again, up to :data:`RELEASE_ATTEMPTS` rounds (each
    call bounded by the Lease call timeout); the renewal does not take the Lease
    back once ``ctx.stop`` is set (:func:`_try_lead`). Returns True when the Lease is
    no longer held by this operator (given up now, or held by another, or gone).
    """
    s = ctx.settings
    try:
        for _ in range(RELEASE_ATTEMPTS):
            held = ctx.kube.get_lease(s.lease_namespace, lease.LEASE_NAME)
            if not held or (held.get("spec") or {}).get("holderIdentity") != ctx.identity:
                return True
            kept = {"leaseTransitions": int((held.get("spec") or {}).get("leaseTransitions") or 0)}
            if ctx.kube.put_lease(s.lease_namespace, lease.LEASE_NAME, kept, held):
                return True
        log.info("could not give up the Lease %s/%s: written by someone else %d times meanwhile; it expires by itself", s.lease_namespace, lease.LEASE_NAME, RELEASE_ATTEMPTS)
    except Exception as err:  # the Lease expires by itself
        log.info("could not give up the Lease %s/%s: %s", s.lease_namespace, lease.LEASE_NAME, kube.describe(err))
    return False
