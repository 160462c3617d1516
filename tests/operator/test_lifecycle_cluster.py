"""Gang lifecycle decisions on a real control plane (issue 11): ranks that finish early,
deadlines across suspend. The operator runs with a 1 s resync."""

from __future__ import annotations

import time

import pytest

from railtrain.crds import contract
from tests.polling import wait_for

from .clusterkit import G, P, V, condition, end_pod, events, events_with, job_body, job_status, observe, phase_is, pods_of, refused

pytestmark = pytest.mark.cluster


def summary(custom, core, ns, name):
    """(phase, Running condition status, requeues, restarts, pod names with their phases) of a job."""
    s = job_status(custom, ns, name)
    running = condition(s, "Running") or {}
    pods = tuple(sorted((p.metadata.name, p.status.phase) for p in pods_of(core, ns, name)))
    return s.get("phase"), running.get("status"), s.get("requeues", 0), s.get("restarts", 0), pods


def suspend(custom, ns, name, value):
    custom.patch_namespaced_custom_object(G, V, ns, P, name, {"spec": {"runPolicy": {"suspend": value}}})


def test_a_rank_that_exits_0_early_keeps_the_gang_healthy_until_all_succeed(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(3)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("early", nodes=3, runPolicy={"gangTimeoutSeconds": 2}))
    wait_for(lambda: phase_is(custom, namespace, "early", "Running"), 90, "Running")
    # Past the gang timeout since release (several resyncs), rank 2 finishes first.
    assert observe(lambda: summary(custom, core, namespace, "early")[:4], 3) == [("Running", "True", 0, 0)]
    end_pod(core, namespace, "early-2")
    wait_for(lambda: dict(summary(custom, core, namespace, "early")[4]).get("early-2") == "Succeeded", 30, "rank 2 Succeeded")
    seen = observe(lambda: summary(custom, core, namespace, "early"), 5)
    assert seen == [("Running", "True", 0, 0, (("early-0", "Running"), ("early-1", "Running"), ("early-2", "Succeeded")))], seen
    assert condition(job_status(custom, namespace, "early"), "Running")["reason"] == "RanksFinishing"
    end_pod(core, namespace, "early-0")
    end_pod(core, namespace, "early-1")
    status = wait_for(lambda: phase_is(custom, namespace, "early", "Succeeded"), 60, "Succeeded")
    assert condition(status, "Succeeded")["status"] == "True" and condition(status, "Running")["status"] == "False"
    assert status.get("requeues", 0) == 0 and status["restarts"] == 0


@pytest.mark.parametrize("started", [False, True], ids=["suspended-before-start", "suspended-after-start"])
def test_suspended_time_does_not_count_against_the_deadline(api, namespace, gpu_nodes, operator, started):
    """batch/v1 Job semantics: suspending stops the activeDeadlineSeconds timer; resuming restarts it."""
    core, custom = api
    gpu_nodes(1)
    deadline = 8
    body = job_body("dl", nodes=1, runPolicy={"activeDeadlineSeconds": deadline, "suspend": not started})
    custom.create_namespaced_custom_object(G, V, namespace, P, body)
    if started:
        wait_for(lambda: phase_is(custom, namespace, "dl", "Running"), 90, "Running")
        suspend(custom, namespace, "dl", True)
    status = wait_for(lambda: phase_is(custom, namespace, "dl", "Suspended"), 60, "Suspended")
    assert "startTime" not in status
    wait_for(lambda: not pods_of(core, namespace, "dl"), 60, "the gang stopped")
    # Suspended for longer than the deadline: nothing fails while suspended.
    assert [p for p, *_ in observe(lambda: summary(custom, core, namespace, "dl"), deadline + 1)] == ["Suspended"]
    suspend(custom, namespace, "dl", False)
    status = wait_for(lambda: phase_is(custom, namespace, "dl", "Running"), 90, "Running again")
    resumed_at = time.monotonic()
    assert condition(status, "Failed") is None
    # The timer restarted: the job fails only a full deadline after the resumed gang ran.
    status = wait_for(lambda: phase_is(custom, namespace, "dl", "Failed"), deadline + 30, "DeadlineExceeded")
    assert time.monotonic() - resumed_at >= deadline - 2
    assert condition(status, "Failed")["reason"] == "DeadlineExceeded"


def test_a_hand_made_pod_with_a_ranks_name_and_labels_is_reported_never_adopted(api, namespace, gpu_nodes, operator):
    core, custom = api
    node = gpu_nodes(2)[0]
    labels = {contract.LABEL_JOB_NAME: "demo", contract.LABEL_NODE_RANK: "0"}
    hand = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-0", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "someone/else:1", "command": ["sleep", "inf"]}]}}
    core.create_namespaced_pod(namespace, hand)
    wait_for(lambda: core.read_namespaced_pod("demo-0", namespace).status.phase == "Running", 60, "the hand-made pod Running")
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("demo", nodes=1))
    c = wait_for(lambda: refused(custom, namespace, "demo", "PodNameTaken"), 60, "Scheduled=False PodNameTaken")
    assert c["status"] == "False" and "Pod demo-0 (no controller ownerReference)" in c["message"]
    events_with(core, namespace, "demo", "PodNameTaken", where=lambda e: e.type == "Warning" and "demo-0" in e.message)
    # Several resyncs: the job never reports progress it did not make, and the pod stays someone else's.
    seen = observe(lambda: (job_status(custom, namespace, "demo").get("phase"), "startTime" in job_status(custom, namespace, "demo")), 3)
    assert seen == [("Pending", False)]
    pod = core.read_namespaced_pod("demo-0", namespace)
    assert not pod.metadata.owner_references and pod.spec.containers[0].image == "someone/else:1" and pod.metadata.deletion_timestamp is None
    # Deleting the job leaves the pod it never owned; freeing the name lets a new job run its own pod.
    custom.delete_namespaced_custom_object(G, V, namespace, P, "demo")
    wait_for(lambda: not custom.list_namespaced_custom_object(G, V, namespace, P)["items"], 30, "job deleted")
    assert core.read_namespaced_pod("demo-0", namespace).metadata.deletion_timestamp is None
    core.delete_namespaced_pod("demo-0", namespace, grace_period_seconds=0)
    wait_for(lambda: not pods_of(core, namespace, "demo"), 60, "the hand-made pod gone")
    created = custom.create_namespaced_custom_object(G, V, namespace, P, job_body("demo", nodes=1))
    wait_for(lambda: phase_is(custom, namespace, "demo", "Running"), 90, "Running with its own pod")
    refs = core.read_namespaced_pod("demo-0", namespace).metadata.owner_references
    assert [(r.uid, r.controller) for r in refs] == [(created["metadata"]["uid"], True)]


def waiting_for(custom, ns, name, *fragments):
    c = refused(custom, ns, name, "WaitingForOldPods")
    return c if c and all(f in c["message"] for f in fragments) else None


def test_old_pod_held_by_a_finalizer_is_named_and_never_force_removed(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("held", nodes=2, runPolicy={"backoffLimit": 2}))
    wait_for(lambda: phase_is(custom, namespace, "held", "Running"), 90, "Running")
    core.patch_namespaced_pod("held-1", namespace, {"metadata": {"finalizers": ["example.com/hold"]}})
    end_pod(core, namespace, "held-0", 1)  # a retryable failure: the whole gang restarts
    c = wait_for(lambda: waiting_for(custom, namespace, "held", "held-1 (", "finalizer example.com/hold"), 60, "the condition naming held-1")
    assert "not force-deleted" in c["message"]
    # Over several resyncs: still there, still named, never force-removed.
    seen = observe(lambda: (core.read_namespaced_pod("held-1", namespace).metadata.deletion_timestamp is not None,
                            bool(waiting_for(custom, namespace, "held", "held-1"))), 5)
    assert seen == [(True, True)]
    core.patch_namespaced_pod("held-1", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: phase_is(custom, namespace, "held", "Running") and job_status(custom, namespace, "held")["restarts"] == 1, 90, "the new gang Running")


def test_a_service_with_the_jobs_name_that_it_does_not_own_is_reported_and_the_gang_waits(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(1)
    core.create_namespaced_service(namespace, {"metadata": {"name": "rdzv"}, "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]}})
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("rdzv", nodes=1))
    c = wait_for(lambda: refused(custom, namespace, "rdzv", "ServiceNameTaken"), 60, "Scheduled=False ServiceNameTaken")
    assert "Service rdzv (no controller ownerReference)" in c["message"]
    assert observe(lambda: len(pods_of(core, namespace, "rdzv")), 3) == [0]
    assert not core.read_namespaced_service("rdzv", namespace).metadata.owner_references
    core.delete_namespaced_service("rdzv", namespace)
    wait_for(lambda: phase_is(custom, namespace, "rdzv", "Running"), 90, "Running with its own Service")
    assert core.read_namespaced_service("rdzv", namespace).metadata.owner_references[0].kind == "TrainingJob"


def test_the_rendezvous_services_endpoints_hold_rank_0_alone(api, namespace, gpu_nodes, operator):
    """Rank 0's DNS name is the rendezvous; the other ranks are not in the job's EndpointSlices, so their addresses
    cause no endpoint rewrites (docs/bench-operator.md: about 90 writes for a 256-pod gang when all were selected)."""
    from kubernetes import client

    core, custom = api
    gpu_nodes(3)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("rdzv3", nodes=3))
    wait_for(lambda: phase_is(custom, namespace, "rdzv3", "Running"), 60, "the gang Running")
    wait_for(lambda: all(p.status.pod_ip for p in pods_of(core, namespace, "rdzv3")), 30, "every rank with an address")
    discovery = client.DiscoveryV1Api(core.api_client)

    def targets():
        slices = discovery.list_namespaced_endpoint_slice(namespace, label_selector=f"kubernetes.io/service-name={contract.service_name('rdzv3')}").items
        return sorted(e.target_ref.name for s in slices for e in s.endpoints or [] if e.target_ref)

    wait_for(lambda: targets() == [contract.pod_name("rdzv3", 0)], 30, "rank 0 alone in the EndpointSlices")
