"""The rendezvous Service lives with the gang (issue 26, item 8; pure): a waiting job holds no Service, whether it
waits for its first admission, was re-queued after a gang timeout or had its gang leave; a restart's hold keeps it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from railtrain.operator.job import planner
from railtrain.operator.scheduling.refusal import Refusal

from .builders import gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
EARLIER = "2026-11-29T11:00:00Z"


def own_service(obj, uid="svc-uid"):
    """The job's Service as the API server returns it (owned by the job)."""
    meta = obj["metadata"]
    return {"kind": "Service", "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": uid,
            "ownerReferences": [{"uid": meta["uid"], "controller": True, "kind": "TrainingJob", "name": meta["name"]}]}}


def scheduled_false(reason):
    return {"type": "Scheduled", "status": "False", "reason": reason, "message": "", "lastTransitionTime": EARLIER}


def test_a_refused_job_has_no_service_and_one_left_from_before_is_deleted():
    obj = job_obj(nodes=2, status={"phase": "Pending", "conditions": [scheduled_false("Unschedulable")]})
    p = planner.plan(obj, [], own_service(obj), NOW, Refusal("Unschedulable", "gang needs 2 nodes; it waits"))
    assert p.create_service is None and p.delete_service == "svc-uid"


def test_a_job_re_queued_after_a_gang_timeout_gives_its_service_back_once_its_pods_are_leaving():
    requeued = {"phase": "Pending", "requeues": 1, "requeueAfter": (NOW + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "conditions": [scheduled_false("GangTimeout")]}
    obj = job_obj(nodes=2, status=requeued)
    leaving = gang(obj, phase="Pending", gated=False, nodes=["a", "b"])
    for pod in leaving:
        pod["metadata"]["deletionTimestamp"] = EARLIER
    assert planner.plan(obj, leaving, own_service(obj), NOW).delete_service == "svc-uid"
    assert planner.plan(obj, [], own_service(obj), NOW).delete_service == "svc-uid"


def test_a_restarting_gang_that_holds_its_nodes_keeps_its_service():
    held = {"phase": "Restarting", "restarts": 1, "hold": {"restarts": 1, "nodes": ["a", "b"], "until": "2026-11-29T13:00:00Z"},
            "conditions": [scheduled_false("Restarting")]}
    obj = job_obj(nodes=2, status=held)
    p = planner.plan(obj, [], own_service(obj), NOW)
    assert p.delete_service is None and p.create_service is None


def test_a_running_gang_keeps_its_service_and_gets_it_back_when_it_is_missing():
    obj = job_obj(nodes=2, status={"phase": "Running", "admittedNodes": 2, "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": EARLIER}]})
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    assert planner.plan(obj, pods, own_service(obj), NOW).delete_service is None
    assert planner.plan(obj, pods, None, NOW).create_service is not None


def test_a_service_someone_else_owns_is_never_deleted():
    obj = job_obj(nodes=2, status={"phase": "Pending"})
    theirs = {"kind": "Service", "metadata": {"name": "llm", "namespace": "team", "uid": "other"}}
    p = planner.plan(obj, [], theirs, NOW)
    assert p.delete_service is None and p.create_service is None


def test_a_suspended_job_gives_its_service_back():
    obj = job_obj(nodes=2, status={"phase": "Suspended", "conditions": [
        {"type": "Suspended", "status": "True", "reason": "Suspended", "message": "", "lastTransitionTime": EARLIER}]}, runPolicy={"suspend": True})
    assert planner.plan(obj, [], own_service(obj), NOW).delete_service == "svc-uid"
