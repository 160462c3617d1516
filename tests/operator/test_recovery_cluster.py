"""Recovery on a real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK nodes):
verdict → action, quarantine, node loss (deleted, or NotReady past the grace), vanished ranks, elastic shrink and
grow. KWOK's stages finish pods with the exit code and termination message a test puts on them, and report a Node
NotReady while a test labels it (cli/controlplane/stages.yaml)."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from railtrain.cli.controlplane import LABEL_KWOK_NOT_READY
from railtrain.crds import contract
from railtrain.operator.scheduling.quarantine import TAINT_KEY
from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, condition, end_pod, events, events_with, job_body, job_status, observe, phase_is, pods_of

pytestmark = pytest.mark.cluster


def fail(core, ns, pod, verdict=None, code=1, **details):
    """End a Running pod as the kubelet would report its trainer exiting with ``code`` and a verdict message."""
    end_pod(core, ns, pod, code, contract.format_termination_message(verdict, *details.pop("why"), **details) if verdict else None)


def start(core, custom, ns, name, count, **spec):
    custom.create_namespaced_custom_object(G, V, ns, P, job_body(name, nodes=count, **spec))
    pods = wait_for(lambda: all_running(core, ns, name, count), 90, f"{name} Running")
    wait_for(lambda: phase_is(custom, ns, name, "Running"), 30, "phase Running")
    return pods


def taint_of(core, node):
    return next((t for t in core.read_node(node).spec.taints or [] if t.key == TAINT_KEY), None)


def test_hardware_suspect_quarantines_the_node_and_the_next_gang_avoids_it(api, namespace, gpu_nodes, operator, cluster):
    core, custom = api
    gpu_nodes(3)
    pods = start(core, custom, namespace, "sdc", 2)
    bad = next(p.spec.node_name for p in pods if p.metadata.name == "sdc-1")
    fail(core, namespace, "sdc-1", contract.VERDICT_HARDWARE_SUSPECT, why=("ParameterMismatch", "rank 9 parameter bytes differ"), nodes=[bad], ranks=[9], step=40, evidence={"fingerprint": "ab12"})
    status = wait_for(lambda: (s := job_status(custom, namespace, "sdc")).get("infrastructureRestarts") == 1 and s, 60, "an infrastructure restart")
    assert status.get("jobRestarts", 0) == 0 and bad in status["avoidNodes"] and [q["node"] for q in status["quarantines"]] == [bad]
    taint = taint_of(core, bad)
    assert taint is not None and (taint.value, taint.effect) == ("hardware-suspect", "NoSchedule")
    new = wait_for(lambda: all_running(core, namespace, "sdc", 2, {p.metadata.uid for p in pods}), 90, "the new gang Running")
    assert bad not in {p.spec.node_name for p in new}
    job_events = events_with(core, namespace, "sdc", "NodeQuarantined")
    assert "ParameterMismatch" in job_events["NodeQuarantined"][-1].message
    node_events = events_with(core, "default", bad, "NodeQuarantined")["NodeQuarantined"]
    assert node_events and f"{namespace}/sdc" in node_events[0].message and "ab12" in node_events[0].message
    out = subprocess.run([sys.executable, "-m", "railtrain.cli.main", "node", "clear", bad, "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert taint_of(core, bad) is None


def test_each_verdict_gets_its_action(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    pods = start(core, custom, namespace, "mixed", 2, runPolicy={"backoffLimit": 5, "restartBackoffSeconds": 0})  # the actions, not the waits
    st = lambda: job_status(custom, namespace, "mixed")  # noqa: E731

    fail(core, namespace, "mixed-0", contract.VERDICT_RETRYABLE, why=("Crash", "segfault"))
    wait_for(lambda: st().get("jobRestarts") == 1, 60, "retryable: a job restart")
    # the reason as an Event: the first restart is immediate, so Scheduled may already read GangPlaced for the next gang
    assert st().get("infrastructureRestarts", 0) == 0
    events_with(core, namespace, "mixed", "Restarting")
    pods = wait_for(lambda: all_running(core, namespace, "mixed", 2, {p.metadata.uid for p in pods}), 90, "gang 2 Running")

    slow = pods[1].spec.node_name
    fail(core, namespace, pods[1].metadata.name, contract.VERDICT_STRAGGLER, why=("SlowRank", "rank 1 is 25% slower"), nodes=[slow], ranks=[1])
    wait_for(lambda: st().get("infrastructureRestarts") == 1, 60, "straggler: an infrastructure restart")
    assert st()["jobRestarts"] == 1 and slow in st()["avoidNodes"] and taint_of(core, slow) is None
    events_with(core, namespace, "mixed", "NodeAvoided")
    pods = wait_for(lambda: all_running(core, namespace, "mixed", 2, {p.metadata.uid for p in pods}), 90, "gang 3 Running")
    assert slow not in {p.spec.node_name for p in pods}

    hung = pods[0].spec.node_name
    for attempt in (1, 2):  # quarantined when named the second time
        fail(core, namespace, pods[0].metadata.name, contract.VERDICT_HANG, why=("NoProgress", "rank 0 stopped"), nodes=[hung], ranks=[0])
        wait_for(lambda: st().get("jobRestarts") == 1 + attempt, 60, f"hang {attempt}: a job restart")
        if attempt == 1:
            assert taint_of(core, hung) is None
            pods = wait_for(lambda: all_running(core, namespace, "mixed", 2, {p.metadata.uid for p in pods}), 90, "gang 4 Running")
            pods = sorted(pods, key=lambda p: p.spec.node_name != hung)  # put a pod on the hung node first, if any
    assert taint_of(core, hung) is not None and taint_of(core, hung).value == "hang"

    pods = wait_for(lambda: all_running(core, namespace, "mixed", 2, {p.metadata.uid for p in pods}), 90, "gang 5 Running")
    fail(core, namespace, pods[0].metadata.name, contract.VERDICT_USER_ERROR, code=2, why=("BadFlag", "--lr must be > 0"))
    status = wait_for(lambda: phase_is(custom, namespace, "mixed", "Failed"), 60, "user-error: Failed")
    assert condition(status, "Failed")["reason"] == "UserError" and status["jobRestarts"] == 3


def test_failed_job_stays_failed_keeps_its_failed_pod_and_creates_none(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(2)
    start(core, custom, namespace, "bad", 2)
    fail(core, namespace, "bad-1", contract.VERDICT_USER_ERROR, code=2, why=("BadData", "shard 3 is empty"))
    wait_for(lambda: phase_is(custom, namespace, "bad", "Failed"), 60, "Failed")
    wait_for(lambda: [p.metadata.name for p in pods_of(core, namespace, "bad")] == ["bad-1"], 60, "the running rank deleted, the failed one kept")
    kept = core.read_namespaced_pod("bad-1", namespace)
    assert "BadData" in kept.status.container_statuses[0].state.terminated.message
    seen: set[str] = set()
    deadline = time.monotonic() + 10  # 10 resync periods of the test operator (the suite's other windows watch 8)
    while time.monotonic() < deadline:  # an observation window: nothing may happen
        assert job_status(custom, namespace, "bad")["phase"] == "Failed"
        seen |= {p.metadata.uid for p in pods_of(core, namespace, "bad")}
        time.sleep(1)
    assert seen == {kept.metadata.uid}


def test_clean_pod_policy_all_deletes_every_pod_and_ttl_deletes_the_job(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(2)
    start(core, custom, namespace, "wipe", 2, runPolicy={"cleanPodPolicy": "All"})
    fail(core, namespace, "wipe-0", contract.VERDICT_USER_ERROR, code=2, why=("BadFlag", "no"))
    wait_for(lambda: phase_is(custom, namespace, "wipe", "Failed"), 60, "Failed")
    wait_for(lambda: not pods_of(core, namespace, "wipe"), 60, "every pod deleted")

    start(core, custom, namespace, "brief", 1, runPolicy={"ttlSecondsAfterFinished": 2})
    end_pod(core, namespace, "brief-0")
    wait_for(lambda: phase_is(custom, namespace, "brief", "Succeeded"), 60, "Succeeded")
    gone = lambda: not [j for j in custom.list_namespaced_custom_object(G, V, namespace, P)["items"] if j["metadata"]["name"] == "brief"]  # noqa: E731
    wait_for(gone, 30, "the finished job deleted by its TTL")


def test_node_deleted_under_a_running_gang_restarts_it_elsewhere(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    pods = start(core, custom, namespace, "lost", 2, runPolicy={"backoffLimit": 0})
    victim = pods[0].spec.node_name
    t0 = time.monotonic()
    core.delete_node(victim)
    new = wait_for(lambda: all_running(core, namespace, "lost", 2, {p.metadata.uid for p in pods}), 10, "the whole gang Running elsewhere within 10 s")
    elapsed = time.monotonic() - t0
    assert victim not in {p.spec.node_name for p in new} and elapsed <= 10
    status = job_status(custom, namespace, "lost")
    assert status["infrastructureRestarts"] == 1 and status.get("jobRestarts", 0) == 0  # backoffLimit 0 not spent
    running = condition(status, "Scheduled")
    reasons = {r: [e.message for e in es] for r, es in events_with(core, namespace, "lost", "NodeLost").items()}
    assert any(victim in m for m in reasons["NodeLost"]), (running, reasons)


def set_not_ready(core, node, not_ready=True):
    """Make KWOK report ``node`` NotReady (and stop heartbeating it), or Ready again (cli/controlplane/stages.yaml)."""
    core.patch_node(node, {"metadata": {"labels": {LABEL_KWOK_NOT_READY: "true" if not_ready else None}}})


def ready_since(core, node, status):
    """The lastTransitionTime of ``node``'s Ready condition when its status is ``status``, else None."""
    ready = next(c for c in core.read_node(node).status.conditions if c.type == "Ready")
    return ready.last_transition_time if ready.status == status else None


def gang_and_counters(core, custom, ns, name):
    """What a restart would change: the gang's pods (uid, node, terminating) and the job's phase and restart counters."""
    status = job_status(custom, ns, name)
    pods = frozenset((p.metadata.uid, p.spec.node_name, bool(p.metadata.deletion_timestamp)) for p in pods_of(core, ns, name))
    return pods, status.get("phase"), status.get("infrastructureRestarts", 0), status.get("jobRestarts", 0)


def seconds_until(moment):
    return (moment - datetime.now(timezone.utc)).total_seconds()


def test_node_not_ready_past_the_grace_restarts_the_gang_elsewhere_and_not_before(api, namespace, gpu_nodes, operator):
    core, custom = api
    grace = 8
    gpu_nodes(4)
    pods = start(core, custom, namespace, "sick", 2, runPolicy={"backoffLimit": 0, "nodeLostGraceSeconds": grace})
    victim = pods[0].spec.node_name
    before = gang_and_counters(core, custom, namespace, "sick")
    set_not_ready(core, victim)
    since = wait_for(lambda: ready_since(core, victim, "False"), 30, f"{victim} NotReady")
    # lastTransitionTime is whole seconds, at or before the transition: the grace ends at since + grace at the
    # earliest. Up to a second before that, the gang must be exactly as it was.
    window = seconds_until(since + timedelta(seconds=grace - 1))
    assert window > 2, f"{victim} was seen NotReady too late to watch the grace period ({window:.1f} s left)"
    seen = observe(lambda: gang_and_counters(core, custom, namespace, "sick"), window)
    assert seen == [before], f"the gang changed within the grace: {seen}"

    new = wait_for(lambda: all_running(core, namespace, "sick", 2, {p.metadata.uid for p in pods}),
                   seconds_until(since + timedelta(seconds=grace + 15)), "the whole gang Running elsewhere after the grace")
    assert victim not in {p.spec.node_name for p in new}
    # The pods run before the operator has seen them do so: wait for the job's own status to say Running.
    status = wait_for(lambda: phase_is(custom, namespace, "sick", "Running"), 30, "the job Running again")
    assert status["infrastructureRestarts"] == 1 and status.get("jobRestarts", 0) == 0  # backoffLimit 0 not spent
    lost = events_with(core, namespace, "sick", "NodeLost")["NodeLost"]
    assert len(lost) == 1 and f"node {victim}: the Node has been NotReady since" in lost[0].message, lost
    assert "KubeletNotReady" in lost[0].message
    assert lost[0].first_timestamp >= since + timedelta(seconds=grace)  # not before the grace elapsed


def test_node_back_ready_within_the_grace_restarts_nothing(api, namespace, gpu_nodes, operator):
    core, custom = api
    grace = 10
    gpu_nodes(3)
    start(core, custom, namespace, "blip", 2, runPolicy={"nodeLostGraceSeconds": grace})
    victim = pods_of(core, namespace, "blip")[1].spec.node_name
    before = gang_and_counters(core, custom, namespace, "blip")
    set_not_ready(core, victim)
    since = wait_for(lambda: ready_since(core, victim, "False"), 30, f"{victim} NotReady")
    set_not_ready(core, victim, False)
    wait_for(lambda: ready_since(core, victim, "True"), 30, f"{victim} Ready again")
    assert seconds_until(since + timedelta(seconds=grace)) > 1, "the node came back too late to test a blip"
    # Watch until well past the moment the grace would have ended (3 operator resyncs of 1 s).
    seen = observe(lambda: gang_and_counters(core, custom, namespace, "blip"), seconds_until(since + timedelta(seconds=grace + 3)))
    assert seen == [before], f"the gang changed after its node came back: {seen}"
    assert not [e for e in events(core, namespace, "blip") if e.reason == "NodeLost"]


def test_a_rank_pod_deleted_by_hand_restarts_the_whole_gang(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(3)
    pods = start(core, custom, namespace, "gone", 3)
    core.delete_namespaced_pod("gone-2", namespace)
    wait_for(lambda: job_status(custom, namespace, "gone").get("infrastructureRestarts") == 1, 30, "an infrastructure restart")
    vanished = events_with(core, namespace, "gone", "RankVanished")["RankVanished"]
    assert "pod gone-2 (rank 2) was" in vanished[0].message
    wait_for(lambda: all_running(core, namespace, "gone", 3, {p.metadata.uid for p in pods}), 90, "every rank replaced")


def test_elastic_job_shrinks_on_node_loss_and_grows_back(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    pods = start(core, custom, namespace, "elastic", 4, elastic={"minNodes": 2, "growIntervalSeconds": 1})
    core.delete_node(pods[3].spec.node_name)
    pods = wait_for(lambda: all_running(core, namespace, "elastic", 3, {p.metadata.uid for p in pods}), 60, "a gang of 3")
    wait_for(lambda: job_status(custom, namespace, "elastic").get("admittedNodes") == 3, 30, "admitted 3")
    assert {p.metadata.annotations[contract.ANNOTATION_NNODES] for p in pods} == {"3"}
    gpu_nodes(1)
    pods = wait_for(lambda: all_running(core, namespace, "elastic", 4, {p.metadata.uid for p in pods}), 90, "grown back to 4")
    status = wait_for(lambda: (s := job_status(custom, namespace, "elastic")).get("admittedNodes") == 4 and s, 30, "admitted 4")
    assert status["infrastructureRestarts"] == 2 and status.get("jobRestarts", 0) == 0
    events_with(core, namespace, "elastic", "NodeLost", "ElasticGrow")
