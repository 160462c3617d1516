"""Elastic growth agrees with the queue on a real control plane (issue 15, kind 9): a job below its size never grows
past an equal-priority job that arrived earlier and waits for the same nodes, nor restarts into a size it cannot get."""

from __future__ import annotations

import pytest

from tests.polling import wait_for

from .clusterkit import all_running, foreign_pod, job_body, job_status, observe, phase_is, refused

pytestmark = pytest.mark.cluster


def test_an_elastic_job_does_not_grow_past_an_earlier_equal_priority_job_waiting_for_the_freed_nodes(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    nodes = gpu_nodes(4)
    for i, n in enumerate(nodes[2:]):  # someone else's pods hold two of the four nodes
        core.create_namespaced_pod(namespace, foreign_pod(f"other-{i}", n))
    submit(job_body("earlier", nodes=3))  # arrives first, needs 3 nodes: waits
    wait_for(lambda: refused(custom, namespace, "earlier"), 60, "the earlier job waiting")
    submit(job_body("grower", nodes=4, elastic={"minNodes": 2, "growIntervalSeconds": 1}))
    wait_for(lambda: all_running(core, namespace, "grower", 2), 90, "the elastic job Running on the 2 free nodes")
    wait_for(lambda: phase_is(custom, namespace, "grower", "Running"), 30, "phase Running")

    for i in range(2):  # two nodes free up: with the grower's own two, the earlier job would fit first
        core.delete_namespaced_pod(f"other-{i}", namespace, grace_period_seconds=0)

    def sample():
        s = job_status(custom, namespace, "grower")
        return s.get("phase"), s.get("admittedNodes"), s.get("infrastructureRestarts", 0), s.get("lastResizeTime")

    seen = observe(sample, 8)  # 8 resync periods of the test operator
    assert seen == [("Running", 2, 0, None)], f"the elastic job restarted to grow past the earlier job: {seen}"
    assert job_status(custom, namespace, "earlier").get("phase") == "Pending"
