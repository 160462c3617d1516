"""Independent API calls run at once on a bounded thread pool, and the bound itself.

One gang's creates or deletes are independent requests; waiting for each in
turn makes a 256-pod gang 256 round trips. :func:`each` runs them together on
a pool whose size (:data:`CREATE_CONCURRENCY`) keeps one operator from queueing
hundreds of requests in the API server's flow-control budget.

May import: the standard library only (no other railtrain module).
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Callable, TypeVar

T = TypeVar("T")

CREATE_CONCURRENCY = 16
"""Most object creates one operator has in flight at once (:meth:`railtrain.operator.kube.verbs.Kube.create_many`): a 256-pod gang is 16 rounds of 16
concurrent POSTs, enough to keep the API server busy without letting one gang queue hundreds of requests in its flow-control budget.
The size of the pool a :class:`~railtrain.operator.kube.verbs.Kube` makes for itself when it is given none."""


def each(calls: list[Callable[[], T]], pool: Executor) -> list[T]:
    """Run independent calls at once on ``pool`` (one alone runs here); wait for every one to finish.

    Returns:
        Each call's answer, in order.

    Raises:
        The first error in ``calls`` order, after every call has finished.
    """
    if len(calls) <= 1:
        return [c() for c in calls]
    futures = [pool.submit(c) for c in calls]
    errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]
