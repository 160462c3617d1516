"""An admitted gang whose pods are all gone is admitted again, never given gated pods (pure).

The operator's own deletions (suspend, gang timeout, a restart without a hold) are applied before the status write
that records them; since status writes carry the resourceVersion they were decided on, that write can be refused
(409) after the deletions happened. A job resumed before the next pass then still had a created admission record
and no pod: create-missing-ranks made a gated pod for it, which no admission pass releases while the record is in
force, and the job stayed Pending behind its scheduling gate forever.
"""

from __future__ import annotations

from datetime import datetime, timezone

from railtrain.operator.job import planner
from railtrain.operator.job.pods import is_gated
from railtrain.operator.job.records import admission_record
from railtrain.operator.scheduling.placement import Placement

from .builders import gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
EARLIER = "2026-11-29T11:00:00Z"


def running(nodes):
    """The status of a Running gang admitted on ``nodes``, its record created (as the suspend pass read it)."""
    return {"phase": "Running", "restarts": 0, "admittedNodes": len(nodes), "startTime": EARLIER,
            "admission": {"restarts": 0, "nodes": list(nodes), "created": True},
            "conditions": [{"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": EARLIER},
                           {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "", "lastTransitionTime": EARLIER}]}


def after(obj, p):
    """The job as the next pass reads it once ``p``'s status is written."""
    return {**obj, "status": p.status}


def test_a_gang_deleted_by_a_pass_whose_status_write_was_dropped_is_admitted_again_not_gated():
    # The suspend pass deleted the pod and the Service, its status write got 409, and the job was resumed before the
    # next pass: that pass sees the Running status with its created record, no pod and no Service.
    obj = job_obj(nodes=1, status=running(["a"]))
    p = planner.plan(obj, [], None, NOW)
    assert p.create_pods == [] and p.ungate == [] and p.create_service is None
    assert p.status_changed and admission_record(p.status) is None and "admission" not in p.status
    scheduled = next(c for c in p.status["conditions"] if c["type"] == "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "GangGone")
    assert p.status["phase"] == "Pending"
    # It takes its turn in the queue like a new job, and its admission creates the pod pinned and ungated.
    waiting = after(obj, p)
    assert planner.gang_request(waiting, [], NOW) is not None
    placed = planner.plan(waiting, [], None, NOW, Placement(nodes=("b",)))
    assert [pod["metadata"]["name"] for pod in placed.create_pods] == ["llm-0"]
    assert not any(is_gated(pod) for pod in placed.create_pods) and placed.create_service is not None


def test_a_gated_pod_left_under_a_created_record_is_released_by_the_next_admission():
    # A job stuck by an operator without this rule: a gated rank created under its record. It is re-admitted, and
    # the placement pins and ungates the pod that exists.
    obj = job_obj(nodes=1, status=running(["a"]))
    pods = gang(obj, phase="Pending", gated=True)
    p = planner.plan(obj, pods, True, NOW)
    assert admission_record(p.status) is None and p.create_pods == [] and p.delete_pods == []
    waiting = after(obj, p)
    assert planner.gang_request(waiting, pods, NOW) is not None
    released = planner.plan(waiting, pods, True, NOW, Placement(nodes=("b",)))
    assert released.ungate == ["llm-0"] and released.pin == {"llm-0": "b"}


def test_a_gang_whose_ranks_all_exited_0_is_not_gone():
    status = {**running(["a", "b"]), "succeededRanks": [0, 1]}
    p = planner.plan(job_obj(nodes=2, status=status), [], True, NOW)
    assert p.status["phase"] == "Succeeded"


def test_a_running_gang_keeps_its_record():
    obj = job_obj(nodes=2, status=running(["a", "b"]))
    p = planner.plan(obj, gang(obj, phase="Running", gated=False, nodes=["a", "b"]), True, NOW)
    assert admission_record(p.status) is not None and p.create_pods == []
