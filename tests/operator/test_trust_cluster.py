"""Recovery you can trust on a shared cluster, on a real control plane with KWOK nodes (issue 15's inputs):
a verdict is a claim checked against the gang's own nodes; every restart loop is bounded; a kubelet's eviction and
admission refusal are told apart; a finished rank stays finished; blame follows evidence."""

from __future__ import annotations

import uuid

import pytest

from railtrain.cli.controlplane import KWOK_REFUSING_NODES, LABEL_KWOK_EVICT, wait_until
from railtrain.crds import contract
from railtrain.operator.scheduling.quarantine import TAINT_KEY
from tests.polling import wait_for

from .clusterkit import G, P, V, start_running, all_running, condition, end_pod, events, job_body, job_status, observe, phase_is, pods_of

pytestmark = pytest.mark.cluster


start = start_running


def verdict(core, ns, pod, kind, why, nodes, ranks):
    end_pod(core, ns, pod, 1, contract.format_termination_message(kind, why[0], why[1], nodes=nodes, ranks=ranks))


def taint_of(core, node):
    return next((t for t in core.read_node(node).spec.taints or [] if t.key == TAINT_KEY), None)


def node_of(pods, rank):
    return next(p.spec.node_name for p in pods if p.metadata.labels[contract.LABEL_NODE_RANK] == str(rank))


def test_a_verdict_naming_a_control_plane_node_and_another_tenants_node_quarantines_neither(api, namespace, gpu_nodes, operator):
    core, custom = api
    (control_plane,) = gpu_nodes(1, labels={"node-role.kubernetes.io/control-plane": ""})
    core.patch_node(control_plane, {"spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}})
    gpu_nodes(3)
    tenant = f"tenant-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": tenant}})
    try:
        wait_until(lambda: core.read_namespaced_service_account("default", tenant), 30, "the tenant's ServiceAccount")  # 404 until it exists
        theirs = start(core, custom, tenant, "theirs", 1)
        pods = start(core, custom, namespace, "mine", 2)
        other = theirs[0].spec.node_name
        verdict(core, namespace, "mine-1", contract.VERDICT_HARDWARE_SUSPECT, ("ParameterMismatch", "bytes differ"), [control_plane, other], [1])
        status = wait_for(lambda: (s := job_status(custom, namespace, "mine")).get("infrastructureRestarts") == 1 and s, 60, "an infrastructure restart")
        assert taint_of(core, control_plane) is None and taint_of(core, other) is None
        assert not status.get("quarantines") and not status.get("avoidNodes") and not status.get("suspects")
        ignored = [e.message for e in events(core, namespace, "mine") if e.reason == "ClaimIgnored"]
        assert len(ignored) == 1 and control_plane in ignored[0] and other in ignored[0], ignored
        assert job_status(custom, tenant, "theirs")["phase"] == "Running"
        wait_for(lambda: all_running(core, namespace, "mine", 2, {p.metadata.uid for p in pods}), 90, "the new gang Running")
        wait_for(lambda: "ClaimIgnored" in operator.tail(200), 10, "the operator's log line")
    finally:
        core.delete_namespace(tenant)


def test_a_rank_evicted_for_its_own_limits_at_every_attempt_spends_the_backoff_limit(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(2)
    pods = start(core, custom, namespace, "greedy", 2, runPolicy={"backoffLimit": 1})
    for attempt in range(2):
        core.patch_namespaced_pod("greedy-1", namespace, {"metadata": {"labels": {LABEL_KWOK_EVICT: "limit"}}})
        if attempt == 0:
            wait_for(lambda: job_status(custom, namespace, "greedy").get("jobRestarts") == 1, 60, "a job restart")
            pods = wait_for(lambda: all_running(core, namespace, "greedy", 2, {p.metadata.uid for p in pods}), 90, "gang 2 Running")
    status = wait_for(lambda: phase_is(custom, namespace, "greedy", "Failed"), 60, "Failed at the backoff limit")
    failed = condition(status, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and "Evicted" in failed["message"]
    assert status.get("infrastructureRestarts", 0) == 0 and status["jobRestarts"] == 1


def test_a_node_whose_kubelet_refuses_every_pod_is_avoided_by_the_next_gang(api, namespace, gpu_nodes, operator):
    core, custom = api
    (refusing,) = gpu_nodes(1, name_prefix=KWOK_REFUSING_NODES[0].rsplit("-", 1)[0])
    assert refusing == KWOK_REFUSING_NODES[0]
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("picky", nodes=3, runPolicy={"backoffLimit": 0}))
    status = wait_for(lambda: (s := job_status(custom, namespace, "picky")).get("infrastructureRestarts") == 1 and s, 90, "an infrastructure restart")
    assert refusing in status["avoidNodes"] and status.get("jobRestarts", 0) == 0
    # the restart's reason as an Event: the next admission pass may already have replaced the Scheduled condition
    wait_for(lambda: any(e.reason == "AdmissionRefused" and "OutOfnvidia.com/gpu" in e.message for e in events(core, namespace, "picky")), 30, "the AdmissionRefused Event")
    gpu_nodes(1)
    pods = wait_for(lambda: all_running(core, namespace, "picky", 3), 90, "the gang Running without the refusing node")
    assert refusing not in {p.spec.node_name for p in pods}
    assert job_status(custom, namespace, "picky").get("infrastructureRestarts") == 1


def test_ranks_that_exited_0_stay_complete_when_their_nodes_are_drained(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    pods = start(core, custom, namespace, "done", 4)
    for rank in (2, 3):
        end_pod(core, namespace, f"done-{rank}")
    wait_for(lambda: (c := condition(job_status(custom, namespace, "done"), "Running")) and c["reason"] == "RanksFinishing" and "2 of 4" in c["message"], 60, "ranks 2 and 3 seen finished")
    for rank in (2, 3):  # kubectl drain: cordon, then evict every pod, finished ones too
        node = node_of(pods, rank)
        core.patch_node(node, {"spec": {"unschedulable": True}})
        core.create_namespaced_pod_eviction(f"done-{rank}", namespace, {"metadata": {"name": f"done-{rank}", "namespace": namespace}})
    wait_for(lambda: {p.metadata.name for p in pods_of(core, namespace, "done")} == {"done-0", "done-1"}, 60, "the drained pods gone")
    live = lambda: (sorted(p.metadata.uid for p in pods_of(core, namespace, "done")), job_status(custom, namespace, "done").get("restarts", 0))  # noqa: E731
    assert len(observe(live, 4)) == 1  # four operator resyncs: nothing recreated, nothing restarted
    for rank in (0, 1):
        end_pod(core, namespace, f"done-{rank}")
    status = wait_for(lambda: phase_is(custom, namespace, "done", "Succeeded"), 60, "Succeeded")
    assert status.get("restarts", 0) == 0 and not [e for e in events(core, namespace, "done") if e.reason == "RankVanished"]


def test_rank_0_named_the_straggler_at_every_attempt_quarantines_no_node_and_the_loop_ends(api, namespace, gpu_nodes, operator):
    core, custom = api
    nodes = gpu_nodes(2)
    rule = {"verdict": "straggler", "action": "RestartIgnoringBackoff", "quarantineAfter": 2}
    run_policy = {"failurePolicy": {"rules": [rule]}, "maxInfrastructureRestarts": 3, "infrastructureBackoffSeconds": 1}
    pods = start(core, custom, namespace, "slow", 2, runPolicy=run_policy)
    seen = []
    for attempt in range(4):
        where = node_of(pods, 0)
        seen.append(where)
        verdict(core, namespace, "slow-0", contract.VERDICT_STRAGGLER, ("SlowRank", "rank 0 is 30% slower"), [where], [0])
        if attempt < 3:
            wait_for(lambda: job_status(custom, namespace, "slow").get("infrastructureRestarts") == attempt + 1, 60, f"restart {attempt + 1}")
            pods = wait_for(lambda: all_running(core, namespace, "slow", 2, {p.metadata.uid for p in pods}), 90, f"gang {attempt + 2} Running")
        assert all(taint_of(core, n) is None for n in nodes), f"attempt {attempt}: a node was quarantined"
    status = wait_for(lambda: phase_is(custom, namespace, "slow", "Failed"), 60, "Failed at maxInfrastructureRestarts")
    assert condition(status, "Failed")["reason"] == "InfrastructureRestartLimitExceeded"
    assert seen[0] != seen[1] and seen[1] != seen[2], f"rank 0 stayed on one node: {seen}"
    assert all(taint_of(core, n) is None for n in nodes)


def test_node_list_and_clear_see_the_quarantine_placement_sees(api, gpu_nodes, cluster):
    """Kind 11: a node an administrator labelled railtrain.dev/quarantined is listed, cleared, and placed on by one test."""
    import subprocess
    import sys

    from railtrain.operator.scheduling.quarantine import LABEL_KEY

    core, _ = api
    (labelled,) = gpu_nodes(1, labels={LABEL_KEY: "true"})
    cli = [sys.executable, "-m", "railtrain.cli.main", "node"]
    listed = subprocess.run([*cli, "list", "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True)
    assert listed.returncode == 0 and f"{labelled}\tlabel" in listed.stdout.splitlines(), listed.stdout + listed.stderr
    cleared = subprocess.run([*cli, "clear", labelled, "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True)
    assert cleared.returncode == 0 and "railtrain.dev/quarantined label" in cleared.stdout, cleared.stdout + cleared.stderr
    assert LABEL_KEY not in (core.read_node(labelled).metadata.labels or {})


def test_the_cluster_wide_quarantine_bound_counts_what_the_api_server_stores(api, namespace, gpu_nodes, operator):
    """Kind 1: the platform's bound (--max-quarantines-per-hour, default 8) is counted from the quarantine taints and
    railtrain.dev/quarantined-at annotations on the Nodes, so it holds whichever operator (or earlier run) set them."""
    from datetime import datetime, timezone

    from railtrain.operator.scheduling.quarantine import ANNOTATION_AT
    from railtrain.operator.settings import DEFAULT_MAX_QUARANTINES_PER_HOUR

    core, custom = api
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in gpu_nodes(DEFAULT_MAX_QUARANTINES_PER_HOUR, gpus_per_node=1):  # quarantined within the hour, before this job
        core.patch_node(name, {"metadata": {"annotations": {ANNOTATION_AT: stamp}}, "spec": {"taints": [{"key": TAINT_KEY, "value": "hang", "effect": "NoSchedule"}]}})
    gpu_nodes(3)
    pods = start(core, custom, namespace, "late", 2)
    bad = node_of(pods, 1)
    verdict(core, namespace, "late-1", contract.VERDICT_HARDWARE_SUSPECT, ("RerunMismatch", "step 7 differs"), [bad], [1])
    status = wait_for(lambda: (s := job_status(custom, namespace, "late")).get("infrastructureRestarts") == 1 and s, 60, "an infrastructure restart")
    assert taint_of(core, bad) is None and bad in status["avoidNodes"] and not status.get("quarantines")
    # The Scheduled condition says NodeAvoided only until the restarted gang is placed again (it may be, before this
    # read); the restart's Event stays.
    bound = f"the cluster's bound of {DEFAULT_MAX_QUARANTINES_PER_HOUR} quarantines per hour is reached"
    wait_for(lambda: any(e.reason == "NodeAvoided" and bound in e.message for e in events(core, namespace, "late")), 30, "the NodeAvoided Event naming the bound")
