"""A hot spare on kind (issue 29): a 2-node job with ``spec.spares: 1`` on 3 workers; one rank's worker is frozen
(``docker pause`` of its kind container: kubelet, supervisor and workers stop at once, as when a machine is lost but
the API still shows its pods Running). The gang's coordinator hears that rank's supervisor fall silent, gives the
rank to the spare pod, and attempt 1 starts in place: the other rank's pod and the spare's, no pod created for it, no
gang restart. The operator follows: the spare pod carries the rank, the frozen pod is deleted, one infrastructure
restart is counted as in place. The worker is then unfrozen and the job finishes.

The rank frozen is node rank 0 (``RAILTRAIN_E2E_SPARE_RANKS``, default ``0``; ``0,1`` for both): the worker that
hosts the coordinator and torch's rendezvous store. Node rank 1's supervisor hosts the coordinator from its copy of
the state, the spare takes rank 0 and hosts the next attempt's rendezvous store, and the operator reads the ledger
from node rank 1's supervisor and rank 0's progress from the spare's pod. Rank 1 lost (the coordinator where it was)
is the same path without the move, covered in ``run --local`` and on the control plane. It runs before the
node-loss file (which leaves the cluster a worker short) and leaves every worker running."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from .conftest import wait_for
from .test_kind import _restart_job, _run_until_step, workers_of

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]

REPEATS = int(os.environ.get("RAILTRAIN_E2E_SPARE_REPEATS", "1"))
"""How many times the scene runs (one job each); more than 1 only to measure (docs/bench-recovery.md)."""
LOG_EVERY = int(os.environ.get("RAILTRAIN_E2E_SPARE_LOG_EVERY", "10"))
"""The trainer's --log-every: the time to the first step is read from rank 0's step lines."""

RANKS = [int(r) for r in os.environ.get("RAILTRAIN_E2E_SPARE_RANKS", "0").split(",") if r.strip()]
"""The node ranks whose worker is frozen, one scene each."""
SPARE_LINE = "[path spare, verdict retryable]"
STEP_AFTER = re.compile(r"^step=(\d+) loss=", re.MULTILINE)


def pods_by_name(kind_cluster, name, ns) -> dict[str, dict]:
    out = kind_cluster.kubectl("get", "pods", "-n", ns, "-l", f"railtrain.dev/job-name={name}", "-o", "json").stdout
    return {p["metadata"]["name"]: p for p in json.loads(out)["items"]}


def spare_job(kind_cluster, kind_ns, tmp_path, name, env=(), until_step: int | None = 40) -> dict:
    """A 2-node job of 200 steps with one spare and a memory tier every 10 steps (``env``: more trainer variables),
    run until its spare runs and it is past ``until_step`` (None: not waited for); returns the spare pod."""
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}},
                 steps=200, log_every=LOG_EVERY, runPolicy={"restartInPlace": True}, spares=1, env=list(env))  # fmt: skip

    def spare_running():
        pods = pods_by_name(kind_cluster, name, kind_ns)
        spare = [p for p in pods.values() if "railtrain.dev/spare" in p["metadata"]["labels"] and p["status"].get("phase") == "Running"]
        return spare[0] if spare else None

    spare = wait_for(spare_running, 300, f"{name}'s spare Running")
    if until_step is not None:
        _run_until_step(kind_cluster, kind_ns, name, until_step)
    return spare


def logs(kind_cluster, pod, ns) -> str:
    return kind_cluster.kubectl("logs", pod, "-n", ns, check=False).stdout


@pytest.mark.parametrize("lost_rank", RANKS)
@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_frozen_workers_rank_goes_to_the_hot_spare_and_the_gang_trains_on_without_a_gang_restart(kind_cluster, kind_ns, tmp_path, repeat, lost_rank):
    name, kept = f"spare-{lost_rank}-{repeat}", 1 - lost_rank
    spare = spare_job(kind_cluster, kind_ns, tmp_path, name)
    workers = workers_of(kind_cluster, name, kind_ns)
    assert spare["spec"]["nodeName"] not in workers.values()
    before = pods_by_name(kind_cluster, name, kind_ns)
    lost = workers[lost_rank]
    rank0 = spare["metadata"]["name"] if lost_rank == 0 else f"{name}-0"  # the pod that runs node rank 0 after the takeover
    took = f"takes node rank {lost_rank} at attempt 1"
    frozen, frozen_step = time.monotonic(), max(int(n) for n in STEP_AFTER.findall(logs(kind_cluster, f"{name}-0", kind_ns)))
    subprocess.run(["docker", "pause", lost], check=True, capture_output=True, timeout=60)
    try:
        def trained_again():
            log = logs(kind_cluster, rank0, kind_ns)
            mark = took if lost_rank == 0 else SPARE_LINE  # the spare's own line, or the coordinator's on rank 0's pod
            return mark in log and STEP_AFTER.search(log[log.index(mark):])

        wait_for(trained_again, 180, f"{name}: rank 0 training again after the spare took rank {lost_rank}", interval=0.5)
        print(f"hot spare (rank {lost_rank} lost): worker frozen → rank 0's first logged step of attempt 1: {time.monotonic() - frozen:.1f} s (steps logged every {LOG_EVERY})")
        coordinator = logs(kind_cluster, f"{name}-{kept}", kind_ns)
        assert SPARE_LINE in coordinator and f"a hot spare takes node rank {lost_rank}'s place" in coordinator, coordinator[-3000:]
        if lost_rank == 0:
            assert "this supervisor hosts it from attempt 0 on" in coordinator  # rank 1's supervisor took the coordinator over
        assert took in logs(kind_cluster, spare["metadata"]["name"], kind_ns)

        def followed():
            pods = pods_by_name(kind_cluster, name, kind_ns)
            held = pods.get(spare["metadata"]["name"], {}).get("metadata", {}).get("labels", {})
            return pods if held.get("railtrain.dev/node-rank") == str(lost_rank) and f"{name}-{lost_rank}" not in pods else None

        pods = wait_for(followed, 120, f"{name}: the operator labelled the spare with rank {lost_rank} and deleted the frozen rank's pod", interval=1)
        assert pods[f"{name}-{kept}"]["metadata"]["uid"] == before[f"{name}-{kept}"]["metadata"]["uid"]  # the other rank untouched
        assert pods[spare["metadata"]["name"]]["metadata"]["uid"] == spare["metadata"]["uid"]  # the same spare pod, now the lost rank
        status = kind_cluster.job(name, kind_ns)["status"]
        assert (status.get("restarts", 0), status.get("inPlaceRestarts"), status.get("infrastructureRestarts")) == (0, 1, 1), status
    finally:
        subprocess.run(["docker", "unpause", lost], check=False, capture_output=True, timeout=60)
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 900, f"{name} finished", interval=2)
    status = kind_cluster.job(name, kind_ns)["status"]
    assert kind_cluster.phase(name, kind_ns) == "Succeeded" and status.get("restarts", 0) == 0, status
    assert (status.get("progress") or {}).get("step", 0) > frozen_step, status  # rank 0's progress read after the takeover, from the pod that runs it
    log = logs(kind_cluster, rank0, kind_ns)
    start = log.index(took if lost_rank == 0 else SPARE_LINE)
    assert re.search(r"resumed from step (\d+) \(tier memory", log[start:]), log[-3000:]
    wait_for(lambda: kind_cluster.kubectl("get", "node", lost, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}").stdout == "True",
             180, f"{lost} Ready again")  # fmt: skip


def test_a_deleted_rank_pods_rank_goes_to_the_hot_spare_at_once_and_the_gang_trains_on(kind_cluster, kind_ns, tmp_path):
    """``kubectl delete pod <job>-1`` (as a drain's eviction would): the kubelet sends SIGTERM, rank 1's supervisor
    tells the coordinator it is leaving and stays; the spare takes rank 1 without the 5 s of silence, the operator
    labels it and deletes the old pod at once, and the job never restarts its gang (no RankVanished)."""
    name = "spare-deleted"
    spare = spare_job(kind_cluster, kind_ns, tmp_path, name)
    before = pods_by_name(kind_cluster, name, kind_ns)
    deleted = time.monotonic()
    kind_cluster.kubectl("delete", "pod", f"{name}-1", "-n", kind_ns, "--wait=false")

    def trained_again():
        log = logs(kind_cluster, f"{name}-0", kind_ns)
        return SPARE_LINE in log and STEP_AFTER.search(log[log.index(SPARE_LINE):])

    wait_for(trained_again, 120, f"{name}: rank 0 training again after the spare took rank 1", interval=0.5)
    print(f"hot spare (rank 1's pod deleted): delete → rank 0's first logged step of attempt 1: {time.monotonic() - deleted:.1f} s (steps logged every {LOG_EVERY})")
    assert "node rank 1's supervisor was stopped (its pod on " in logs(kind_cluster, f"{name}-0", kind_ns)

    def followed():
        pods = pods_by_name(kind_cluster, name, kind_ns)
        held = pods.get(spare["metadata"]["name"], {}).get("metadata", {}).get("labels", {})
        return pods if held.get("railtrain.dev/node-rank") == "1" and f"{name}-1" not in pods else None

    pods = wait_for(followed, 120, f"{name}: the operator labelled the spare with rank 1 and the deleted pod is gone", interval=1)
    assert pods[f"{name}-0"]["metadata"]["uid"] == before[f"{name}-0"]["metadata"]["uid"]  # rank 0 untouched
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 900, f"{name} finished", interval=2)
    status = kind_cluster.job(name, kind_ns)["status"]
    assert kind_cluster.phase(name, kind_ns) == "Succeeded" and (status.get("restarts", 0), status.get("inPlaceRestarts"), status.get("infrastructureRestarts")) == (0, 1, 1), status
    reasons = kind_cluster.kubectl("get", "events", "-n", kind_ns, "--field-selector", f"involvedObject.name={name}", "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert "SpareTakeover" in reasons and "RankVanished" not in reasons, reasons


def test_a_hardware_verdict_sends_its_node_out_the_spare_takes_the_rank_and_the_operator_quarantines_the_node(kind_cluster, kind_ns, tmp_path):
    """Rank 1's output is corrupted on its device (``RAILTRAIN_FAULT_BITFLIP`` ``target=activation``): the trainer's
    re-execution finds it and names rank 1's node (hardware-suspect, quarantined at once by the default rule). With a
    spare waiting, the gang's coordinator gives rank 1 to the spare and rank 0 restarts in place; rank 1's old
    supervisor is told why and leaves. The operator quarantines the node (the taint, status.quarantines, avoidNodes),
    labels the spare rank 1 and deletes the old pod: no gang restart, and the job finishes. The taint is cleared after."""
    name = "spare-sdc"
    fault = [{"name": "RAILTRAIN_FAULT_BITFLIP", "value": "rank=1,step=100,target=activation,bit=30"}]
    spare = spare_job(kind_cluster, kind_ns, tmp_path, name, env=fault, until_step=None)
    bad = workers_of(kind_cluster, name, kind_ns)[1]
    before = pods_by_name(kind_cluster, name, kind_ns)
    line = "[path spare, verdict hardware-suspect]"
    try:
        def trained_again():
            log = logs(kind_cluster, f"{name}-0", kind_ns)
            return log if line in log and STEP_AFTER.search(log[log.index(line):]) else None

        log = wait_for(trained_again, 600, f"{name}: rank 0 training again after the spare took rank 1 for the verdict", interval=1)
        assert f"node(s) {bad} quarantined; a hot spare takes node rank 1's place, the others restarting in place" in log, log[-3000:]
        assert "takes node rank 1 at attempt 1" in logs(kind_cluster, spare["metadata"]["name"], kind_ns)

        def followed():
            pods = pods_by_name(kind_cluster, name, kind_ns)
            held = pods.get(spare["metadata"]["name"], {}).get("metadata", {}).get("labels", {})
            status = kind_cluster.job(name, kind_ns).get("status", {})
            return (pods, status) if held.get("railtrain.dev/node-rank") == "1" and f"{name}-1" not in pods and status.get("quarantines") else None

        pods, status = wait_for(followed, 120, f"{name}: the operator quarantined {bad}, labelled the spare rank 1 and deleted the old pod", interval=1)
        assert pods[f"{name}-0"]["metadata"]["uid"] == before[f"{name}-0"]["metadata"]["uid"]  # rank 0 untouched
        assert [q["node"] for q in status["quarantines"]] == [bad] and bad in status.get("avoidNodes", []), status
        taints = json.loads(kind_cluster.kubectl("get", "node", bad, "-o", "jsonpath={.spec.taints}").stdout or "[]")
        assert {"key": "railtrain.dev/quarantined", "value": "hardware-suspect", "effect": "NoSchedule"} in taints, taints
        wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 900, f"{name} finished", interval=2)
        status = kind_cluster.job(name, kind_ns)["status"]
        assert kind_cluster.phase(name, kind_ns) == "Succeeded" and (status.get("restarts", 0), status.get("inPlaceRestarts"), status.get("infrastructureRestarts")) == (0, 1, 1), status
    finally:
        kind_cluster.kubectl("taint", "node", bad, "railtrain.dev/quarantined-", check=False)
