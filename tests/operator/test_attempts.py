"""The operator's record of gang attempts for status.goodput (operator/job/attempts.py): table tests over status changes,
rank 0's progress folded in, and the planner writing it when a gang is released."""

from __future__ import annotations

from datetime import timedelta

from railtrain.operator.job import attempts

from .builders import job_obj, node
from .test_controller import NOW, FakeKube, reconciler

CREATED = "2026-11-29T11:59:00Z"  # 60 s before NOW


def sched(status, reason="GangPlaced"):
    return {"type": "Scheduled", "status": status, "reason": reason}


def t(seconds):
    return (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_release_starts_an_attempt_and_a_restart_ends_it_with_its_reason():
    old = {"phase": "Pending", "conditions": [sched("False", "Unschedulable")]}
    new = {"phase": "Pending", "conditions": [sched("True")]}
    g = attempts.track(old, new, NOW, CREATED)
    assert g["attempts"] == [{"released": t(0)}] and g["queuedSeconds"] == 60 and g["wallSeconds"] == 60
    running = {"phase": "Running", "conditions": [sched("True")], "goodput": g, "restarts": 0}
    assert attempts.track(running, running, NOW + timedelta(seconds=5), CREATED) is None  # nothing started or stopped: no write
    lost = {"phase": "Restarting", "conditions": [sched("False", "NodeLost")], "goodput": g, "restarts": 1}
    g2 = attempts.track(running, lost, NOW + timedelta(seconds=30), CREATED)
    assert g2["attempts"] == [{"released": t(0), "ended": t(30), "endReason": "NodeLost"}]
    again = {"phase": "Pending", "conditions": [sched("True")], "goodput": g2, "restarts": 1}
    g3 = attempts.track(lost, again, NOW + timedelta(seconds=40), CREATED)
    assert [a["released"] for a in g3["attempts"]] == [t(0), t(40)]
    # no step was seen before the node was lost: from the release to now is the restart's downtime
    assert g3["lostSeconds"] == {"restart_node_lost": 40.0} and g3["queuedSeconds"] == 60 and g3["startingSeconds"] == 0


def test_suspension_and_gang_timeout_end_the_attempt_and_finishing_computes_to_the_completion_time():
    g = attempts.track({}, {"phase": "Pending", "conditions": [sched("True")]}, NOW, CREATED)
    run = {"phase": "Running", "conditions": [sched("True")], "goodput": g}
    suspended = attempts.track(run, {"phase": "Suspended", "conditions": [sched("False", "Suspended")], "goodput": g}, NOW + timedelta(seconds=10), CREATED)
    assert suspended["attempts"][-1]["endReason"] == "Suspended"
    timed_out = attempts.track(run, {"phase": "Pending", "requeues": 1, "conditions": [sched("False", "GangTimeout")], "goodput": g}, NOW + timedelta(seconds=10), CREATED)
    assert timed_out["attempts"][-1]["endReason"] == "GangTimeout"
    done = {"phase": "Succeeded", "completionTime": t(20), "conditions": [sched("True")], "goodput": g}
    final = attempts.track(run, done, NOW + timedelta(seconds=500), CREATED)
    assert final["wallSeconds"] == 80 and final["lastUpdateTime"].startswith("2026-11-29T12:00:20")


def test_rank_0s_progress_fills_the_running_attempt():
    g = attempts.track({}, {"phase": "Pending", "conditions": [sched("True")]}, NOW, CREATED)
    status = {"phase": "Running", "goodput": g}
    first = attempts.with_progress(status, {"step": 11, "lastUpdateTime": t(20)}, 10, 0.5, CREATED, NOW + timedelta(seconds=20))
    assert first["attempts"][-1] | {} == {"released": t(0), "firstStep": 11, "firstStepAt": t(20), "lastStep": 11, "lastStepAt": t(20), "resumedFrom": 10, "blockedSeconds": 0.5}
    later = attempts.with_progress(status | {"goodput": first}, {"step": 31, "lastUpdateTime": t(40)}, 10, 1.5, CREATED, NOW + timedelta(seconds=40))
    a = later["attempts"][-1]
    assert (a["firstStep"], a["lastStep"], a["blockedSeconds"]) == (11, 31, 1.5)
    assert (later["queuedSeconds"], later["startingSeconds"], later["trainingSeconds"], later["lostSeconds"]) == (60, 20, 18.5, {"checkpoint": 1.5})
    assert attempts.with_progress({"phase": "Running"}, {"step": 3}, None, None, CREATED, NOW) is None  # no attempt recorded: nothing to fill


def test_a_hung_gang_whose_rank_0_still_answers_is_not_training():
    """Issue 25 item 6: rank 0 keeps reporting step 31 for 15 minutes (its gang hangs): lastStepAt stays where the step
    was first seen, and the time since is lost as no_progress, not training."""
    g = attempts.track({}, {"phase": "Pending", "conditions": [sched("True")]}, NOW, CREATED)
    status = {"phase": "Running", "goodput": g}
    g = attempts.with_progress(status, {"step": 11, "lastUpdateTime": t(20)}, 0, 0.0, CREATED, NOW + timedelta(seconds=20))
    g = attempts.with_progress(status | {"goodput": g}, {"step": 31, "lastUpdateTime": t(40)}, 0, 0.0, CREATED, NOW + timedelta(seconds=40))
    g = attempts.with_progress(status | {"goodput": g}, {"step": 31, "lastUpdateTime": t(940)}, 0, 0.0, CREATED, NOW + timedelta(seconds=940))
    assert g["attempts"][-1]["lastStepAt"] == t(40)
    assert g["trainingSeconds"] == 20 and g["lostSeconds"] == {"no_progress": 900}


def test_the_planner_records_the_release_of_a_gang():
    job = job_obj("gp", nodes=1)
    job["metadata"]["creationTimestamp"] = CREATED
    kube = FakeKube([node("n0")], [job])
    reconciler(kube).reconcile_job("team", "gp", admit=False)  # creates the gated gang
    reconciler(kube).admission_pass()  # admits and releases it
    g = kube.jobs[("team", "gp")]["status"]["goodput"]
    assert [a["released"] for a in g["attempts"]] == [t(0)] and g["queuedSeconds"] == 60


def test_a_job_released_and_finished_within_one_second_adds_up_to_its_wall_time():
    """completionTime has whole seconds and a release microseconds: a job created, released, restarted and finished
    inside one second (KWOK, found by the metrics cluster test in CI) once had parts of 0.164 s and a wall time of 0."""
    created = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    g = attempts.track({}, {"phase": "Pending", "conditions": [sched("True")]}, NOW + timedelta(seconds=0.164), created)
    run = {"phase": "Running", "conditions": [sched("True")], "goodput": g, "restarts": 0}
    lost = attempts.track(run, run | {"phase": "Restarting", "restarts": 1, "conditions": [sched("False", "Restarting")]}, NOW + timedelta(seconds=0.4), created)
    again = {"phase": "Pending", "conditions": [sched("True")], "goodput": lost, "restarts": 1}
    second = attempts.track(again | {"conditions": [sched("False", "Restarting")]}, again, NOW + timedelta(seconds=0.6), created)
    done = {"phase": "Succeeded", "completionTime": created, "conditions": [sched("True")], "goodput": second, "restarts": 1}
    final = attempts.track(again | {"goodput": second}, done, NOW + timedelta(seconds=0.9), created)
    parts = final["queuedSeconds"] + final["startingSeconds"] + final["trainingSeconds"] + sum(final["lostSeconds"].values())
    assert abs(parts - final["wallSeconds"]) <= 0.001 and final["wallSeconds"] >= 0.6 and final["lostSeconds"]["restart_job"] > 0
