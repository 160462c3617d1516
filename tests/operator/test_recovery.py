"""Table-driven tests of the recovery policies (pure): verdict → action, quarantine bound, node loss, vanished ranks,
finished jobs (cleanPodPolicy, TTL), elastic grow, and the operator's quarantine metric."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from railtrain.crds import contract
from railtrain.operator import metrics
from railtrain.operator.scheduling import quarantine
from railtrain.operator.job import inplace as job_inplace
from railtrain.operator.job import planner
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.scheduling.snapshot import snapshot
from railtrain.operator.job.conditions import find

from .builders import fail, gang, job_obj, node

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
RELEASED = "2026-11-29T11:00:00Z"


def running(**extra):
    return {
        "phase": "Running", "startTime": RELEASED, "admittedNodes": 2,
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": RELEASED},
            {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "", "lastTransitionTime": RELEASED},
        ],
    } | extra


def verdict_msg(kind, nodes=("a",), reason="Finding"):
    return contract.format_termination_message(kind, reason, "what was seen", nodes=list(nodes), ranks=[1], step=7, evidence={"x": 1})


def failed_gang(kind, status=None, code=1, nodes=("a",), **spec):
    obj = job_obj(nodes=2, status=status or running(), **spec)
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    fail(pods[1], code=code, message=verdict_msg(kind, nodes))
    return obj, pods


@pytest.mark.parametrize(
    "kind,phase,reason,job,infra,quarantined,avoided",
    [
        (contract.VERDICT_USER_ERROR, "Failed", "UserError", 0, 0, [], []),
        (contract.VERDICT_RETRYABLE, "Restarting", "Restarting", 1, 0, [], []),
        (contract.VERDICT_HARDWARE_SUSPECT, "Restarting", "NodeQuarantined", 0, 1, ["a"], ["a"]),
        (contract.VERDICT_STRAGGLER, "Restarting", "NodeAvoided", 0, 1, [], ["a"]),
        (contract.VERDICT_HANG, "Restarting", "Restarting", 1, 0, [], []),
    ],
)
def test_default_action_of_each_verdict(kind, phase, reason, job, infra, quarantined, avoided):
    obj, pods = failed_gang(kind)
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    st = p.status
    assert st["phase"] == phase
    cond_type = "Failed" if phase == "Failed" else "Scheduled"
    assert find(st["conditions"], cond_type)["reason"] == reason
    assert (st.get("jobRestarts", 0), st.get("infrastructureRestarts", 0)) == (job, infra)
    assert [q[0] for q in p.quarantine] == quarantined and st.get("avoidNodes", []) == avoided
    if phase == "Restarting":
        assert sorted(p.delete_pods) == ["llm-0", "llm-1"] and st["restarts"] == 1


@pytest.mark.parametrize("ranks_before,quarantined", [([1], True), ([0], False)])
def test_hang_quarantines_the_node_named_the_second_time_only_with_another_rank_on_it(ranks_before, quarantined):
    """Blame follows evidence: rank 0 named on node a twice says nothing about a; rank 1 then rank 0 named there does."""
    suspects = [{"node": "a", "verdict": "hang", "count": 1, "ranks": ranks_before}]
    obj = job_obj(nodes=2, status=running(suspects=suspects, jobRestarts=1, restarts=1, rankShift=1))
    pods = gang(obj, restarts=1, phase="Running", gated=False, nodes=["a", "b"])
    fail(pods[1], message=verdict_msg(contract.VERDICT_HANG))
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    assert [q[:2] for q in p.quarantine] == ([("a", "hang")] if quarantined else [])
    assert {"node": "a", "verdict": "hang", "count": 2, "ranks": sorted({0, *ranks_before})} in p.status["suspects"]
    assert (("Warning", "NodeQuarantined") in [e[:2] for e in p.events]) == quarantined
    assert p.status["rankShift"] == 2  # the next gang's ranks rotate again


def test_user_rules_override_the_defaults_per_verdict():
    rules = [{"verdict": "hardware-suspect", "action": "Fail"}, {"verdict": "retryable", "action": "RestartIgnoringBackoff"}]
    obj, pods = failed_gang(contract.VERDICT_HARDWARE_SUSPECT, runPolicy={"failurePolicy": {"rules": rules}})
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    assert p.status["phase"] == "Failed" and find(p.status["conditions"], "Failed")["reason"] == "FailurePolicy" and not p.quarantine
    obj, pods = failed_gang(contract.VERDICT_RETRYABLE, runPolicy={"failurePolicy": {"rules": rules}, "backoffLimit": 0})
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Restarting" and p.status["infrastructureRestarts"] == 1  # backoffLimit 0 not spent


def test_backoff_limit_counts_job_restarts_only():
    obj, pods = failed_gang(contract.VERDICT_RETRYABLE, runPolicy={"backoffLimit": 1}, status=running(infrastructureRestarts=5, jobRestarts=0))
    assert planner.plan(obj, pods, True, NOW).status["phase"] == "Restarting"
    obj, pods = failed_gang(contract.VERDICT_RETRYABLE, runPolicy={"backoffLimit": 1}, status=running(jobRestarts=1))
    st = planner.plan(obj, pods, True, NOW).status
    assert st["phase"] == "Failed" and find(st["conditions"], "Failed")["reason"] == "BackoffLimitExceeded"


@pytest.mark.parametrize("spent, base, wait", [(0, None, 0), (1, None, 10), (2, None, 20), (3, 200, 300), (2, 400, 400), (8, None, 300), (1, 0, 0)])
def test_job_restarts_back_off_from_the_second_on(spent, base, wait):
    """Issue 15, kind 3: every restart loop backs off, whatever its cause; a job restart (spending backoffLimit) waits
    0, then restartBackoffSeconds (10 s, batch/v1 Job's pod failure backoff), doubling, capped at 300 s or the base."""
    policy = {"backoffLimit": 20} | ({} if base is None else {"restartBackoffSeconds": base})
    obj, pods = failed_gang(contract.VERDICT_RETRYABLE, runPolicy=policy, status=running(jobRestarts=spent))
    p = planner.plan(obj, pods, True, NOW)
    after = p.status.get("requeueAfter")
    assert p.status["phase"] == "Restarting" and p.status["jobRestarts"] == spent + 1
    assert (after is None and wait == 0) or after == (NOW + timedelta(seconds=wait)).strftime("%Y-%m-%dT%H:%M:%SZ"), after
    assert (f"next gang after {wait} s" in find(p.status["conditions"], "Scheduled")["message"]) == (wait > 0)


def test_the_most_specific_verdict_of_the_gang_decides():
    obj = job_obj(nodes=2, status=running())
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    fail(pods[0], message=verdict_msg(contract.VERDICT_RETRYABLE))
    fail(pods[1], message=verdict_msg(contract.VERDICT_HARDWARE_SUSPECT, nodes=("b",)))
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    assert [q[0] for q in p.quarantine] == ["b"]


@pytest.mark.parametrize(
    "statuses,blamed",
    [
        # rank 1 killed by SIGKILL (137); rank 0 then failed on the closed connection, earlier in the list and lower
        ({0: (1, "2026-11-29T11:30:05Z"), 1: (137, "2026-11-29T11:30:06Z")}, 1),
        # neither killed by a signal: the one that finished first
        ({0: (1, "2026-11-29T11:30:09Z"), 1: (1, "2026-11-29T11:30:04Z")}, 1),
        # a rank whose finish time is unknown comes after one that has it
        ({0: (1, ""), 1: (1, "2026-11-29T11:30:04Z")}, 1),
        # all equal: the lowest rank
        ({0: (1, "2026-11-29T11:30:04Z"), 1: (1, "2026-11-29T11:30:04Z")}, 0),
    ],
)
def test_among_equal_verdicts_the_rank_where_the_failure_began_is_named(statuses, blamed):
    obj = job_obj(nodes=2, status=running())
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    for rank, (code, finished) in statuses.items():
        fail(pods[rank], code=code, message="")
        pods[rank]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = finished
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    running_cond = find(p.status["conditions"], "Running")
    assert running_cond["message"].startswith(f"rank {blamed} exited with code {statuses[blamed][0]}"), running_cond


def test_evicted_pod_for_the_nodes_sake_is_an_infrastructure_restart():
    obj = job_obj(nodes=2, status=running())
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    disrupted = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]
    pods[0]["status"] = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.", "conditions": disrupted}
    st = planner.plan(obj, pods, True, NOW).status
    assert find(st["conditions"], "Scheduled")["reason"] == "RankEvicted" and st["infrastructureRestarts"] == 1
    assert st["nodeFailures"] == [{"node": "a", "count": 1}] and "a" not in st.get("avoidNodes", [])


def test_evicted_pod_for_its_own_limits_is_the_jobs_failure():
    """KEP-3329: the kubelet marks node-pressure evictions with DisruptionTarget; an eviction without it is for the pod's own limits."""
    obj = job_obj(nodes=2, status=running(jobRestarts=3))
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    pods[1]["status"] = {"phase": "Failed", "reason": "Evicted", "message": "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi."}
    st = planner.plan(obj, pods, True, NOW).status
    failed = find(st["conditions"], "Failed")
    assert st["phase"] == "Failed" and failed["reason"] == "BackoffLimitExceeded" and "exceeds the total limit" in failed["message"]
    assert st.get("infrastructureRestarts", 0) == 0


def test_a_kubelet_admission_refusal_avoids_that_node_next_time():
    obj = job_obj(nodes=2, status=running())
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    pods[1]["status"] = {"phase": "Failed", "reason": "OutOfnvidia.com/gpu", "message": "Node didn't have enough resource: nvidia.com/gpu"}
    p = planner.plan(obj, pods, True, NOW)
    st = p.status
    assert find(st["conditions"], "Scheduled")["reason"] == "AdmissionRefused" and st["infrastructureRestarts"] == 1
    assert st["avoidNodes"] == ["b"] and any("AdmissionRefused" in line and "nodes=b" in line for line in p.log)


def test_infrastructure_restarts_back_off_and_are_bounded():
    spec = {"runPolicy": {"maxInfrastructureRestarts": 3, "infrastructureBackoffSeconds": 10}}
    waits = []
    for done in range(4):
        obj = job_obj(nodes=2, status=running(infrastructureRestarts=done, restarts=done), **spec)
        pods = gang(obj, restarts=done, phase="Running", gated=False, nodes=["a", "b"])[:1]  # rank 1's pod deleted
        st = planner.plan(obj, pods, True, NOW).status
        if done == 3:
            assert st["phase"] == "Failed" and find(st["conditions"], "Failed")["reason"] == "InfrastructureRestartLimitExceeded"
            break
        assert st["phase"] == "Restarting" and st["infrastructureRestarts"] == done + 1
        after = st.get("requeueAfter")
        waits.append(0 if after is None else int((datetime.fromisoformat(after.replace("Z", "+00:00")) - NOW).total_seconds()))
    assert waits == [0, 10, 20]


def test_claims_about_nodes_the_gang_did_not_use_are_ignored_with_a_warning():
    obj, pods = failed_gang(contract.VERDICT_HARDWARE_SUSPECT, nodes=("a", "control-plane", "ghost"))
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b"), node("control-plane")])
    assert [q[0] for q in p.quarantine] == ["a"] and p.status["avoidNodes"] == ["a"]
    assert [s["node"] for s in p.status["suspects"]] == ["a"]
    warning = next(e for e in p.events if e[1] == "ClaimIgnored")
    assert warning[0] == "Warning" and "control-plane, ghost" in warning[2]
    assert sum("ClaimIgnored" in line for line in p.log) == 1


def test_the_cluster_wide_bound_counts_the_quarantines_the_api_server_stores():
    other = node("z", taints=[{"key": quarantine.TAINT_KEY, "value": "hang", "effect": "NoSchedule"}])
    other["metadata"]["annotations"] = {quarantine.ANNOTATION_AT: "2026-11-29T11:30:00Z"}
    obj, pods = failed_gang(contract.VERDICT_HARDWARE_SUSPECT)
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b"), other], settings=PlanSettings(quarantine_limit=1))
    assert not p.quarantine and p.status["phase"] == "Restarting" and p.status["avoidNodes"] == ["a"]
    assert find(p.status["conditions"], "Scheduled")["reason"] == "NodeAvoided"
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b"), other], settings=PlanSettings(quarantine_limit=2))
    assert [q[0] for q in p.quarantine] == ["a"]


def test_taint_helpers_and_placement_skip_quarantined_nodes():
    n = node("a")
    taints = quarantine.taints_with(n, "hang")
    assert taints == [{"key": quarantine.TAINT_KEY, "value": "hang", "effect": "NoSchedule"}]
    n["spec"]["taints"] = taints
    assert quarantine.taints_with(n, "hang") is None and quarantine.taints_without(n) == []
    snap = snapshot([n, node("b")], [])
    assert not snap.nodes["a"].eligible and snap.nodes["a"].why_ineligible == "quarantined (hang)"
    assert metrics.observe_nodes([n, node("b")]) == 1 and metrics.QUARANTINED_NODES._value.get() == 1


@pytest.mark.parametrize(
    "nodes,grace_passed,lost",
    [
        (["b"], False, True),  # node a deleted
        (["a", "b"], False, False),
        (["a-notready", "b"], False, False),  # NotReady within the grace
        (["a-notready", "b"], True, True),
    ],
)
def test_node_loss_restarts_the_whole_gang_and_force_deletes_its_pods(nodes, grace_passed, lost):
    obj = job_obj(nodes=2, status=running())
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    objs = []
    for name in nodes:
        n = node(name.split("-")[0], ready=not name.endswith("notready"))
        n["status"]["conditions"][0]["lastTransitionTime"] = (NOW - timedelta(seconds=31 if grace_passed else 5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        objs.append(n)
    p = planner.plan(obj, pods, True, NOW, nodes=objs)
    if not lost:
        assert p.status["phase"] == "Running" and not p.force_delete_pods
        return
    assert p.status["phase"] == "Restarting" and sorted(p.delete_pods) == ["llm-0", "llm-1"]
    assert p.force_delete_pods == ["llm-0"] and p.status["infrastructureRestarts"] == 1 and p.status.get("jobRestarts", 0) == 0
    scheduled = find(p.status["conditions"], "Scheduled")
    assert scheduled["reason"] == "NodeLost" and "node a" in scheduled["message"] and "llm-0 (rank 0)" in scheduled["message"]


def test_pods_of_an_earlier_gang_on_a_lost_node_are_force_deleted():
    obj = job_obj(nodes=2, status=running(restarts=1, phase="Restarting"))
    old = gang(obj, restarts=0, phase="Running", gated=False, nodes=["a", "b"])
    old[0]["metadata"]["deletionTimestamp"] = RELEASED
    p = planner.plan(obj, old, True, NOW, nodes=[node("b")])
    assert p.force_delete_pods == ["llm-0"]


@pytest.mark.parametrize(
    "disruption,words",
    [(None, "was deleted"), ("PreemptionByScheduler", "preempted"), ("EvictionByEvictionAPI", "evicted"), ("DeletionByTaintManager", "taint manager")],
)
def test_a_vanished_rank_restarts_the_gang_and_names_the_pod(disruption, words):
    obj = job_obj(nodes=3, status=running(admittedNodes=3))
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b", "c"])
    if disruption:
        pods[2]["metadata"]["deletionTimestamp"] = RELEASED
        pods[2]["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": disruption}]
    else:
        pods = pods[:2]
    p = planner.plan(obj, pods, True, NOW)
    scheduled = find(p.status["conditions"], "Scheduled")
    assert p.status["phase"] == "Restarting" and scheduled["reason"] == "RankVanished"
    assert "pod llm-2 (rank 2)" in scheduled["message"] and words in scheduled["message"]
    assert {"llm-0", "llm-1"} <= set(p.delete_pods) and not p.create_pods


def test_a_gang_not_yet_scheduled_recreates_a_missing_pod_instead():
    obj = job_obj(nodes=2, status={"phase": "Pending"})
    pods = gang(obj)[:1]
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Pending" and [x["metadata"]["name"] for x in p.create_pods] == ["llm-1"]


@pytest.mark.parametrize(
    "policy,phases,deleted",
    [
        ("Running", ["Failed", "Running"], ["llm-1"]),
        ("All", ["Failed", "Running"], ["llm-0", "llm-1"]),
        ("Running", ["Succeeded", "Succeeded"], []),
        ("All", ["Succeeded", "Succeeded"], ["llm-0", "llm-1"]),
    ],
)
def test_finished_jobs_keep_no_running_pod_and_follow_clean_pod_policy(policy, phases, deleted):
    for final in ("Failed", "Succeeded"):
        obj = job_obj(nodes=2, runPolicy={"cleanPodPolicy": policy}, status={"phase": final, "completionTime": RELEASED})
        pods = gang(obj, gated=False, nodes=["a", "b"])
        for pod, ph in zip(pods, phases):
            pod["status"]["phase"] = ph
        p = planner.plan(obj, pods, True, NOW)
        assert p.status["phase"] == final and sorted(p.delete_pods) == deleted and not p.create_pods


@pytest.mark.parametrize("ttl,due", [(None, False), (3600, False), (10, True), (0, True)])
def test_ttl_after_finished_deletes_the_job(ttl, due):
    run_policy = {} if ttl is None else {"ttlSecondsAfterFinished": ttl}
    obj = job_obj(nodes=1, runPolicy=run_policy, status={"phase": "Succeeded", "completionTime": "2026-11-29T11:59:00Z"})
    p = planner.plan(obj, [], True, NOW)
    assert p.delete_job is due and p.status["phase"] == "Succeeded"


def test_an_elastic_gang_grows_back_at_a_bounded_rate():
    spec = {"elastic": {"minNodes": 2, "growIntervalSeconds": 300}}
    obj = job_obj(nodes=4, status=running(admittedNodes=3), **spec)
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b", "c", "d"])[:3]
    for pod in pods:
        pod["metadata"]["annotations"][contract.ANNOTATION_NNODES] = "3"
    p = planner.plan(obj, pods, True, NOW, nodes=[node(n) for n in "abcd"], grow_to=4)
    assert p.status["phase"] == "Restarting" and find(p.status["conditions"], "Scheduled")["reason"] == "ElasticGrow"
    assert p.status["lastResizeTime"] == "2026-11-29T12:00:00Z" and p.status["infrastructureRestarts"] == 1
    recent = obj | {"status": running(admittedNodes=3, lastResizeTime="2026-11-29T11:58:00Z")}
    assert planner.plan(recent, pods, True, NOW, nodes=[node(n) for n in "abcd"], grow_to=4).status["phase"] == "Running"
    assert planner.plan(obj, pods, True, NOW, nodes=[node(n) for n in "abcd"], grow_to=3).status["phase"] == "Running"


def test_the_next_gang_after_a_hang_rotates_its_ranks_over_the_placed_nodes():
    from railtrain.operator.scheduling.placement import Placement

    obj = job_obj(nodes=3, status={"phase": "Restarting", "restarts": 1, "rankShift": 1})
    pods = gang(obj, restarts=1)
    placement = Placement(nodes=("a", "b", "c"), domains=({"h": "a"}, {"h": "b"}, {"h": "c"}))
    p = planner.plan(obj, pods, True, NOW, placement)
    assert p.pin == {"llm-0": "b", "llm-1": "c", "llm-2": "a"}  # a cyclic shift: ring neighbours stay neighbours


def test_a_rank_that_exited_0_stays_complete_when_its_pod_is_deleted():
    """Kind 4: ranks 2 and 3 exited 0, then their node was drained; the gang keeps running and succeeds, nothing is recreated."""
    obj = job_obj(nodes=4, status=running(admittedNodes=4))
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "a", "b", "b"])
    for p in pods[2:]:
        p["status"]["phase"] = "Succeeded"
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    assert p.status["succeededRanks"] == [2, 3] and p.status["phase"] == "Running"
    seen = obj | {"status": p.status}
    drained = pods[:2]  # the drain deleted ranks 2 and 3's pods; node b is cordoned
    p = planner.plan(seen, drained, True, NOW, nodes=[node("a"), node("b", unschedulable=True)])
    assert p.status["phase"] == "Running" and not p.create_pods and not p.delete_pods
    assert find(p.status["conditions"], "Running")["reason"] == "RanksFinishing"
    for x in drained:
        x["status"]["phase"] = "Succeeded"
    p = planner.plan(obj | {"status": p.status}, drained, True, NOW, nodes=[node("a"), node("b")])
    assert p.status["phase"] == "Succeeded"


def test_one_quarantine_test_for_placement_metrics_and_the_cli():
    """Kind 11: the label an administrator sets and the taint the operator sets are one test, read alike everywhere."""
    labelled = node("l", labels={quarantine.LABEL_KEY: "true"})
    tainted = node("t", taints=[{"key": quarantine.TAINT_KEY, "value": "hang", "effect": "NoSchedule"}])
    off = node("f", labels={quarantine.LABEL_KEY: "false"})
    assert [quarantine.quarantined_by(n) for n in (labelled, tainted, off)] == ["label", "hang", None]
    snap = snapshot([labelled, tainted, off], [])
    assert {name for name, n in snap.nodes.items() if not n.eligible} == {"l", "t"}
    assert metrics.observe_nodes([labelled, tainted, off]) == 2


def test_a_fault_a_gang_met_is_left_out_of_the_next_gangs_pods_and_a_later_one_is_kept():
    """An injected fault is an event (crds/faults.py): a gang restarted after meeting it would meet it again at the same
    step, forever (found on kind: a ``RAILTRAIN_FAULT_HANG`` in ``spec.env`` hung every new gang at step 7). The hang
    verdict of step 7 spends the hang and the kill at step 5, not the bit flip at step 50; the next gang's pods go
    without the spent ones. Fails on the old main (no ``status.spentFaults``; the pods kept every fault)."""
    env = [
        {"name": contract.ENV_FAULT_HANG, "value": "rank=1,step=7,kind=collective"},
        {"name": contract.ENV_FAULT_KILL, "value": "rank=0,step=5"},
        {"name": contract.ENV_FAULT_BITFLIP, "value": "rank=0,step=50"},
        {"name": "OTHER", "value": "1"},
    ]
    obj, pods = failed_gang(contract.VERDICT_HANG, env=env)
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    assert p.status["phase"] == "Restarting"
    assert p.status["spentFaults"] == [contract.ENV_FAULT_HANG, contract.ENV_FAULT_KILL]
    for pod in gang(obj, restarts=1):  # as every path that creates a gang pod renders it (admission, spares, groups)
        job_inplace.with_spent(pod, p.status)
        names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert contract.ENV_FAULT_BITFLIP in names and "OTHER" in names
        assert not names & {contract.ENV_FAULT_HANG, contract.ENV_FAULT_KILL}
