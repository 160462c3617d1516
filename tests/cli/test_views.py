"""`railtrain get` views, on hand-written TrainingJob objects."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from rich.console import Console

from railtrain.cli import views

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(seconds_ago: int) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_, status, reason, seconds_ago, message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": ts(seconds_ago)}


def obj(name, phase=None, conditions=(), placement=(), restarts=0, nodes=2, created=600):
    status = {"conditions": list(conditions), "placement": list(placement), "restarts": restarts}
    if phase:
        status["phase"] = phase
    return {
        "apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": ts(created), "managedFields": [{"manager": "x"}]},
        "spec": {"image": "img", "nodes": nodes, "procsPerNode": 8},
        "status": status,
    }


def render(renderable) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("seconds, expected", [(5, "5s"), (119, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h"), (2 * 86400, "2d")])
def test_age(seconds, expected):
    assert views.age(ts(seconds), NOW) == expected


def test_age_of_missing_timestamp():
    assert views.age(None, NOW) == "<unknown>"


def test_explaining_condition_is_the_latest_false_or_failed_one():
    job = obj("a", conditions=[
        cond("Admitted", "False", "Unschedulable", 300),
        cond("Running", "False", "GangRestarting", 30),
        cond("Ready", "True", "AllRunning", 10),
    ])
    assert views.explaining_condition(job)["reason"] == "GangRestarting"
    failed = obj("b", conditions=[cond("Running", "False", "Stopped", 60), cond("Failed", "True", "BackoffLimitExceeded", 50)])
    assert views.explaining_condition(failed)["reason"] == "BackoffLimitExceeded"
    assert views.explaining_condition(obj("c", conditions=[cond("Running", "True", "AllRunning", 5)])) is None


def test_jobs_table():
    items = [
        obj("llama", phase="Running", restarts=1, nodes=4, conditions=[cond("Admitted", "True", "Placed", 500)]),
        obj("waiting", conditions=[cond("Admitted", "False", "Unschedulable", 100)], created=90),
    ]
    lines = render(views.jobs_table(items, NOW)).splitlines()
    items[0]["status"] |= {"progress": {"step": 120, "totalSteps": 300, "lastUpdateTime": ts(3)}, "goodput": {"wallSeconds": 600, "ratio": 0.9234, "lastUpdateTime": ts(3)}}
    lines = render(views.jobs_table(items, NOW)).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "NODES", "RESTARTS", "STEP", "GOODPUT", "AGE", "REASON"]
    assert lines[1].split() == ["llama", "Running", "4", "1", "120/300", "92%", "10m"]
    assert lines[2].split() == ["waiting", "Pending", "2", "0", "-", "-", "90s", "Unschedulable"]
    assert render(views.jobs_table(items, NOW, all_namespaces=True)).splitlines()[1].split()[:2] == ["team-a", "llama"]


def test_job_detail_shows_conditions_and_placement():
    job = obj(
        "llama", phase="Running",
        conditions=[cond("Admitted", "True", "Placed", 120, "gang placed in rack r1"), cond("Running", "True", "AllRunning", 60, "")],
        placement=[{"rank": 1, "node": "gpu-b"}, {"rank": 0, "node": "gpu-a"}],
    )
    text = render(views.job_detail(job, NOW))
    assert "Phase:      Running" in text
    assert "2 nodes × 8 processes (world size 16)" in text
    cond_line = next(line for line in text.splitlines() if line.startswith("Admitted"))
    assert cond_line.split()[:4] == ["Admitted", "True", "Placed", "2m"] and "gang placed in rack r1" in cond_line
    ranks = [line.split() for line in text.splitlines() if line.strip().startswith(("0 ", "1 "))]
    assert ranks == [["0", "gpu-a"], ["1", "gpu-b"]]


def test_job_detail_before_the_operator_acted():
    text = render(views.job_detail(obj("new", conditions=[], placement=[], created=5), NOW))
    assert "Pending" in text and "none yet (the operator writes them within seconds" in text and "not placed yet" in text
    assert "is 'railtrain operator' running" not in text


def test_job_detail_without_conditions_long_after_creation_asks_for_the_operator():
    text = " ".join(render(views.job_detail(obj("old", conditions=[], placement=[], created=300), NOW)).split())
    assert "Conditions: none after 5m: no operator has acted on this job; is 'railtrain operator' running" in text


def test_yaml_drops_managed_fields():
    out = views.to_yaml(obj("a"))
    assert "managedFields" not in out and "name: a" in out
    assert views.to_yaml([obj("a"), obj("b")]).startswith("apiVersion: v1\nkind: List\n")


def test_job_detail_shows_topology_decision_and_domains():
    job = obj(
        "llama", phase="Running",
        placement=[
            {"rank": 1, "node": "gpu-b", "domains": {"railtrain.dev/block": "b0", "railtrain.dev/rack": "r1", "kubernetes.io/hostname": "gpu-b"}},
            {"rank": 0, "node": "gpu-a", "domains": {"railtrain.dev/block": "b0", "railtrain.dev/rack": "r0", "kubernetes.io/hostname": "gpu-a"}},
        ],
    )
    job["spec"]["topology"] = {"policy": "preferred", "level": "railtrain.dev/rack"}
    job["status"]["topology"] = {"policy": "preferred", "reason": "inside railtrain.dev/block=b0 (policy preferred railtrain.dev/rack: no single rack has 2 nodes)"}
    text = render(views.job_detail(job, NOW))
    assert "Topology:   policy preferred railtrain.dev/rack" in text
    assert "Placed:     inside railtrain.dev/block=b0" in text
    lines = text.splitlines()
    header = next(line for line in lines if line.strip().startswith("RANK"))
    assert header.split() == ["RANK", "NODE", "BLOCK", "RACK"]
    assert [line.split() for line in lines if line.strip().startswith(("0 ", "1 "))] == [["0", "gpu-a", "b0", "r0"], ["1", "gpu-b", "b0", "r1"]]


def test_job_detail_shows_elastic_admission_and_requeues():
    job = obj("stretch", phase="Running", nodes=4)
    job["spec"]["elastic"] = {"minNodes": 2}
    job["status"] |= {"admittedNodes": 3, "requeues": 1, "requeueAfter": ts(-10)}
    text = render(views.job_detail(job, NOW))
    assert "3 of 2..4 nodes × 8 processes (world size 24), elastic" in text
    assert "Requeues:   1 (gang timeout" in text
    job["status"].pop("admittedNodes")
    assert "2..4 nodes × 8 processes, elastic (not admitted yet)" in render(views.job_detail(job, NOW))


def test_job_detail_of_a_job_the_operator_failed_shows_its_reason_not_the_operator_hint():
    message = "the API server refused Pod bad-0 (422): Pod \"bad-0\" is invalid: spec.volumes[0].name: Invalid value: \"Scratch_Vol\""
    text = " ".join(render(views.job_detail(obj("bad", phase="Failed", conditions=[cond("Failed", "True", "PodRejected", 300, message)]), NOW)).split())
    assert "Failed True PodRejected" in text and "Scratch_Vol" in text and "operator" not in text.replace("the API server", "")


def test_job_detail_shows_the_fabric_settings_rank_0_got():
    pod = {
        "metadata": {"annotations": {"railtrain.dev/fabric-profile": "infiniband", "railtrain.dev/fabric-nccl-ib-hca": "=mlx5_0,mlx5_1"}},
        "spec": {"containers": [{"name": "trainer", "env": [
            {"name": "RAILTRAIN_JOB_NAME", "value": "llama"},
            {"name": "NCCL_CROSS_NIC", "value": "0"},
            {"name": "NCCL_IB_HCA", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['railtrain.dev/fabric-nccl-ib-hca']"}}},
        ]}]},
    }
    text = render(views.job_detail(obj("llama", phase="Running"), NOW, pod))
    assert "Fabric:     profile infiniband: rank 0 got NCCL_CROSS_NIC=0 NCCL_IB_HCA==mlx5_0,mlx5_1" in text
    assert "Fabric:" not in render(views.job_detail(obj("llama", phase="Running"), NOW))


def test_job_detail_shows_progress_and_goodput():
    job = obj("llama", phase="Running")
    job["status"]["progress"] = {"step": 120, "totalSteps": 300, "loss": 2.3141, "tokensPerSecond": 12345.6, "etaSeconds": 300, "lastUpdateTime": ts(3)}
    job["status"]["goodput"] = {
        "wallSeconds": 3720, "queuedSeconds": 60, "startingSeconds": 120, "trainingSeconds": 3360,
        "lostSeconds": {"restart_node_lost": 120, "recompute": 30, "checkpoint": 30}, "ratio": 0.9032, "lastUpdateTime": ts(3),
    }  # fmt: skip
    text = render(views.job_detail(job, NOW))
    assert "Progress:   step 120/300 (40%), loss 2.314, 12346 tokens/s, ETA 5m00s (read 3s ago)" in text
    assert "Goodput:    90% training of 1h02m: queued 1m00s, starting 2m00s, lost 3m00s (checkpoint 30s, recompute 30s, restart_node_lost 2m00s)" in text
    assert "Progress:" not in render(views.job_detail(obj("new"), NOW))


def test_reason_after_resume_is_why_the_job_waits_then_empty_once_running():
    # as the operator leaves them after suspend -> another job takes the nodes -> resume (tests/operator/test_reconcile.py)
    waiting = obj("llama-1b", phase="Pending", conditions=[
        cond("Scheduled", "False", "Unschedulable", 120, "2 nodes asked, 0 free"),
        cond("Running", "False", "Resumed", 120, "resumed after a suspension: the job waits for admission"),
        cond("Suspended", "False", "Resumed", 30, "runPolicy.suspend is false: the job waits for admission"),
    ])
    assert views.explaining_condition(waiting)["reason"] == "Unschedulable"
    running = obj("llama-1b", phase="Running", conditions=[
        cond("Scheduled", "True", "GangPlaced", 20), cond("Running", "True", "AllRanksRunning", 10),
        cond("Suspended", "False", "Resumed", 30, "runPolicy.suspend is false: the job was admitted again"),
    ])
    assert views.explaining_condition(running) is None
    assert render(views.jobs_table([running], NOW)).splitlines()[1].split()[-1] == "10m"  # no REASON
    suspended = obj("llama-1b", phase="Suspended", conditions=[
        cond("Scheduled", "False", "Suspended", 5), cond("Running", "False", "Suspended", 5), cond("Suspended", "True", "Suspended", 5),
    ])
    assert views.explaining_condition(suspended)["type"] == "Suspended"


def refused_jobs():
    """A job that can never fit and one that waits for two jobs, with the operator's own refusal sentences."""
    from railtrain.crds import contract
    from railtrain.operator.scheduling.snapshot import snapshot
    from railtrain.operator.scheduling.placement import GangRequest, place_gang
    from tests.operator.builders import node, other_pod

    held = [other_pod("a", 8), other_pod("b", 8)]
    for pod, (ns, job) in zip(held, (("team", "first"), ("lab", "second"))):
        pod["metadata"] |= {"namespace": ns, "labels": {contract.LABEL_JOB_NAME: job}}
    snap = snapshot([node("a"), node("b")], held)
    never, waits = place_gang(GangRequest("team-a/huge", 3, 8), snap), place_gang(GangRequest("team-a/queued", 2, 8), snap)
    return [
        obj("huge", conditions=[cond("Scheduled", "False", never.reason, 100, never.message)], nodes=3),
        obj("queued", conditions=[cond("Scheduled", "False", waits.reason, 100, waits.message)]),
    ]


def test_get_tells_never_fit_from_waiting_and_names_who_holds_the_capacity():
    """Issue 26, item 6: REASON said Unschedulable for both."""
    text = render(views.jobs_table(refused_jobs(), NOW))
    assert "Unschedulable (never fits: ask for fewer nodes or less per pod, or add nodes)" in text
    assert "Unschedulable (waiting for lab/second, team/first)" in text


def test_get_piped_does_not_cut_reason_at_80_columns():
    import io

    out = io.StringIO()
    views.print_table(Console(file=out, width=80, highlight=False), views.jobs_table(refused_jobs(), NOW))
    lines = out.getvalue().splitlines()
    assert any(line.rstrip().endswith("Unschedulable (never fits: ask for fewer nodes or less per pod, or add nodes)") for line in lines), lines
    assert len(lines) == 3  # one line per job: a pipe or a file gets whole rows


@pytest.mark.parametrize(
    "message,expected",
    [
        ("the gang fits the free capacity, but it is promised to jobs ahead in the queue: a/x (priority 0), a/y (priority 0); it is admitted once", "a/x (priority 0), a/y (priority 0)"),
        ("the gang fits the free capacity, but part of it is held for restarting gangs until they are admitted again: ns/big", "ns/big"),
        ("... It waits for a rack to free up; policy preferred would let it span racks; the capacity is held by t/a and 2 more", "t/a and 2 more"),
        ("gang needs 2 nodes; 0 of 2 nodes fit now. It waits until enough nodes free up", None),
    ],
)
def test_holders_named_reads_each_waiting_refusal(message, expected):
    assert views.holders_named(message) == expected
