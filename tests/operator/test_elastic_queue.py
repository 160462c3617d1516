"""Elastic growth agrees with the admission queue (issue 15, kind 9), without a cluster.

An elastic job grows only into what the admission pass would give it now: a
waiting job of higher priority, or of equal priority that arrived earlier, is
placed first, and the grow gets what it leaves.
"""

from __future__ import annotations

import pytest

from railtrain.crds import contract
from railtrain.operator.job import resize
from railtrain.operator.job.request import admission_request

from .builders import gang, job_obj, node

NODES = [node(n) for n in ("n0", "n1", "n2", "n3")]
EARLY, LATE = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"


def elastic_job(created=LATE, priority=0):
    """An elastic job (4 nodes, at least 2) running on n0 and n1: below its size."""
    obj = job_obj("grower", nodes=4, elastic={"minNodes": 2, "growIntervalSeconds": 1}, priority=priority,
                  status={"phase": "Running", "admittedNodes": 2})
    obj["metadata"]["creationTimestamp"] = created
    pods = gang(obj, phase="Running", gated=False, nodes=["n0", "n1", "n2", "n3"])[:2]
    for p in pods:
        p["metadata"]["annotations"][contract.ANNOTATION_NNODES] = "2"
    return obj, pods


def waiting_request(name, nodes, created, priority=0):
    obj = job_obj(name, nodes=nodes, priority=priority)
    obj["metadata"]["creationTimestamp"] = created
    request, _ = admission_request(obj, gang(obj))
    return request


@pytest.mark.parametrize(
    ("waiter", "grows_to"),
    [
        (None, 4),  # nobody waits: every freed node
        (("earlier", 2, EARLY, 0), 2),  # equal priority, arrived earlier: it takes the 2 freed nodes first
        (("earlier", 3, EARLY, 0), None),  # it takes 3 of the 4 once the grower's are freed: the grower would get 1 < minNodes
        (("urgent", 2, "2026-11-29T12:00:00Z", 5), 2),  # higher priority, arrived later: still first
        (("later", 2, "2026-11-29T12:00:00Z", 0), 4),  # equal priority, arrived later: FIFO, the grower first
        (("huge", 5, EARLY, 0), 4),  # a waiting job that fits nowhere holds back nobody (no head-of-line blocking)
    ],
)
def test_an_elastic_job_grows_only_into_what_the_queue_would_give_it(waiter, grows_to):
    obj, pods = elastic_job()
    queue = [waiting_request(*waiter)] if waiter else []
    assert resize.grow_size(obj, NODES, pods, queue=queue) == grows_to
