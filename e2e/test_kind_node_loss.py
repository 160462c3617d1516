"""Cases 4 and 3 in one job: the memory tier survives a killed rank, then a worker node is stopped (``docker stop`` of its kind container) under the running 2-node job on 3 workers.

Case 4: rank 1's trainer is killed; the memory tier (node tmpfs via hostPath)
outlives it, the gang restarts on the same nodes and resumes from it. Case 3:
the job then recovers from a stopped worker on the remaining workers: the
operator sees the node NotReady past ``runPolicy.nodeLostGraceSeconds`` (or the
surviving rank's hang verdict first), restarts the whole gang away from it, and
the new gang resumes from the newest checkpoint. The worker stopped is one that
does not run the leading operator's pod. One job takes both faults in turn (each
was a job of its own, the same scene set up twice). It runs last: it leaves the
cluster one worker short.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from .conftest import wait_for
from .kind_support import OPERATOR_NAMESPACE
from .test_kind import KILL_WORKER, RESUMED, _restart_job, _resumed_step, _run_until_step, rank0_log, restarted, restarts_taken, workers_of

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]  # the first test also builds the images and starts the cluster


def test_memory_tier_survives_a_killed_rank_then_a_stopped_worker_node_and_the_job_recovers_on_the_remaining_workers(kind_cluster, kind_ns, tmp_path):
    """Case 4: rank 1's trainer killed at step >= 50 → the gang restarts on the same nodes and loads the memory tier
    (resume at step >= 50); then case 3: a worker of the job stopped → the job restarts on the remaining workers,
    resumes at step > 0 → Succeeded."""
    name = "memory-node-loss"
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}})
    _run_until_step(kind_cluster, kind_ns, name, 50)
    before = workers_of(kind_cluster, name, kind_ns)
    kind_cluster.kubectl("exec", f"{name}-1", "-n", kind_ns, "--", "sh", "-c", KILL_WORKER)
    wait_for(lambda: restarted(kind_cluster, name, kind_ns), 300, f"{name} restarted")
    resumed = _resumed_step(kind_cluster, name, kind_ns)
    log = rank0_log(kind_cluster, name, kind_ns)
    assert resumed >= 50, log[-3000:]
    assert re.search(r"checkpoint: loaded step \d+ from memory", log), log[-3000:]
    assert workers_of(kind_cluster, name, kind_ns) == before  # restarted on the same nodes

    _run_until_step(kind_cluster, kind_ns, name, 70)
    lost = _worker_to_stop(kind_cluster, workers_of(kind_cluster, name, kind_ns))
    taken = restarts_taken(kind_cluster, name, kind_ns)
    subprocess.run(["docker", "stop", "--time", "5", lost], check=True, capture_output=True, timeout=120)
    wait_for(lambda: restarts_taken(kind_cluster, name, kind_ns) > taken, 240, f"{name} restarted after {lost} stopped", interval=2)
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
