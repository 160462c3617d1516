"""The operator's /metrics after a job's life cycle on the real control plane: counters and histogram counts move
as the job is admitted, runs, restarts and succeeds (the session's operator is shared, so deltas are compared)."""

from __future__ import annotations

import time

import pytest

from tests.polling import wait_for

from .clusterkit import all_running, end_pod, finish, job_body, phase_is
from .conftest import scrape

pytestmark = pytest.mark.cluster


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_after_a_job_runs_restarts_and_succeeds(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(2, gpus_per_node=8)
    before = wait_for(lambda: scrape(operator), 60, "the operator's /metrics")
    began = time.monotonic()
    submit(job_body("metered", nodes=2, runPolicy={"backoffLimit": 2}))
    pods = wait_for(lambda: all_running(core, namespace, "metered", 2), 90, "the gang Running")
    wait_for(lambda: phase_is(custom, namespace, "metered", "Running"), 60, "phase Running")
    end_pod(core, namespace, pods[1].metadata.name, code=1)  # a rank fails without a verdict: a job restart
    wait_for(lambda: all_running(core, namespace, "metered", 2, old_uids={p.metadata.uid for p in pods}), 90, "the restarted gang Running")
    finish(core, namespace, "metered")
    wait_for(lambda: phase_is(custom, namespace, "metered", "Succeeded"), 90, "phase Succeeded")
    after = wait_for(lambda: (s := scrape(operator)) and value(s, "railtrain_jobs", phase="Succeeded") >= 1 and s, 30, "railtrain_jobs to count it")

    def grew(name, by=1, **labels):
        return value(after, name, **labels) - value(before, name, **labels) >= by

    assert grew("railtrain_job_time_to_running_seconds_count"), "one job reached Running for the first time"
    took = value(after, "railtrain_job_time_to_running_seconds_sum") - value(before, "railtrain_job_time_to_running_seconds_sum")
    # whole seconds (the timestamps' precision): 0 when it ran within the second it was created, and up to 1 s more
    # than the time that passed when the two timestamps fall on either side of a second's edge (a fresh-clone run
    # measured 1 against 0.91 s elapsed)
    assert 0 <= took < time.monotonic() - began + 1
    assert grew("railtrain_gang_restarts_total", reason="Restarting")
    assert grew("railtrain_admission_pass_duration_seconds_count", by=2), "the first gang and the restarted one were admitted"
    assert grew("railtrain_reconcile_duration_seconds_count", by=5)
    assert value(after, "railtrain_reconcile_duration_seconds_bucket", le="+Inf") == value(after, "railtrain_reconcile_duration_seconds_count")
    assert value(after, "railtrain_admission_queue_length") >= 0 and ("railtrain_quarantined_nodes", ()) in after
    assert value(after, "railtrain_resync_last_completed_timestamp_seconds") > 0

    # status.goodput: two attempts (the restart ended the first), split to the completion time and adding up to it;
    # KWOK pods report no steps, so the time after each release counts as starting and as the restart's downtime.
    status = custom.get_namespaced_custom_object("railtrain.dev", "v1alpha1", namespace, "trainingjobs", "metered")["status"]
    g = status["goodput"]
    assert len(g["attempts"]) == 2 and g["attempts"][0]["endReason"] == "Restarting" and "ended" not in g["attempts"][1]
    parts = g["queuedSeconds"] + g["startingSeconds"] + g["trainingSeconds"] + sum(g["lostSeconds"].values())
    assert abs(parts - g["wallSeconds"]) <= 0.01 and g["lostSeconds"].get("restart_job", 0) > 0
    assert value(after, "railtrain_job_goodput_seconds", namespace=namespace, trainingjob="metered", cause="restart_job") == g["lostSeconds"]["restart_job"]
