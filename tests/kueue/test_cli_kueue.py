"""The CLI's view of a Kueue job (pure, no cluster): ``railtrain describe``'s Kueue rows from a Workload as Kueue stores it."""

from __future__ import annotations

from railtrain.cli.kueueview import kueue_rows
from railtrain.crds import kueue as names
from tests.kueue.test_workload import admitted, kueue_job

LQ = {"metadata": {"name": "team-q"}, "spec": {"clusterQueue": "team-cq"}}


def rows(job, wl, lq=LQ):
    return dict(kueue_rows(job, wl, lq))


def test_a_job_without_the_queue_label_shows_nothing_and_a_missing_workload_is_one_line():
    plain = kueue_job()
    del plain["metadata"]["labels"][names.QUEUE_LABEL]
    assert kueue_rows(plain, None, None) == []
    missing = kueue_rows(kueue_job(), None, LQ)
    assert len(missing) == 1 and "Workload trainingjob-llm-uid-l not found (LocalQueue team-q)" in missing[0][1]


def test_admitted_names_the_clusterqueue_flavor_and_the_assigned_hosts():
    said = rows(kueue_job(nodes=3), admitted("trainingjob-llm-uid-l", ["b0r1n3", "b0r1n1", "b0r1n2"], flavor="h100"))
    assert said["Kueue:"] == "Workload trainingjob-llm-uid-l (LocalQueue team-q, ClusterQueue cq)"
    assert said["Admission:"] == "admitted by ClusterQueue cq, flavor h100 (nvidia.com/gpu), 3 pods on 3 assigned hosts"
    assert "Evictions:" not in said


def test_pending_quotes_kueues_reason_and_message_and_names_the_localqueues_clusterqueue():
    wl = {"metadata": {"name": "w"}, "spec": {"queueName": "team-q", "active": True}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending",
         "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 16 more needed"}]}}
    said = rows(kueue_job(), wl)
    assert said["Kueue:"] == "Workload w (LocalQueue team-q, ClusterQueue team-cq)"
    assert said["Admission:"] == ("pending: Pending: couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu"
                                  " in flavor gpu, 16 more needed")
    assert rows(kueue_job(), wl, None)["Kueue:"] == "Workload w (LocalQueue team-q (not found))"


def test_eviction_shows_its_reason_message_and_kueues_count_of_past_evictions():
    wl = admitted("w", ["b0r1n1"])
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "Preempted",
                                       "message": "Preempted to accommodate a workload (UID: u1) due to prioritization in the ClusterQueue"})
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}]}
    said = rows(kueue_job(), wl)
    assert said["Admission:"].startswith("evicted: Preempted: Preempted to accommodate a workload (UID: u1)")
    assert said["Admission:"].endswith("quota still reserved until the gang stops")  # status.admission still set
    assert said["Evictions:"] == "Preempted/InClusterQueue ×1"
    del wl["status"]["admission"]
    assert rows(kueue_job(), wl)["Admission:"].endswith("waiting to be admitted again")
    wl = admitted("w", ["b0r1n1"])  # admitted again: Kueue reset Evicted, keeping its message
    wl["status"]["conditions"].append({"type": "Evicted", "status": "False", "reason": "QuotaReserved", "message": "Previously: Preempted to x"})
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 2}]}
    said = rows(kueue_job(), wl)
    assert said["Admission:"].startswith("admitted by ClusterQueue cq") and said["Evictions:"] == "Preempted/InClusterQueue ×2; last: Preempted to x"


def test_an_assignment_that_does_not_decode_is_said_not_raised():
    wl = admitted("w", ["b0r1n1"])
    wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"][0]["podCounts"] = {"individual": [1, 2]}
    assert "its topology assignment does not decode: " in rows(kueue_job(), wl)["Admission:"]


def test_plan_says_a_labelled_job_is_kueues_and_what_its_workload_would_request():
    from railtrain.cli import plan
    from tests.cli import manifests
    from tests.cli.test_jobviews import render
    from tests.operator.builders import fabric
    from tests.kueue.test_workload import LEVELS, NOW

    job = manifests.job(name="new", nodes=3, procsPerNode=8, resources={"gpus": 8}, topology={"policy": "required", "level": "railtrain.dev/rack"})
    job["metadata"]["labels"] = {names.QUEUE_LABEL: "team-q", names.PRIORITY_LABEL: "high"}
    nodes, pods = fabric(blocks=1, racks=2, per_rack=4)
    result = plan.plan(job, "team", {"nodes": nodes, "pods": pods, "trainingjobs": []}, LEVELS, NOW)
    assert result.result is None and result.nodes == () and result.kueue.local_queue == "team-q" and result.kueue.pods == 3
    text = " ".join(render(plan.plan_view(result), width=200).split())
    assert "team/new is Kueue's to admit (label kueue.x-k8s.io/queue-name): railtrain does not plan it onto nodes" in text
    assert "from LocalQueue team-q" in text and "Its Workload (trainingjob-new-<uid prefix>) would request 3 pods (pod set main), each trainer: " in text
    assert "nvidia.com/gpu 8" in text and "topology required railtrain.dev/rack; priority WorkloadPriorityClass high." in text
    data = plan.as_data(result)["decision"]
    assert data["reason"] == "KueueAdmits" and data["kueue"]["topologyRequest"]["required"] == "railtrain.dev/rack"
    assert data["kueue"]["resourcesPerPod"]["trainer"]["nvidia.com/gpu"] == "8" and data["kueue"]["pods"] == 3


def test_pods_ready_and_a_partial_admission_are_shown():
    """``railtrain describe`` of a Kueue job: the Workload's ``PodsReady`` (Kueue's ``waitForPodsReady`` reads it) and,
    after a partial admission of an elastic job, how many of the pods asked for were admitted."""
    wl = admitted("trainingjob-llm-uid-l", ["b0r1n1", "b0r1n2"])
    wl["spec"]["podSets"] = [{"name": "main", "count": 3, "minCount": 2}]
    wl["status"]["conditions"].append({"type": "PodsReady", "status": "True", "reason": "Started", "message": "all 2 pods of the gang are ready and the job is running"})
    said = rows(kueue_job(nodes=3), wl)
    assert said["Admission:"].endswith("; partial admission: 2 of the 3 pods asked for (spec.elastic.minNodes)"), said
    assert said["Pods ready:"] == "True (Started): all 2 pods of the gang are ready and the job is running"
    full = rows(kueue_job(nodes=2), admitted("trainingjob-llm-uid-l", ["b0r1n1", "b0r1n2"]))
    assert "partial" not in full["Admission:"] and "Pods ready:" not in full


def test_under_multikueue_the_manager_names_the_worker_cluster_and_the_worker_names_the_manager():
    """``railtrain describe`` of a MultiKueue job: on the manager the status is the worker's copy, so it says which
    worker cluster runs the job (the Workload's ``status.clusterName``), or that none does yet; on the worker the copy
    names the manager that dispatched it and the Workload built there."""
    manager = kueue_job(managedBy=names.MULTIKUEUE_CONTROLLER)
    wl = admitted("trainingjob-llm-uid-l", ["b0r1n1", "b0r1n2"])
    assert rows(manager, wl)["MultiKueue:"] == "not dispatched to a worker cluster yet"
    wl["status"]["clusterName"] = "worker-1"
    assert rows(manager, wl)["MultiKueue:"] == "runs on worker cluster worker-1 (its status is that cluster's, copied back)"
    copy = kueue_job()
    copy["metadata"]["labels"] |= {names.PREBUILT_WORKLOAD_LABEL: "trainingjob-llm-1a2b3", names.MULTIKUEUE_ORIGIN_LABEL: "manager-a"}
    said = rows(copy, admitted("trainingjob-llm-1a2b3", ["b0r1n1"]))
    assert said["Kueue:"].startswith("Workload trainingjob-llm-1a2b3 ")
    assert said["MultiKueue:"] == "a copy dispatched by the manager manager-a; Workload trainingjob-llm-1a2b3 was built there"
    assert "MultiKueue:" not in rows(kueue_job(), admitted("trainingjob-llm-uid-l", ["b0r1n1"]))
