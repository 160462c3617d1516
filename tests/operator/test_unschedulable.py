"""A released gang kube-scheduler will not bind is re-placed at once with the scheduler's words (issue 15, kind 8), planned without a cluster."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find

from .builders import gang, job_obj, node

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
RELEASED = "2026-11-29T11:59:50Z"
WORDS = "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't match Pod's node affinity/selector"


def released(obj, **status):
    """The job's status and pods right after its gang of 2 was placed on a and b: rank 0 bound and Running, rank 1 not bound yet."""
    obj = obj | {"status": {"phase": "Pending", "admittedNodes": 2, "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": RELEASED}]} | status}
    pods = gang(obj, gated=False, nodes=["a", "b"])
    pods[0]["status"] = {"phase": "Running"}
    del pods[1]["spec"]["nodeName"]
    pods[1]["status"] = {"phase": "Pending"}
    return obj, pods


def refuse(pod, words=WORDS):
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": words}]


def test_a_rank_the_scheduler_refuses_re_places_the_gang_at_once_with_its_words_and_avoids_that_node():
    obj, pods = released(job_obj(nodes=2))
    refuse(pods[1])
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b"), node("c")])
    scheduled = find(p.status["conditions"], "Scheduled")
    assert p.status["phase"] == "Pending" and sorted(p.delete_pods) == ["llm-0", "llm-1"]
    assert scheduled["reason"] == "FailedScheduling" and WORDS in scheduled["message"] and "re-placing it now" in scheduled["message"]
    assert p.status["avoidNodes"] == ["b"] and "requeueAfter" not in p.status
    assert ("Warning", "FailedScheduling") in [e[:2] for e in p.events]


def test_a_pinned_node_cordoned_and_tainted_before_binding_re_places_the_gang_at_once():
    obj, pods = released(job_obj(nodes=2))
    gone_bad = node("b", unschedulable=True, taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), gone_bad, node("c")])
    scheduled = find(p.status["conditions"], "Scheduled")
    assert p.status["phase"] == "Pending" and sorted(p.delete_pods) == ["llm-0", "llm-1"]
    assert "pod llm-1 (rank 1) on node b: the Node was cordoned" in scheduled["message"]
    assert "avoidNodes" not in p.status  # placement leaves a cordoned node out by itself


def test_a_second_re_place_backs_off():
    obj, pods = released(job_obj(nodes=2), requeues=1)
    refuse(pods[1])
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])
    assert p.status["requeues"] == 2 and p.status["requeueAfter"] == "2026-11-29T12:00:10Z"


def test_a_gang_being_bound_or_running_is_left_alone():
    obj, pods = released(job_obj(nodes=2))
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b")])  # rank 1 simply not bound yet
    assert p.delete_pods == [] and find(p.status["conditions"], "Scheduled")["reason"] == "GangPlaced"


def test_a_refusal_of_the_pod_itself_is_left_to_the_gang_timeout_which_quotes_the_scheduler():
    obj, pods = released(job_obj(nodes=2, runPolicy={"gangTimeoutSeconds": 30}))
    words = 'persistentvolumeclaim "absent" not found. preemption: 0/3 nodes are available'
    refuse(pods[1], words)
    p = planner.plan(obj, pods, True, NOW, nodes=[node("a"), node("b"), node("c")])  # another node would not help
    assert p.delete_pods == [] and "avoidNodes" not in p.status
    late = planner.plan(obj, pods, True, NOW + timedelta(seconds=60), nodes=[node("a"), node("b"), node("c")])
    scheduled = find(late.status["conditions"], "Scheduled")
    assert scheduled["reason"] == "GangTimeout" and 'kube-scheduler: persistentvolumeclaim "absent" not found' in scheduled["message"]
