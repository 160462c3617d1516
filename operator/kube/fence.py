"""Leader fencing: whether this process may still write, by its own monotonic clock (docs/operator.md, "Leader fencing").

A Lease says who leads only as long as its holder keeps renewing it; a holder
that is frozen (SIGSTOP, a long GC or swap pause, a VM migration) or cut off
from the API server does not learn that a standby took the Lease until its own
loop runs again. So the operator never asks "did my loop say I lead?" before a
write, but "did a renewal succeed within the renew deadline?", counted from
the moment that renewal's request was sent: :class:`Leadership`. Every write
verb of :class:`railtrain.operator.kube.verbs.Kube` calls :meth:`Leadership.check`
first, so a stepped-down or frozen-and-resumed leader writes nothing. The renew
deadline is shorter than the Lease duration (client-go's leader election has
the same split, RenewDeadline < LeaseDuration), which leaves a margin for
clock skew between hosts and for a write already in flight when it lapses.

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger("railtrain.operator")

RENEW_FRACTION = 2 / 3
"""The renew deadline as a fraction of the Lease duration (client-go's defaults: 10 s of 15 s)."""


class NotLeader(Exception):
    """This operator may not write now: its last Lease renewal is older than the renew deadline, or it stands by.

    ``str()`` is one sentence naming the Lease and how long ago it was renewed.
    """


def renew_deadline(lease_seconds: float) -> float:
    """How long after a renewal's request was sent this operator may still act on it (seconds): :data:`RENEW_FRACTION` of ``lease_seconds``."""
    return lease_seconds * RENEW_FRACTION


def lease_call_seconds(lease_seconds: float) -> float:
    """The timeout of one Lease read or write (seconds): a quarter of ``lease_seconds``, at least 0.5.

    A Lease call that has not answered by then is given up, so the loop tries
    again at its next poll and notices the lost Lease within about the Lease
    duration (renew deadline + one such call), even when the API server is frozen.
    """
    return max(0.5, lease_seconds / 4)


class Leadership:
    """Whether this operator holds the Lease now, from when its last renewal was sent (thread-safe).

    Args:
        deadline_seconds: the renew deadline (:func:`renew_deadline` of the Lease duration).
        where: the Lease as ``namespace/name``, for sentences.
        clock: seconds of a monotonic clock (``time.monotonic``, which keeps
            counting while the process is stopped; tests pass a fake).
    """

    def __init__(self, deadline_seconds: float, where: str = "", clock: Callable[[], float] = time.monotonic):
        self.deadline_seconds = deadline_seconds
        self.where = where
        self.clock = clock
        self._sent: float | None = None  # when the last successful renewal's request was sent
        self._alone = False
        self._said = False  # the lapse was logged (once per lapse)
        self._lock = threading.Lock()

    def renewed(self, sent: float) -> None:
        """A take or renewal whose request was sent at ``sent`` (this clock) succeeded: held until ``sent`` + the deadline."""
        with self._lock:
            if self._sent is None or sent > self._sent:
                self._sent = sent
            self._said = False

    def alone(self) -> None:
        """Lead without a Lease (no RBAC for it): always held."""
        with self._lock:
            self._alone = True

    def lost(self) -> None:
        """The Lease is someone else's, or was given up: not held from now on."""
        with self._lock:
            self._sent = None

    def held(self) -> bool:
        """Whether this operator may act now: it leads alone, or its last renewal was sent less than the deadline ago."""
        with self._lock:
            return self._alone or (self._sent is not None and self.clock() - self._sent < self.deadline_seconds)

    def check(self) -> None:
        """Return when :meth:`held`; else raise :class:`NotLeader` (the first refusal of a lapse is one WARNING line).

        Raises:
            NotLeader: the sentence names the Lease and the age of its last renewal.
        """
        with self._lock:
            if self._alone:
                return
            age = None if self._sent is None else self.clock() - self._sent
            if age is not None and age < self.deadline_seconds:
                return
            first, self._said = not self._said, True
        if age is None:
            message = f"this operator does not hold the Lease {self.where}: it writes nothing"
        else:
            message = (
                f"this operator last renewed the Lease {self.where} {age:.1f} s ago, past its renew deadline of "
                f"{self.deadline_seconds:.1f} s: it writes nothing until it renews it (a standby may lead)"
            )
        if first and age is not None:
            log.warning("stopped acting: %s", message)
        raise NotLeader(message)
