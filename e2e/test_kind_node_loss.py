"""Case 3: a worker node stopped (``docker stop`` of its kind container) under a running 2-node job on 3 workers.

The job should recover on the remaining workers: the operator sees the node
NotReady, restarts the gang away from it, and the new gang resumes from the
memory tier's copy on the surviving neighbour. Noticing a lost node and
restarting the gang is the operator's node-loss handling (the recovery issue);
until that lands this case runs and is expected to fail (xfail, not strict), so
the suite reports which way it went. It runs last: it leaves the cluster one
worker short.
"""

from __future__ import annotations

import subprocess

import pytest

from .conftest import wait_for
from .test_kind import RESUMED, _restart_job, _run_until_step, rank0_log, workers_of

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]  # the first test also builds the images and starts the cluster


@pytest.mark.xfail(reason="needs the operator's node-loss handling (recovery issue); without it the gang waits on the lost node", strict=False)
def test_a_stopped_worker_node_and_the_job_recovers_on_the_remaining_workers(kind_cluster, kind_ns, tmp_path):
    name = "node-loss"
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}})
    _run_until_step(kind_cluster, kind_ns, name, 40)
    lost = workers_of(kind_cluster, name, kind_ns)[1]
    subprocess.run(["docker", "stop", "--time", "5", lost], check=True, capture_output=True, timeout=120)
    wait_for(lambda: kind_cluster.job(name, kind_ns).get("status", {}).get("restarts", 0) >= 1, 240, f"{name} restarted after {lost} stopped", interval=2)
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 600, f"{name} finished", interval=2)
    assert kind_cluster.phase(name, kind_ns) == "Succeeded"
    assert lost not in workers_of(kind_cluster, name, kind_ns).values()
    resumed = RESUMED.search(rank0_log(kind_cluster, name, kind_ns))
    assert resumed and int(resumed.group(1)) > 0
