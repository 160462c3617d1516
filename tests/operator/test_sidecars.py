"""Sidecars never decide a rank's outcome: its trainer container does (issue 15, kind 2), planned without a cluster."""

from __future__ import annotations

from datetime import datetime, timezone

from railtrain.crds.podtemplate import TRAINER
from railtrain.operator.job import pods as job_pods
from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find

from .builders import gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
SIDECARS = {"spec": {"containers": [{"name": "metrics-exporter", "image": "exporter:1"}],
                     "initContainers": [{"name": "log-shipper", "image": "shipper:1", "restartPolicy": "Always"}]}}


def running(name):
    return {"name": name, "state": {"running": {"startedAt": "2026-11-29T11:00:00Z"}}}


def exited(name, code, message=""):
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}}}


def with_status(pod, pod_phase, trainer, exporter, shipper=None):
    pod["status"] = {"phase": pod_phase, "containerStatuses": [trainer, exporter], "initContainerStatuses": [shipper or running("log-shipper")]}
    return pod


def sidecar_gang(obj):
    return gang(obj, phase="Running", gated=False, nodes=["a", "b"])


def test_trainers_that_exited_0_complete_the_job_while_a_sidecar_runs_and_the_pods_are_then_ended():
    obj = job_obj(nodes=2, template=SIDECARS)
    pods = [with_status(p, "Running", exited(TRAINER, 0), running("metrics-exporter")) for p in sidecar_gang(obj)]
    assert [job_pods.phase(p) for p in pods] == ["Succeeded", "Succeeded"] and all(job_pods.finished_but_running(p) for p in pods)
    done = planner.plan(obj, pods, True, NOW)
    assert done.status["phase"] == "Succeeded" and "all 2 ranks exited 0" in find(done.status["conditions"], "Succeeded")["message"]
    after = planner.plan(obj | {"status": done.status}, pods, True, NOW)
    assert sorted(after.delete_pods) == ["llm-0", "llm-1"]  # the sidecars would otherwise hold the nodes forever


def test_a_sidecar_that_crashed_does_not_fail_a_rank_whose_trainer_exited_0():
    obj = job_obj(nodes=2, template=SIDECARS)
    pods = [with_status(p, "Failed", exited(TRAINER, 0), exited("metrics-exporter", 2, "exporter: port in use")) for p in sidecar_gang(obj)]
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Succeeded" and p.status.get("restarts", 0) == 0


def test_a_sidecar_that_exited_while_the_trainer_runs_changes_nothing():
    obj = job_obj(nodes=2, template=SIDECARS, status={"phase": "Running", "startTime": "2026-11-29T11:00:00Z"})
    pods = sidecar_gang(obj)
    with_status(pods[0], "Running", running(TRAINER), exited("metrics-exporter", 1, "exporter crashed"), exited("log-shipper", 1))
    with_status(pods[1], "Running", running(TRAINER), running("metrics-exporter"))
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Running" and p.delete_pods == []


def test_a_trainer_that_failed_fails_its_rank_with_its_own_message_while_its_sidecar_runs():
    obj = job_obj(nodes=2, template=SIDECARS, runPolicy={"backoffLimit": 2})
    pods = sidecar_gang(obj)
    with_status(pods[0], "Running", running(TRAINER), running("metrics-exporter"))
    # The sidecar's status comes first and has terminated too: only the trainer's words count.
    pods[1]["status"] = {"phase": "Running", "containerStatuses": [exited("metrics-exporter", 3, "exporter says hi"), exited(TRAINER, 1, "NCCL timeout")]}
    p = planner.plan(obj, pods, True, NOW)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert sorted(p.delete_pods) == ["llm-0", "llm-1"]  # both still run: rank 1's pod because of its sidecar
    message = find(p.status["conditions"], "Scheduled")["message"]
    assert "rank 1 exited with code 1: NCCL timeout" in message and "exporter" not in message
