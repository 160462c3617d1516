"""Case 3: a worker node stopped (``docker stop`` of its kind container) under a running 2-node job on 3 workers.

The job recovers on the remaining workers: the operator sees the node NotReady
past ``runPolicy.nodeLostGraceSeconds`` (or the surviving rank's hang verdict first),
restarts the whole gang away from it, and the new gang resumes from the newest
checkpoint. The worker stopped is one that does not run the leading operator's pod.
It runs last: it leaves the cluster one worker short.
"""

from __future__ import annotations

import subprocess

import pytest

from .conftest import wait_for
from .kind_support import OPERATOR_NAMESPACE
from .test_kind import RESUMED, _restart_job, _run_until_step, rank0_log, restarted, workers_of

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]  # the first test also builds the images and starts the cluster


def test_a_stopped_worker_node_and_the_job_recovers_on_the_remaining_workers(kind_cluster, kind_ns, tmp_path):
    name = "node-loss"
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}})
    _run_until_step(kind_cluster, kind_ns, name, 40)
    lost = _worker_to_stop(kind_cluster, workers_of(kind_cluster, name, kind_ns))
    subprocess.run(["docker", "stop", "--time", "5", lost], check=True, capture_output=True, timeout=120)
    wait_for(lambda: restarted(kind_cluster, name, kind_ns), 240, f"{name} restarted after {lost} stopped", interval=2)
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 600, f"{name} finished", interval=2)
    assert kind_cluster.phase(name, kind_ns) == "Succeeded"
    assert lost not in workers_of(kind_cluster, name, kind_ns).values()
    resumed = RESUMED.search(rank0_log(kind_cluster, name, kind_ns))
    assert resumed and int(resumed.group(1)) > 0


def _worker_to_stop(kind_cluster, workers: dict[int, str]) -> str:
    """A worker of the job that does not run the leading operator's pod (rank 1's if it can be).

    The chart runs two replicas spread over the workers, so a worker of the job
    may well run the standby: stopping it leaves the leader in charge. Stopping
    the leader's own node would test the Lease handover and the Deployment's
    eviction first, not the operator's node-loss handling.
    """
    holder = kind_cluster.lease_holder()
    leader_nodes = {(p.get("spec") or {}).get("nodeName") for p in kind_cluster.pods(OPERATOR_NAMESPACE) if p["metadata"]["name"] == holder}
    assert leader_nodes, f"no operator pod holds the Lease (holder {holder!r})"
    for rank in sorted(workers, key=lambda r: (r != 1, r)):
        if workers[rank] not in leader_nodes:
            return workers[rank]
    raise AssertionError(f"every worker of the job runs the leading operator: {workers}, leader on {leader_nodes}")
