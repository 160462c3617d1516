"""The Reconciler's own state (operator/reconciler.py) over an in-memory API: job locks dropped with their job, the
injected clock, the bounded fan-out of a pass's decisions, and an elastic grow that reads the queue only when due."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from railtrain.crds import contract
from railtrain.operator import handlers
from railtrain.operator.context import OperatorContext
from railtrain.operator.job.conditions import find
from railtrain.operator.reconciler import Reconciler, call_pool, fan_out
from railtrain.operator.settings import Settings

from .builders import gang, job_obj, node
from .test_controller import NOW, FakeKube


def test_a_deleted_jobs_lock_is_dropped():
    kube = FakeKube([node("n0")], [job_obj("solo", nodes=1)])
    ctx = OperatorContext(Settings(), kube, identity="me/1")
    ctx.state.leader = True
    handlers.on_job_event(type="ADDED", name="solo", namespace="team", memo=ctx)
    assert ctx.reconciler.locks() == 1
    del kube.jobs[("team", "solo")]
    handlers.on_job_event(type="DELETED", name="solo", namespace="team", memo=ctx)
    assert ctx.reconciler.locks() == 0


def test_a_reconcile_reads_the_time_from_the_injected_clock():
    kube = FakeKube([node("n0")], [job_obj("solo", nodes=1)])
    later = NOW + timedelta(hours=3)
    Reconciler(kube, clock=lambda: later).reconcile_job("team", "solo")  # its pass admits it at that time
    assert find(kube.jobs[("team", "solo")]["status"]["conditions"], "Scheduled")["lastTransitionTime"] == "2026-11-29T15:00:00Z"


def test_fan_out_never_runs_more_calls_at_once_than_it_is_allowed():
    running, most, guard = [0], [0], threading.Lock()

    def call():
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with guard:
            running[0] -= 1

    fan_out([call] * 12, call_pool(8), 3)
    assert most[0] == 3


class CountingJobsKube(FakeKube):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.job_lists = 0

    def list_jobs(self, namespace=None):
        self.job_lists += 1
        return super().list_jobs(namespace)


def test_an_elastic_grow_reads_the_queue_only_once_its_interval_has_passed():
    obj = job_obj("grower", nodes=4, elastic={"minNodes": 2, "growIntervalSeconds": 600},
                  status={"phase": "Running", "admittedNodes": 2, "restarts": 0, "startTime": "2026-11-29T11:55:00Z"})
    kube = CountingJobsKube([node(n) for n in ("n0", "n1", "n2", "n3")], [obj])
    for p in gang(obj, phase="Running", gated=False, nodes=["n0", "n1", "n2", "n3"])[:2]:
        p["metadata"]["annotations"][contract.ANNOTATION_NNODES] = "2"
        kube.pods[("team", p["metadata"]["name"])] = p
    Reconciler(kube, clock=lambda: NOW).reconcile_job("team", "grower", admit=False)  # 5 min since start: not due
    assert kube.job_lists == 0
    Reconciler(kube, clock=lambda: NOW + timedelta(minutes=6)).reconcile_job("team", "grower", admit=False)
    assert kube.job_lists == 1
