"""A hot spare on kind (issue 29): a 2-node job with ``spec.spares: 1`` on 3 workers; rank 1's worker is frozen
(``docker pause`` of its kind container: kubelet, supervisor and workers stop at once, as when a machine is lost but
the API still shows its pods Running). Node rank 0's coordinator hears rank 1's supervisor fall silent, gives the rank
to the spare pod, and attempt 1 starts in place: rank 0's pod and the spare's, no pod created for it, no gang
restart. The operator follows: the spare pod carries rank 1, the frozen pod is deleted, one infrastructure restart is
counted as in place. The worker is then unfrozen and the job finishes. It runs before the node-loss file (which
leaves the cluster a worker short) and leaves every worker running."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from .conftest import wait_for
from .test_kind import _restart_job, _run_until_step, rank0_log, workers_of

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]

REPEATS = int(os.environ.get("RAILTRAIN_E2E_SPARE_REPEATS", "1"))
"""How many times the scene runs (one job each); more than 1 only to measure (docs/bench-recovery.md)."""
LOG_EVERY = int(os.environ.get("RAILTRAIN_E2E_SPARE_LOG_EVERY", "10"))
"""The trainer's --log-every: the time to the first step is read from rank 0's step lines."""

SPARE_LINE = "[path spare, verdict retryable]"
STEP_AFTER = re.compile(r"^step=(\d+) loss=", re.MULTILINE)


def pods_by_name(kind_cluster, name, ns) -> dict[str, dict]:
    out = kind_cluster.kubectl("get", "pods", "-n", ns, "-l", f"railtrain.dev/job-name={name}", "-o", "json").stdout
    return {p["metadata"]["name"]: p for p in json.loads(out)["items"]}


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_frozen_workers_rank_goes_to_the_hot_spare_and_the_gang_trains_on_without_a_gang_restart(kind_cluster, kind_ns, tmp_path, repeat):
    name = f"spare-{repeat}"
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}},
                 steps=200, log_every=LOG_EVERY, runPolicy={"restartInPlace": True}, spares=1)  # fmt: skip

    def spare_running():
        pods = pods_by_name(kind_cluster, name, kind_ns)
        spare = [p for p in pods.values() if "railtrain.dev/spare" in p["metadata"]["labels"] and p["status"].get("phase") == "Running"]
        return spare[0] if spare else None

    spare = wait_for(spare_running, 300, f"{name}'s spare Running")
    _run_until_step(kind_cluster, kind_ns, name, 40)
    workers = workers_of(kind_cluster, name, kind_ns)
    assert spare["spec"]["nodeName"] not in workers.values()
    before = pods_by_name(kind_cluster, name, kind_ns)
    lost = workers[1]
    frozen = time.monotonic()
    subprocess.run(["docker", "pause", lost], check=True, capture_output=True, timeout=60)
    try:
        def trained_again():
            log = rank0_log(kind_cluster, name, kind_ns)
            return SPARE_LINE in log and STEP_AFTER.search(log[log.index(SPARE_LINE):])

        wait_for(trained_again, 180, f"{name}: rank 0 training again after the spare took rank 1", interval=0.5)
        print(f"hot spare: worker frozen → rank 0's first logged step of attempt 1: {time.monotonic() - frozen:.1f} s (steps logged every {LOG_EVERY})")

        def followed():
            pods = pods_by_name(kind_cluster, name, kind_ns)
            held = pods.get(spare["metadata"]["name"], {}).get("metadata", {}).get("labels", {})
            return pods if held.get("railtrain.dev/node-rank") == "1" and f"{name}-1" not in pods else None

        pods = wait_for(followed, 120, f"{name}: the operator labelled the spare with rank 1 and deleted the frozen rank's pod", interval=1)
        assert pods[f"{name}-0"]["metadata"]["uid"] == before[f"{name}-0"]["metadata"]["uid"]  # rank 0 untouched
        assert pods[spare["metadata"]["name"]]["metadata"]["uid"] == spare["metadata"]["uid"]  # the same spare pod, now rank 1
        status = kind_cluster.job(name, kind_ns)["status"]
        assert (status.get("restarts", 0), status.get("inPlaceRestarts"), status.get("infrastructureRestarts")) == (0, 1, 1), status
    finally:
        subprocess.run(["docker", "unpause", lost], check=False, capture_output=True, timeout=60)
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 900, f"{name} finished", interval=2)
    status = kind_cluster.job(name, kind_ns)["status"]
    assert kind_cluster.phase(name, kind_ns) == "Succeeded" and status.get("restarts", 0) == 0, status
    log = rank0_log(kind_cluster, name, kind_ns)
    assert re.search(r"resumed from step (\d+) \(tier memory", log[log.index(SPARE_LINE):]), log[-3000:]
    wait_for(lambda: kind_cluster.kubectl("get", "node", lost, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}").stdout == "True",
             180, f"{lost} Ready again")  # fmt: skip
