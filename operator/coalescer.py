"""Coalescing reconcile requests per job, as client-go's workqueue does with its dirty set (pure threading; no kopf).

Every event of a job's pods asks for a reconcile of the job: a gang of 256 pods
asks 256 times when its pods are created and 256 times more when they run, and
each reconcile reads and plans the whole gang, so the requests alone cost
O(pods²) CPU on the machine the API server shares. A request that arrives while
an earlier one for the same job is still waiting for the job's lock adds
nothing: that earlier one has not read the job yet, so it will see the change.
A request that arrives once a reconcile has started is kept, and runs after it.
This is the rule of client-go's workqueue (a key is queued at most once while
dirty; a key being processed and added again is processed again afterwards).

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import threading
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")


class Coalescer:
    """The keys whose reconcile is requested and has not started yet (thread-safe).

    Use :meth:`run`; the lock it takes is the key's own (the job's), so two
    reconciles of one job never overlap and each starts from a fresh read.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiting: set[Hashable] = set()
        self.coalesced = 0
        """How many requests were absorbed by one already waiting (a count, for tests and metrics)."""

    def waiting(self, key: Hashable) -> bool:
        """Whether a request for ``key`` waits to start."""
        with self._guard:
            return key in self._waiting

    def run(self, key: Hashable, lock: threading.Lock, fn: Callable[[], T]) -> tuple[bool, T | None]:
        """Call ``fn`` under ``lock`` unless a request for ``key`` already waits for it.

        Args:
            key: the job, e.g. ``(namespace, name)``.
            lock: the key's lock; ``fn`` runs while holding it.
            fn: the reconcile; it must read the job's state after it starts.

        Returns:
            ``(True, fn())`` when this request ran, ``(False, None)`` when it was
            absorbed by a waiting one (which runs later and reads the newer state).

        Raises:
            Whatever ``fn`` raises (the key is no longer waiting by then).
        """
        with self._guard:
            if key in self._waiting:
                self.coalesced += 1
                return False, None
            self._waiting.add(key)
        with lock:
            with self._guard:  # from here on, a new request must run again: this one may read too early for it
                self._waiting.discard(key)
            return True, fn()
