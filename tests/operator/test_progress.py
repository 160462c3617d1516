"""status.progress from rank 0's Prometheus endpoint (operator/progress.py): parsing the trainer's real exposition,
the write budget, the endpoint, a real HTTP read, and the background reader over a fake API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import generate_latest

from railtrain.crds import contract
from railtrain.operator import progress
from railtrain.operator.reconciler import Reconciler
from railtrain.trainer.metrics import TrainerMetrics

from .builders import job_obj
from .test_controller import NOW, FakeKube


def trainer_text(step=120, total=300, loss=2.5, tokens=12345.6, seconds=0.5) -> str:
    m = TrainerMetrics(flops_per_token=1e9, peak_flops_per_device=0, devices=2)
    m.total_steps.set(total)
    if step:
        m.observe_step(step, loss, tokens, seconds)
    return generate_latest(m.registry).decode()


def test_progress_parses_the_trainers_own_metrics():
    assert progress.parse(trainer_text(), NOW) == {
        "step": 120, "totalSteps": 300, "loss": 2.5, "tokensPerSecond": 12345.6, "etaSeconds": 90.0, "lastUpdateTime": "2026-11-29T12:00:00Z",
    }  # fmt: skip
    assert progress.parse(trainer_text(step=0), NOW) is None  # before the first step
    assert progress.parse(trainer_text(loss=float("nan")), NOW).get("loss") is None  # a NaN loss is left out, not written
    assert progress.parse("not prometheus text {{{", NOW) is None


@pytest.mark.parametrize("jobs,seconds", [(1, 5.0), (50, 5.0), (500, 50.0)])
def test_the_write_budget_is_at_most_10_per_second_across_jobs(jobs, seconds):
    assert progress.interval(jobs) == seconds
    assert jobs / progress.interval(jobs) <= progress.MAX_WRITES_PER_SECOND


def test_due_only_when_running_and_old_enough():
    fresh = {"phase": "Running", "progress": {"lastUpdateTime": (NOW - timedelta(seconds=2)).isoformat()}}
    old = {"phase": "Running", "progress": {"lastUpdateTime": (NOW - timedelta(seconds=6)).isoformat()}}
    assert progress.due({"phase": "Running"}, NOW, 1) and progress.due(old, NOW, 1)
    assert not progress.due(fresh, NOW, 1) and not progress.due({"phase": "Pending"}, NOW, 1)


def test_endpoint_uses_the_pods_ip_and_its_metrics_port():
    pod = {"status": {"podIP": "10.0.0.7"}, "spec": {"containers": [{"ports": [{"name": "metrics", "containerPort": 9400}]}]}}
    assert progress.endpoint(pod) == "http://10.0.0.7:9400/metrics"
    assert progress.endpoint({"status": {}, "spec": {}}) is None
    assert progress.endpoint({"status": {"podIP": "fd00::7"}, "spec": {}}) == f"http://[fd00::7]:{contract.DEFAULT_METRICS_PORT}/metrics"


def test_read_gets_a_real_trainer_endpoint():
    m = TrainerMetrics(flops_per_token=1e9, peak_flops_per_device=0, devices=2)
    m.total_steps.set(10)
    m.observe_step(4, 3.25, 100.0, 1.0)
    m.serve(0, addr="127.0.0.1")
    try:
        text = progress.read(f"http://127.0.0.1:{m._server.server_port}/metrics")
    finally:
        m._server.shutdown()
    assert progress.parse(text, NOW)["step"] == 4 and progress.parse(text, NOW)["etaSeconds"] == 6.0
    with pytest.raises(OSError):
        progress.read("http://127.0.0.1:1/metrics", timeout=2)


def test_the_reader_writes_progress_of_running_jobs_only_and_at_most_once_per_interval():
    running, pending = job_obj("run", nodes=1, status={"phase": "Running"}), job_obj("wait", nodes=1, status={"phase": "Pending"})
    kube = FakeKube([], [running, pending])
    for name in ("run", "wait"):
        kube.pods[("team", contract.pod_name(name, 0))] = {"metadata": {"name": contract.pod_name(name, 0)}, "status": {"podIP": "10.0.0.9"}, "spec": {"containers": []}}
    urls = []
    reader = progress.Reader(fetch=lambda url: urls.append(url) or trainer_text())
    started = reader.poll(kube, kube.list_jobs(), NOW, Reconciler(kube).job_lock)
    assert [f.result(timeout=10) for f in started] == [True]
    assert urls == [f"http://10.0.0.9:{contract.DEFAULT_METRICS_PORT}/metrics"]
    assert kube.jobs[("team", "run")]["status"]["progress"]["step"] == 120 and "progress" not in kube.jobs[("team", "wait")]["status"]
    assert reader.poll(kube, kube.list_jobs(), NOW + timedelta(seconds=1), Reconciler(kube).job_lock) == []  # not due yet
    assert len(reader.poll(kube, kube.list_jobs(), NOW + timedelta(seconds=6), Reconciler(kube).job_lock)) == 1


def test_an_unreachable_rank_is_retried_only_after_the_interval():
    kube = FakeKube([], [job_obj("run", nodes=1, status={"phase": "Running"})])
    kube.pods[("team", "run-0")] = {"metadata": {"name": "run-0"}, "status": {"podIP": "10.0.0.9"}, "spec": {"containers": []}}

    def refuse(url):
        raise ConnectionRefusedError(111, "refused")

    reader = progress.Reader(fetch=refuse)
    assert [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), NOW, Reconciler(kube).job_lock)] == [False]
    assert reader.poll(kube, kube.list_jobs(), NOW + timedelta(seconds=2), Reconciler(kube).job_lock) == []
    assert len(reader.poll(kube, kube.list_jobs(), NOW + timedelta(seconds=5), Reconciler(kube).job_lock)) == 1


def read_goodput(**stored) -> dict:
    """One poll of the reader over a 1-node Running job ``gp`` whose stored ``status.goodput`` has one attempt released
    at 11:59:50 (plus ``stored``) and whose rank 0 serves :func:`trainer_text`; returns the goodput written."""
    job = job_obj("gp", nodes=1, status={"phase": "Running", "goodput": {"wallSeconds": 0, "lastUpdateTime": "2026-11-29T12:00:00Z",
                                                                          "attempts": [{"released": "2026-11-29T11:59:50Z"}], **stored}})  # fmt: skip
    job["metadata"]["creationTimestamp"] = "2026-11-29T11:59:00Z"
    kube = FakeKube([], [job])
    kube.pods[("team", "gp-0")] = {"metadata": {"name": "gp-0"}, "status": {"podIP": "10.0.0.9"}, "spec": {"containers": []}}
    reader = progress.Reader(fetch=lambda url: trainer_text())
    assert [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), NOW, Reconciler(kube).job_lock)] == [True]
    return kube.jobs[("team", "gp")]["status"]["goodput"]


def test_the_reader_records_the_step_into_the_running_attempts_goodput():
    g = read_goodput()
    assert g["attempts"][-1]["firstStep"] == 120 and g["queuedSeconds"] == 50 and g["startingSeconds"] == 10 and g["wallSeconds"] == 60
    from prometheus_client import REGISTRY

    assert REGISTRY.get_sample_value("railtrain_job_goodput_seconds", {"namespace": "team", "trainingjob": "gp", "cause": "queued"}) == 50


def group_text(step: int, quorum: int, heals: int = 0, retried: int = 0) -> str:
    m = TrainerMetrics(flops_per_token=1e9, peak_flops_per_device=0, devices=2)
    m.total_steps.set(300)
    m.observe_step(step, 2.5, 1000.0, 0.5)
    m.observe_replica(quorum, heals, retried)
    return generate_latest(m.registry).decode()


def test_with_replica_groups_each_groups_rank_0_is_read_into_its_record_and_progress_follows_the_group_ahead():
    """Issue 31: status.replicaGroups[] says each group's step, quorum, heals and re-run steps, read from that group's
    own rank 0 (a torchrun world of its own); the job's progress is the group furthest ahead, so a job whose group 0 is
    away still shows progress. On the old code only <job>-0 was read and no group record had a step."""
    status = {"phase": "Running", "replicaGroups": [{"group": 0, "phase": "Replacing", "replacements": 1}, {"group": 1, "phase": "Running"}]}
    job = job_obj("ft", nodes=4, procs=2, gpus=0, faultTolerance={"replicaGroups": 2, "minReplicas": 1}, status=status)
    assert progress.rank_zero_pods(job) == [(0, "ft-0"), (1, "ft-2")]
    assert progress.rank_zero_pods(job_obj("plain", nodes=4)) == [(None, "plain-0")]
    kube = FakeKube([], [job])
    kube.pods[("team", "ft-2")] = {"metadata": {"name": "ft-2"}, "status": {"podIP": "10.0.0.12"}, "spec": {"containers": []}}
    texts = {"10.0.0.12": group_text(140, quorum=1, retried=1)}
    reader = progress.Reader(fetch=lambda url: texts[url.split("//")[1].split(":")[0]])
    assert [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), NOW, Reconciler(kube).job_lock)] == [True]
    s = kube.jobs[("team", "ft")]["status"]
    assert s["progress"]["step"] == 140  # group 0 is away: group 1's rank 0 says where the job is
    assert s["replicaGroups"][0] == {"group": 0, "phase": "Replacing", "replacements": 1}  # not read: unchanged
    assert s["replicaGroups"][1] == {"group": 1, "phase": "Running", "step": 140, "quorum": 1, "heals": 0, "retriedSteps": 1, "progressTime": "2026-11-29T12:00:00Z"}
    # group 0's replacement runs and has healed from group 1; both are in the quorum again
    kube.pods[("team", "ft-0")] = {"metadata": {"name": "ft-0"}, "status": {"podIP": "10.0.0.10"}, "spec": {"containers": []}}
    texts |= {"10.0.0.10": group_text(151, quorum=2, heals=1), "10.0.0.12": group_text(150, quorum=2, retried=1)}
    later = NOW + timedelta(seconds=6)
    assert [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), later, Reconciler(kube).job_lock)] == [True]
    s = kube.jobs[("team", "ft")]["status"]
    assert s["progress"]["step"] == 151 and [(g["step"], g["quorum"], g["heals"]) for g in s["replicaGroups"]] == [(151, 2, 1), (150, 2, 0)]
    from railtrain.crds.replica_groups import ReplicaGroupStatus

    assert [ReplicaGroupStatus.model_validate(g).step for g in s["replicaGroups"]] == [151, 150]  # the API's own model reads them back


def test_a_goodput_cause_the_recompute_drops_is_removed_from_the_stored_status():
    """The reader's status write is a JSON merge patch, which keeps every nested key it does not mention: a goodput
    cause recorded once (here a stale ``restart_node_lost``, as the kind drill saw: a transient recompute put 290 s
    there) stayed in ``status.goodput.lostSeconds`` after every later recompute left it out, and the parts no longer
    added up to the wall time. The write now sends null for such keys (the FakeKube merges as the API server does)."""
    g = read_goodput(lostSeconds={"restart_node_lost": 290.0})
    assert "restart_node_lost" not in g.get("lostSeconds", {}), g
    assert abs(g["queuedSeconds"] + g["startingSeconds"] + g["trainingSeconds"] + sum(g.get("lostSeconds", {}).values()) - g["wallSeconds"]) < 0.01, g
