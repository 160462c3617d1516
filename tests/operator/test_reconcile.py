"""The pure reconcile plan: gang lifecycle from observed pods."""

from datetime import datetime, timedelta, timezone

from railtrain.crds import contract
from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal

from .builders import fail, gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def test_new_job_waits_without_a_service_then_its_placement_creates_the_pods_pinned_with_it():
    obj = job_obj(nodes=3)
    p = planner.plan(obj, [], service_exists=False, now=NOW)
    assert p.create_service is None  # a waiting job holds no object (issue 26, item 8)
    assert p.create_pods == [] and p.status["phase"] == "Pending" and p.status_changed  # admit before creating
    q = planner.plan(obj, [], service_exists=False, now=NOW, placement=Placement(("a", "b", "c")))
    assert q.create_service["spec"]["clusterIP"] == "None" and q.status_first  # with the pods, after the admission record
    assert [pod["metadata"]["name"] for pod in q.create_pods] == ["llm-0", "llm-1", "llm-2"]
    assert all("schedulingGates" not in pod["spec"] for pod in q.create_pods)
    assert all(pod["metadata"]["ownerReferences"][0]["uid"] == "uid-llm" for pod in q.create_pods)
    assert ("Normal", "GangCreated") in [e[:2] for e in q.events]


def test_pods_carry_the_contract():
    obj = job_obj(nodes=2, procs=4, gpus=4)
    pod = planner.plan(obj, [], False, NOW, Placement(("a", "b"))).create_pods[1]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    from_pod = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in pod["spec"]["containers"][0]["env"] if "valueFrom" in e}
    assert from_pod == {contract.ENV_NODE_NAME: "spec.nodeName"}  # Downward API: the node the pod landed on
    parsed = contract.read_env(env)
    assert (parsed.nnodes, parsed.node_rank, parsed.procs_per_node) == (2, 1, 4)
    assert parsed.rdzv_addr == "llm-0.llm.team.svc"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod["metadata"]["labels"][contract.LABEL_NODE_RANK] == "1"
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_existing_gang_is_not_recreated():
    obj = job_obj()
    p = planner.plan(obj, gang(obj), True, NOW)
    assert p.create_pods == [] and p.create_service is None


def test_gang_request_only_when_all_pods_exist_and_gated():
    obj = job_obj(nodes=2)
    pods = gang(obj)
    assert planner.gang_request(obj, pods[:1]) is None
    assert planner.gang_request(obj, pods).nodes == 2
    assert planner.gang_request(obj, gang(obj, gated=False, nodes=["a", "b"])) is None


def test_placement_pins_and_ungates_every_pod():
    obj = job_obj(nodes=2)
    p = planner.plan(obj, gang(obj), True, NOW, Placement(("a", "b")))
    assert p.pin == {"llm-0": "a", "llm-1": "b"} and sorted(p.ungate) == ["llm-0", "llm-1"]
    assert find(p.status["conditions"], "Scheduled")["status"] == "True"
    assert p.status["placement"] == [{"rank": 0, "node": "a"}, {"rank": 1, "node": "b"}]


def test_refusal_keeps_pending_with_reason_and_binds_nothing():
    obj = job_obj(nodes=2)
    p = planner.plan(obj, gang(obj), True, NOW, Refusal("Unschedulable", "gang needs 2 nodes"))
    assert p.pin == {} and p.ungate == []
    c = find(p.status["conditions"], "Scheduled")
    assert (c["status"], c["reason"], c["message"]) == ("False", "Unschedulable", "gang needs 2 nodes")
    assert p.status["phase"] == "Pending"
    # Same refusal again: no status change, no new Event.
    again = planner.plan(obj | {"status": p.status}, gang(obj), True, NOW + timedelta(seconds=5), Refusal("Unschedulable", "gang needs 2 nodes"))
    assert not again.status_changed and again.events == []


def test_all_running_sets_running_and_start_time():
    obj = job_obj(nodes=2)
    p = planner.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert p.status["phase"] == "Running" and p.status["startTime"] == "2026-11-29T12:00:00Z"


def test_all_succeeded_completes():
    obj = job_obj(nodes=2)
    p = planner.plan(obj, gang(obj, phase="Succeeded", gated=False, nodes=["a", "b"]), True, NOW)
    assert p.status["phase"] == "Succeeded" and p.status["completionTime"]


def test_failed_pod_restarts_the_gang_within_backoff():
    obj = job_obj(nodes=2)
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    fail(pods[1], code=1, message="NCCL timeout")
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert sorted(p.delete_pods) == ["llm-0", "llm-1"]
    assert "rank 1 exited with code 1: NCCL timeout" in find(p.status["conditions"], "Scheduled")["message"]
    # Next pass: old pods still terminating block re-creation of the same names.
    for pod in pods:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:01Z"
    nxt = planner.plan(obj | {"status": p.status}, pods, True, NOW)
    assert nxt.create_pods == []
    # Once gone, the new gang is created with the new restart count.
    assert planner.admission_request(obj | {"status": p.status}, [], NOW)[1] is True
    fresh = planner.plan(obj | {"status": p.status}, [], True, NOW, Placement(("a", "b")))
    assert [pod["metadata"]["annotations"][contract.ANNOTATION_RESTART] for pod in fresh.create_pods] == ["1", "1"]


def test_backoff_limit_and_user_error_fail_the_job():
    obj = job_obj(nodes=1, runPolicy={"backoffLimit": 0})
    pods = [fail(gang(obj, gated=False, nodes=["a"])[0])]
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Failed" and find(p.status["conditions"], "Failed")["reason"] == "BackoffLimitExceeded"
    obj2 = job_obj(nodes=1)
    p2 = planner.plan(obj2, [fail(gang(obj2, gated=False, nodes=["a"])[0], code=contract.EXIT_USER_ERROR)], True, NOW)
    assert find(p2.status["conditions"], "Failed")["reason"] == "UserError"


def test_deadline_exceeded_stops_the_gang():
    obj = job_obj(nodes=1, runPolicy={"activeDeadlineSeconds": 60}, status={"phase": "Running", "startTime": "2026-11-29T11:58:00Z"})
    p = planner.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a"]), True, NOW)
    assert p.status["phase"] == "Failed" and p.delete_pods == ["llm-0"]


def test_suspend_deletes_pods():
    obj = job_obj(nodes=2, runPolicy={"suspend": True})
    p = planner.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert p.status["phase"] == "Suspended" and sorted(p.delete_pods) == ["llm-0", "llm-1"]


def test_invalid_stored_spec_fails_without_raising():
    obj = job_obj()
    obj["spec"]["nodes"] = "many"
    p = planner.plan(obj, [], True, NOW)
    assert p.status["phase"] == "Failed" and find(p.status["conditions"], "Failed")["reason"] == "InvalidSpec"


def placed(nodes, explanation="inside railtrain.dev/rack=r0 (best fit)"):
    domains = tuple({"railtrain.dev/rack": "r0", "kubernetes.io/hostname": n} for n in nodes)
    summary = {"policy": "preferred", "level": "", "domainLevel": "railtrain.dev/rack", "domain": "r0", "spread": {"railtrain.dev/rack": 1}}
    return Placement(tuple(nodes), "GangPlaced", domains, summary, explanation)


def test_placement_writes_topology_and_domains_that_later_reconciles_keep():
    obj = job_obj(nodes=2)
    p = planner.plan(obj, gang(obj), True, NOW, placed(["a", "b"]))
    assert p.status["topology"]["domainLevel"] == "railtrain.dev/rack" and p.status["topology"]["reason"].startswith("inside")
    assert p.status["placement"][1] == {"rank": 1, "node": "b", "domains": {"railtrain.dev/rack": "r0", "kubernetes.io/hostname": "b"}}
    assert p.status["admittedNodes"] == 2
    assert p.annotate["llm-0"][contract.ANNOTATION_NNODES] == "2"
    running = planner.plan(obj | {"status": p.status}, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert running.status["placement"] == p.status["placement"]
    assert find(running.status["conditions"], "Scheduled")["message"] == find(p.status["conditions"], "Scheduled")["message"]


def released_gang(obj, nodes, phase="Pending", nnodes=None):
    pods = gang(obj, phase=phase, gated=False, nodes=nodes)
    for p in pods:
        if nnodes is not None:
            p["metadata"]["annotations"][contract.ANNOTATION_NNODES] = str(nnodes)
    return pods


def test_gang_not_running_within_timeout_is_released_and_requeued_with_backoff():
    obj = job_obj(nodes=2, runPolicy={"gangTimeoutSeconds": 60})
    first = planner.plan(obj, gang(obj), True, NOW, placed(["a", "b"]))
    status = first.status
    pods = released_gang(obj, ["a", "b"])
    pods[0]["status"]["phase"] = "Running"
    early = planner.plan(obj | {"status": status}, pods, True, NOW + timedelta(seconds=59))
    assert early.delete_pods == [] and early.status["phase"] == "Pending"
    late = planner.plan(obj | {"status": status}, pods, True, NOW + timedelta(seconds=60))
    assert sorted(late.delete_pods) == ["llm-0", "llm-1"]
    c = find(late.status["conditions"], "Scheduled")
    assert (c["status"], c["reason"]) == ("False", "GangTimeout") and "1 of 2 ranks Running" in c["message"]
    assert late.status["requeues"] == 1 and late.status["requeueAfter"] == "2026-11-29T12:01:10Z"  # + 10 s backoff
    assert "admittedNodes" not in late.status
    assert ("Warning", "GangTimeout") in [e[:2] for e in late.events]
    # While backing off, the job is not in the admission queue; afterwards it is.
    waiting = obj | {"status": late.status}
    fresh = gang(obj)
    assert planner.admission_request(waiting, fresh, NOW + timedelta(seconds=65)) is None
    assert planner.gang_request(waiting, fresh, NOW + timedelta(seconds=71)).nodes == 2


def test_requeue_backoff_doubles_up_to_a_cap():
    from railtrain.operator.job.records import requeue_delay

    assert [requeue_delay(n).total_seconds() for n in (1, 2, 3, 7, 20)] == [10, 20, 40, 600, 600]


def test_elastic_gang_is_admitted_with_fewer_nodes():
    obj = job_obj(nodes=4, procs=8, gpus=8, elastic={"minNodes": 2})
    pods = gang(obj)
    env = {e["name"]: e for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{contract.ANNOTATION_NNODES}']"
    assert pods[0]["metadata"]["annotations"][contract.ANNOTATION_NNODES] == "4"
    request = planner.gang_request(obj, pods, NOW)
    assert request.sizes == (2, 3, 4)
    p = planner.plan(obj, pods, True, NOW, placed(["a", "b", "c"]))
    assert p.delete_pods == ["llm-3"] and sorted(p.ungate) == ["llm-0", "llm-1", "llm-2"]
    assert p.annotate["llm-2"] == {contract.ANNOTATION_NNODES: "3", contract.ANNOTATION_PARALLELISM: "data=24,fsdp=1,tensor=1,pipeline=1"}
    assert p.status["admittedNodes"] == 3
    # Released pods carry the admitted size: rank 3 is not re-created, and 3 Running ranks are the whole gang.
    running = released_gang(obj, ["a", "b", "c", "d"], phase="Running", nnodes=3)[:3]
    nxt = planner.plan(obj | {"status": p.status}, running, True, NOW)
    assert nxt.create_pods == [] and nxt.status["phase"] == "Running" and nxt.status["admittedNodes"] == 3
    assert planner.admission_request(obj | {"status": nxt.status}, running, NOW) is None


def test_fixed_size_pods_carry_literal_values():
    obj = job_obj(nodes=2)
    env = {e["name"]: e for e in gang(obj)[1]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == {"name": "PET_NNODES", "value": "2"}


def test_not_ready_job_holds_its_turn_only_for_a_while():
    obj = job_obj(nodes=3, runPolicy={"gangTimeoutSeconds": 30})
    obj["metadata"]["creationTimestamp"] = "2026-11-29T12:00:00Z"
    pods = gang(obj)[:2]  # rank 2 not created yet
    request, ready = planner.admission_request(obj, pods, NOW + timedelta(seconds=10))
    assert not ready and request.nodes == 3
    assert planner.gang_request(obj, pods, NOW) is None
    assert planner.admission_request(obj, pods, NOW + timedelta(seconds=31)) is None


def test_suspend_marks_the_gang_unscheduled():
    obj = job_obj(nodes=1, runPolicy={"suspend": True}, status={"phase": "Running", "conditions": []})
    p = planner.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a"]), True, NOW)
    assert find(p.status["conditions"], "Scheduled")["reason"] == "Suspended"


def test_status_patch_deletes_what_the_new_status_dropped():
    old = {"phase": "Pending", "requeueAfter": "t", "topology": {"rails": 8, "policy": "none"}, "placement": [{"rank": 0}]}
    new = {"phase": "Running", "topology": {"policy": "none"}, "placement": []}
    patch = planner.status_patch(old, new)
    assert patch == {"phase": "Running", "topology": {"policy": "none", "rails": None}, "placement": [], "requeueAfter": None}


def test_a_gang_pinned_to_a_lost_node_is_deleted_to_start_over():
    obj = job_obj(nodes=2)
    pods = gang(obj)
    pods[0]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gone"}
    pods[0]["spec"].pop("schedulingGates")
    p = planner.plan(obj, pods, True, NOW, Refusal("PinnedNodeUnavailable", "rank 0 on gone (node gone)"))
    assert sorted(p.delete_pods) == ["llm-0", "llm-1"] and p.status["phase"] == "Pending"


def test_trainer_verdict_in_termination_message_decides_retry():
    """torchrun reports exit code 1 for a worker's code 2; the JSON verdict still says user error."""
    obj = job_obj(nodes=1)
    msg = contract.format_termination_message(contract.VERDICT_USER_ERROR, "InvalidConfiguration", "--data matches no files")
    pod = fail(gang(obj, gated=False, nodes=["a"])[0], code=1, message=msg)
    p = planner.plan(obj, [pod], True, NOW)
    failed = find(p.status["conditions"], "Failed")
    assert p.status["phase"] == "Failed" and failed["reason"] == "UserError"
    assert "InvalidConfiguration: --data matches no files" in failed["message"]
    retry = contract.format_termination_message(contract.VERDICT_RETRYABLE, "NcclTimeout", "all-reduce timed out")
    p2 = planner.plan(obj, [fail(gang(obj, gated=False, nodes=["a"])[0], code=2, message=retry)], True, NOW)
    assert p2.status["phase"] == "Restarting"


def test_user_error_from_any_failed_rank_wins():
    obj = job_obj(nodes=2)
    pods = gang(obj, gated=False, nodes=["a", "b"])
    fail(pods[0], code=1, message=contract.format_termination_message(contract.VERDICT_RETRYABLE, "PeerGone", "rank 1 vanished"))
    fail(pods[1], code=1, message=contract.format_termination_message(contract.VERDICT_USER_ERROR, "InvalidConfiguration", "bad --data"))
    p = planner.plan(obj, pods, True, NOW)
    failed = find(p.status["conditions"], "Failed")
    assert p.status["phase"] == "Failed" and failed["reason"] == "UserError" and "rank 1" in failed["message"]


def test_suspend_then_resume_while_another_job_holds_the_nodes_leaves_no_stale_condition_or_placement():
    obj = job_obj(nodes=2)
    admitted = planner.plan(obj, gang(obj), True, NOW, placed(["a", "b"]))
    running = planner.plan(obj | {"status": admitted.status}, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert running.status["phase"] == "Running" and running.status["placement"] and running.status["topology"]
    suspended_obj = job_obj(nodes=2, runPolicy={"suspend": True}, status=running.status)
    suspended = planner.plan(suspended_obj, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW + timedelta(seconds=10))
    assert suspended.status["phase"] == "Suspended"
    assert "placement" not in suspended.status and "topology" not in suspended.status  # its nodes are free: no stale "Placed: inside rack r0"
    # resumed; another job holds a and b now: the admission pass refuses
    resumed_obj = job_obj(nodes=2, status=suspended.status)
    waiting = planner.plan(resumed_obj, [], True, NOW + timedelta(seconds=20), Refusal("Unschedulable", "2 nodes asked, 0 free"))
    conds = {c["type"]: c for c in waiting.status["conditions"]}
    assert waiting.status["phase"] == "Pending"
    assert (conds["Scheduled"]["status"], conds["Scheduled"]["reason"]) == ("False", "Unschedulable")
    assert (conds["Suspended"]["status"], conds["Suspended"]["reason"]) == ("False", "Resumed")
    assert "waits for admission" in conds["Suspended"]["message"]
    assert conds["Running"]["status"] == "False" and "waits for admission" in conds["Running"]["message"]
    assert not any("suspended" in c["message"] or "admitted again" in c["message"] for c in conds.values())
    # the nodes come free: admitted, then running
    later = job_obj(nodes=2, status=waiting.status)
    again = planner.plan(later, [], True, NOW + timedelta(seconds=30), placed(["c", "d"]))
    pods = gang(later, phase="Pending", gated=False, nodes=["c", "d"])
    pending = planner.plan(later | {"status": again.status}, pods, True, NOW + timedelta(seconds=31))
    conds = {c["type"]: c for c in pending.status["conditions"]}
    assert "admitted again" in conds["Suspended"]["message"] and conds["Running"]["reason"] == "RanksNotRunning"
    assert [e["node"] for e in pending.status["placement"]] == ["c", "d"]
