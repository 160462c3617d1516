"""Admit before creating (pure): a gang without pods is placed from its spec, recorded, then created pinned and ungated."""

from __future__ import annotations

from datetime import datetime, timezone

from railtrain.crds import contract
from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find
from railtrain.operator.job.pods import is_gated
from railtrain.operator.scheduling.placement import Placement

from .builders import job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _admitted(obj, plan):
    """The job as stored after ``plan``'s status write (the pods not created yet)."""
    return {**obj, "status": plan.status}


def _created(pods, ranks, uid="uid-llm"):
    """The pods of ``ranks`` as the API server returns them after the creates (uid set, owner kept)."""
    out = []
    for p in pods:
        if int(p["metadata"]["labels"][contract.LABEL_NODE_RANK]) in ranks:
            out.append({**p, "metadata": {**p["metadata"], "uid": f"pod-{p['metadata']['name']}"}, "status": {"phase": "Pending"}})
    return out


def test_a_new_job_waits_for_the_pass_and_creates_nothing_until_placed():
    obj = job_obj(nodes=3)
    p = planner.plan(obj, [], True, NOW)
    assert p.create_pods == [] and p.status["phase"] == "Pending"
    request, ready = planner.admission_request(obj, [], NOW)
    assert ready and request.nodes == 3 and request.fixed == {}


def test_a_placement_records_the_nodes_first_and_creates_every_rank_pinned_and_ungated():
    obj = job_obj(nodes=3)
    p = planner.plan(obj, [], True, NOW, Placement(("a", "b", "c")))
    assert p.status_first and p.status_changed and p.ungate == [] and p.pin == {}
    assert p.status["admission"] == {"restarts": 0, "nodes": ["a", "b", "c"], "created": False}
    assert find(p.status["conditions"], "Scheduled")["status"] == "True"
    assert [pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] for pod in p.create_pods] == ["a", "b", "c"]
    assert not any(is_gated(pod) for pod in p.create_pods)
    assert {pod["metadata"]["annotations"][contract.ANNOTATION_NNODES] for pod in p.create_pods} == {"3"}


def test_after_a_crash_between_the_record_and_the_creates_the_missing_ranks_are_created_pinned_not_restarted():
    obj = job_obj(nodes=3)
    first = planner.plan(obj, [], True, NOW, Placement(("a", "b", "c")))
    stored = _admitted(obj, first)
    have = _created(first.create_pods, {0})  # the operator died after creating rank 0
    assert planner.admission_request(stored, have, NOW) is None  # admitted: never placed a second time
    promised = planner.promised_pods(stored, have)
    assert [pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] for pod in promised] == ["b", "c"]  # the pass's ledger holds them
    again = planner.plan(stored, have, True, NOW)
    assert [pod["metadata"]["name"] for pod in again.create_pods] == ["llm-1", "llm-2"]
    assert [pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] for pod in again.create_pods] == ["b", "c"]
    assert not any(is_gated(pod) for pod in again.create_pods) and again.delete_pods == []
    assert again.status["restarts"] == 0  # not a vanished rank: no restart


def test_the_record_is_marked_created_once_every_rank_is_seen_and_then_no_longer_counted():
    obj = job_obj(nodes=2)
    first = planner.plan(obj, [], True, NOW, Placement(("a", "b")))
    stored = _admitted(obj, first)
    pods = _created(first.create_pods, {0, 1})
    p = planner.plan(stored, pods, True, NOW)
    assert p.status["admission"]["created"] is True and p.create_pods == []
    assert planner.promised_pods(_admitted(stored, p), pods) == []


def test_a_record_of_an_earlier_restart_is_void():
    obj = job_obj(nodes=2)
    stored = _admitted(obj, planner.plan(obj, [], True, NOW, Placement(("a", "b"))))
    stored["status"] = {**stored["status"], "restarts": 1}
    assert planner.admission_record(stored["status"]) is None and planner.promised_pods(stored, []) == []
    assert planner.admission_request(stored, [], NOW)[1] is True


def test_a_gang_whose_service_name_is_taken_is_neither_placed_nor_created():
    obj = job_obj(nodes=2)
    theirs = {"kind": "Service", "metadata": {"name": "llm", "namespace": "team", "uid": "svc-1"}, "spec": {"clusterIP": "10.0.0.1"}}
    p = planner.plan(obj, [], theirs, NOW, Placement(("a", "b")))  # a pass answered before the reconcile reported it
    assert p.create_pods == [] and "admission" not in p.status
    assert find(p.status["conditions"], "Scheduled")["reason"] == "ServiceNameTaken"
    assert planner.admission_request(_admitted(obj, p), [], NOW)[1] is False  # it takes its turn, but is not placed


def test_an_admitted_elastic_gang_below_its_maximum_can_still_grow():
    from railtrain.operator.job import resize

    from .builders import node

    obj = job_obj(nodes=4, elastic={"minNodes": 2})
    first = planner.plan(obj, [], True, NOW, Placement(("a", "b", "c")))
    stored = _admitted(obj, first)
    stored["status"] = {**stored["status"], "phase": "Running"}
    assert planner.admission_record(stored["status"]) is not None
    assert resize.grow_size(stored, [node(n) for n in "abcd"], []) == 4  # the record does not hide the job from the grow check
