"""Table-driven tests of single rows of the phase machine (operator/job/phases)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find
from railtrain.operator.job.phases import advance

from .builders import gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
RELEASED = "2026-11-29T11:00:00Z"


def running_status(running_since=RELEASED):
    return {
        "phase": "Running", "startTime": running_since,
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": RELEASED},
            {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "", "lastTransitionTime": running_since},
        ],
    }


@pytest.mark.parametrize(
    "phases,want_phase,want_reason",
    [
        (["Running", "Running", "Running"], "Running", "AllRanksRunning"),
        (["Running", "Running", "Succeeded"], "Running", "RanksFinishing"),
        (["Succeeded", "Running", "Succeeded"], "Running", "RanksFinishing"),
        (["Succeeded", "Succeeded", "Succeeded"], "Succeeded", "Completed"),
    ],
)
def test_ranks_running_or_succeeded_are_a_healthy_gang_long_after_the_gang_timeout(phases, want_phase, want_reason):
    obj = job_obj(nodes=3, runPolicy={"gangTimeoutSeconds": 30}, status=running_status())
    pods = gang(obj, gated=False, nodes=["a", "b", "c"])
    for pod, ph in zip(pods, phases):
        pod["status"]["phase"] = ph
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == want_phase and p.delete_pods == []
    reason = find(p.status["conditions"], "Running" if want_phase == "Running" else "Succeeded")["reason"]
    assert reason == want_reason
    assert "requeues" not in p.status


def test_gang_timeout_applies_only_to_a_gang_never_healthy_since_release():
    obj = job_obj(nodes=2, runPolicy={"gangTimeoutSeconds": 30}, status=running_status())
    pods = gang(obj, gated=False, nodes=["a", "b"])
    pods[0]["status"]["phase"] = "Running"
    pods = pods[:1]  # rank 1 vanished after the gang had run: a gang failure (issue 8), not a gang timeout
    p = planner.plan(obj, pods, True, NOW)
    running = find(p.status["conditions"], "Running")
    assert p.status["phase"] == "Restarting" and (running["status"], running["reason"]) == ("False", "RankVanished")
    assert "pod llm-1 (rank 1) was deleted" in running["message"] and "requeues" not in p.status


def test_rows_that_fire_are_reported_in_order():
    obj = job_obj(nodes=1)
    step = planner.observe(obj, [], False, NOW)
    phase, fired = advance(step)
    assert phase == "Pending"
    assert fired == ["delete-stale-pods", "admitted-size", "create-missing-ranks", "waiting"]  # no Service while it waits


def test_terminal_job_is_left_alone_even_with_a_spec_that_no_longer_parses():
    obj = job_obj(nodes=1, status={"phase": "Succeeded", "conditions": [
        {"type": "Succeeded", "status": "True", "reason": "Completed", "message": "", "lastTransitionTime": RELEASED}]})
    obj["spec"]["nodes"] = "many"
    p = planner.plan(obj, [], True, NOW)
    assert p.status["phase"] == "Succeeded" and not p.create_pods


@pytest.mark.parametrize("owner", [None, {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "uid-other", "controller": True}])
def test_a_pod_with_a_ranks_name_that_the_job_does_not_own_is_reported_never_adopted(owner):
    obj = job_obj(nodes=2)
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    pods[0]["metadata"]["ownerReferences"] = [owner] if owner else []
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Pending" and "startTime" not in p.status
    assert [m["metadata"]["name"] for m in p.create_pods] == []  # rank 0's name is taken; rank 1 exists
    assert "llm-0" not in p.delete_pods
    c = find(p.status["conditions"], "Scheduled")
    assert (c["status"], c["reason"]) == ("False", "PodNameTaken") and "Pod llm-0 (" in c["message"]
    assert ("Warning", "PodNameTaken") in [e[:2] for e in p.events]
    assert planner.admission_request(obj, pods, NOW)[1] is False  # not a complete gang
    # Labels alone never make a pod the job's, whatever its name.
    stray = gang(obj, phase="Running", gated=False, nodes=["a", "b"])[1]
    stray["metadata"]["name"], stray["metadata"]["ownerReferences"] = "unrelated", []
    q = planner.plan(obj, [stray], True, NOW)
    assert q.create_pods == [] and q.delete_pods == []  # admit before creating: no pod until the pass places the gang
    assert planner.admission_request(obj, [stray], NOW)[1] is True  # placed from the spec alone


def not_ready(since):
    return {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": since}]}}


A = {"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize(
    "finalizers,nodes,says",
    [
        ([], None, "llm-1 (Terminating since 2026-11-29T12:00:00Z on node b)"),
        (["example.com/hold"], [A], "held by finalizer example.com/hold: not force-deleted, its owner must release it"),
        ([], [A, not_ready("2026-11-29T12:00:10Z")], "on node b)"),  # not Ready only briefly: not lost
        ([], [A], "the Node was deleted: the node-loss policy force-deletes it"),
    ],
)
def test_a_gang_waiting_for_old_pods_names_each_and_what_holds_it(finalizers, nodes, says):
    obj = job_obj(nodes=2, status={"restarts": 1, "phase": "Restarting"})
    old = gang(obj, restarts=0, phase="Running", gated=False, nodes=["a", "b"])[1]
    old["metadata"] |= {"uid": "old-1", "deletionTimestamp": "2026-11-29T12:00:30Z", "deletionGracePeriodSeconds": 30, "finalizers": finalizers}
    step = planner.observe(obj, [old], True, NOW + timedelta(seconds=20), nodes=nodes)
    advance(step)
    c = find(step.conds, "Scheduled")
    assert (c["status"], c["reason"]) == ("False", "WaitingForOldPods") and says in c["message"], c["message"]
    assert step.out.create_pods == []  # admit before creating: nothing is created before the gang is placed
    assert planner.admission_request(obj, [old], NOW)[1] is False  # and it is not placed while rank 1's name is held
    assert ("llm-1" in step.out.force_delete_pods) == ("deleted" in says)


def test_docs_list_every_row_of_the_machine_in_order():
    import re
    from pathlib import Path

    from railtrain.operator.job.phases import MACHINE

    text = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    table = text[text.index("## The phase machine"):]
    assert re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.M) == [row.name for row in MACHINE]


def test_a_service_with_the_jobs_name_that_it_does_not_own_holds_the_gang_and_is_reported():
    obj = job_obj(nodes=2)
    theirs = {"kind": "Service", "metadata": {"name": "llm", "namespace": "team", "uid": "svc-1"}, "spec": {"clusterIP": "10.0.0.1"}}
    p = planner.plan(obj, [], theirs, NOW)
    assert p.create_service is None and p.create_pods == []  # rank 0's rendezvous name would resolve to their Service
    c = find(p.status["conditions"], "Scheduled")
    assert (c["status"], c["reason"]) == ("False", "ServiceNameTaken") and "Service llm (no controller ownerReference)" in c["message"]
    mine = {**theirs, "metadata": {**theirs["metadata"], "ownerReferences": [{"uid": "uid-llm", "controller": True, "kind": "TrainingJob", "name": "llm"}]}}
    q = planner.plan(obj | {"status": p.status}, [], mine, NOW)
    assert q.create_pods == [] and find(q.status["conditions"], "Scheduled")["reason"] == "PodNamesFree"
