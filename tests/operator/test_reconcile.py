"""The pure reconcile plan: gang lifecycle from observed pods."""

from datetime import datetime, timedelta, timezone

from railtrain.crds import contract
from railtrain.operator import reconcile
from railtrain.operator.conditions import find
from railtrain.operator.placement import Placement, Refusal

from .builders import fail, gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def test_new_job_creates_service_and_gated_pods():
    obj = job_obj(nodes=3)
    p = reconcile.plan(obj, [], service_exists=False, now=NOW)
    assert p.create_service["spec"]["clusterIP"] == "None"
    assert [pod["metadata"]["name"] for pod in p.create_pods] == ["llm-0", "llm-1", "llm-2"]
    assert all(pod["spec"]["schedulingGates"] == [{"name": contract.SCHEDULING_GATE}] for pod in p.create_pods)
    assert all(pod["metadata"]["ownerReferences"][0]["uid"] == "uid-llm" for pod in p.create_pods)
    assert p.status["phase"] == "Pending" and p.status_changed
    assert ("Normal", "GangCreated") == p.events[0][:2]


def test_pods_carry_the_contract():
    obj = job_obj(nodes=2, procs=4, gpus=4)
    pod = reconcile.plan(obj, [], False, NOW).create_pods[1]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    parsed = contract.read_env(env)
    assert (parsed.nnodes, parsed.node_rank, parsed.procs_per_node) == (2, 1, 4)
    assert parsed.rdzv_addr == "llm-0.llm.team.svc"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod["metadata"]["labels"][contract.LABEL_NODE_RANK] == "1"


def test_existing_gang_is_not_recreated():
    obj = job_obj()
    p = reconcile.plan(obj, gang(obj), True, NOW)
    assert p.create_pods == [] and p.create_service is None


def test_gang_request_only_when_all_pods_exist_and_gated():
    obj = job_obj(nodes=2)
    pods = gang(obj)
    assert reconcile.gang_request(obj, pods[:1]) is None
    assert reconcile.gang_request(obj, pods).nodes == 2
    assert reconcile.gang_request(obj, gang(obj, gated=False, nodes=["a", "b"])) is None


def test_placement_pins_and_ungates_every_pod():
    obj = job_obj(nodes=2)
    p = reconcile.plan(obj, gang(obj), True, NOW, Placement(("a", "b")))
    assert p.pin == {"llm-0": "a", "llm-1": "b"} and sorted(p.ungate) == ["llm-0", "llm-1"]
    assert find(p.status["conditions"], "Scheduled")["status"] == "True"
    assert p.status["placement"] == [{"rank": 0, "node": "a"}, {"rank": 1, "node": "b"}]


def test_refusal_keeps_pending_with_reason_and_binds_nothing():
    obj = job_obj(nodes=2)
    p = reconcile.plan(obj, gang(obj), True, NOW, Refusal("Unschedulable", "gang needs 2 nodes"))
    assert p.pin == {} and p.ungate == []
    c = find(p.status["conditions"], "Scheduled")
    assert (c["status"], c["reason"], c["message"]) == ("False", "Unschedulable", "gang needs 2 nodes")
    assert p.status["phase"] == "Pending"
    # Same refusal again: no status change, no new Event.
    again = reconcile.plan(obj | {"status": p.status}, gang(obj), True, NOW + timedelta(seconds=5), Refusal("Unschedulable", "gang needs 2 nodes"))
    assert not again.status_changed and again.events == []


def test_all_running_sets_running_and_start_time():
    obj = job_obj(nodes=2)
    p = reconcile.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert p.status["phase"] == "Running" and p.status["startTime"] == "2026-11-29T12:00:00Z"


def test_all_succeeded_completes():
    obj = job_obj(nodes=2)
    p = reconcile.plan(obj, gang(obj, phase="Succeeded", gated=False, nodes=["a", "b"]), True, NOW)
    assert p.status["phase"] == "Succeeded" and p.status["completionTime"]


def test_failed_pod_restarts_the_gang_within_backoff():
    obj = job_obj(nodes=2)
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    fail(pods[1], code=1, message="NCCL timeout")
    p = reconcile.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert sorted(p.delete_pods) == ["llm-0", "llm-1"]
    assert "rank 1 exited with code 1: NCCL timeout" in find(p.status["conditions"], "Scheduled")["message"]
    # Next pass: old pods still terminating block re-creation of the same names.
    for pod in pods:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:01Z"
    nxt = reconcile.plan(obj | {"status": p.status}, pods, True, NOW)
    assert nxt.create_pods == []
    # Once gone, the new gang is created with the new restart count.
    fresh = reconcile.plan(obj | {"status": p.status}, [], True, NOW)
    assert [pod["metadata"]["annotations"][contract.ANNOTATION_RESTART] for pod in fresh.create_pods] == ["1", "1"]


def test_backoff_limit_and_user_error_fail_the_job():
    obj = job_obj(nodes=1, runPolicy={"backoffLimit": 0})
    pods = [fail(gang(obj, gated=False, nodes=["a"])[0])]
    p = reconcile.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Failed" and find(p.status["conditions"], "Failed")["reason"] == "BackoffLimitExceeded"
    obj2 = job_obj(nodes=1)
    p2 = reconcile.plan(obj2, [fail(gang(obj2, gated=False, nodes=["a"])[0], code=contract.EXIT_USER_ERROR)], True, NOW)
    assert find(p2.status["conditions"], "Failed")["reason"] == "UserError"


def test_deadline_exceeded_stops_the_gang():
    obj = job_obj(nodes=1, runPolicy={"activeDeadlineSeconds": 60}, status={"phase": "Running", "startTime": "2026-11-29T11:58:00Z"})
    p = reconcile.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a"]), True, NOW)
    assert p.status["phase"] == "Failed" and p.delete_pods == ["llm-0"]


def test_suspend_deletes_pods():
    obj = job_obj(nodes=2, runPolicy={"suspend": True})
    p = reconcile.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert p.status["phase"] == "Suspended" and sorted(p.delete_pods) == ["llm-0", "llm-1"]


def test_invalid_stored_spec_fails_without_raising():
    obj = job_obj()
    obj["spec"]["nodes"] = "many"
    p = reconcile.plan(obj, [], True, NOW)
    assert p.status["phase"] == "Failed" and find(p.status["conditions"], "Failed")["reason"] == "InvalidSpec"
