"""The operator on a real control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, KWOK nodes): gangs, refusals, deletion, validation, restarts."""

from __future__ import annotations

import threading

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from railtrain.crds import contract
from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, condition, end_pod, events, events_with, finish, job_body, job_status, phase_is, pods_of, refused

pytestmark = pytest.mark.cluster


def test_gang_pods_are_created_pinned_and_ungated_one_write_each_then_bound_to_distinct_nodes(api, namespace, gpu_nodes, operator):
    """Admit before creating: every pod's first version is already pinned and ungated, and no later update pins or ungates it."""
    core, custom = api
    nodes = set(gpu_nodes(3, gpus_per_node=8))
    seen: list[tuple[str, str, list[str], str | None]] = []  # (event type, pod, gates, pinned node) in watch order
    w = watch.Watch()

    def record():
        for ev in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=90):
            pod = ev["object"]
            seen.append((ev["type"], pod.metadata.name, [g.name for g in pod.spec.scheduling_gates or []], (pod.spec.node_selector or {}).get("kubernetes.io/hostname")))
            if sum(1 for t, *_ in seen if t == "ADDED") >= 2 and all((p.status.phase == "Running") for p in core.list_namespaced_pod(namespace).items):
                w.stop()

    t = threading.Thread(target=record)
    t.start()
    wait_for(lambda: core.list_namespaced_pod(namespace).items is not None, 5, "watch to start")
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("gang", nodes=2, gpus_per_node=8))
    pods = wait_for(lambda: all_running(core, namespace, "gang", 2), 90, "both pods Running")
    t.join(timeout=90)
    added = {name: (gates, node) for kind, name, gates, node in seen if kind == "ADDED"}
    assert set(added) == {"gang-0", "gang-1"}
    for name, (gates, node) in added.items():
        assert gates == [] and node in nodes, f"{name} was created as {gates}, pinned to {node}"
    first_pin = {name: node for name, (_, node) in added.items()}
    assert all(gates == [] and node == first_pin[name] for kind, name, gates, node in seen), seen  # never gated, never re-pinned
    svc = core.read_namespaced_service("gang", namespace)
    assert svc.spec.cluster_ip == "None"
    bound = [p.spec.node_name for p in pods]
    assert len(set(bound)) == 2 and set(bound) <= nodes
    status = wait_for(lambda: phase_is(custom, namespace, "gang", "Running"), 30, "phase Running")
    assert {p["node"] for p in status["placement"]} == set(bound)
    assert status["startTime"]
    events_with(core, namespace, "gang", "GangCreated", "GangPlaced", "AllRanksRunning")


def test_job_that_cannot_fit_stays_pending_with_reason_and_binds_nothing(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(2, gpus_per_node=8)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("huge", nodes=2, gpus=16, procs=16))
    c = wait_for(lambda: refused(custom, namespace, "huge"), 60, "Scheduled=False Unschedulable")
    assert c["status"] == "False" and "16 free GPUs" in c["message"]
    assert job_status(custom, namespace, "huge")["phase"] == "Pending"
    pods = pods_of(core, namespace, "huge")
    assert pods == []  # admit before creating: a gang that does not fit has no pods at all
    events_with(core, namespace, "huge", "Unschedulable", where=lambda e: e.type == "Warning")


def test_deleting_the_job_removes_its_pods(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(1)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("gone", nodes=1))
    wait_for(lambda: len(pods_of(core, namespace, "gone")) == 1, 60, "pod created")
    custom.delete_namespaced_custom_object(G, V, namespace, P, "gone")
    wait_for(lambda: not pods_of(core, namespace, "gone"), 120, "garbage collection of the gang")
    wait_for(lambda: not core.list_namespaced_service(namespace, label_selector=f"{contract.LABEL_JOB_NAME}=gone").items, 60, "service removed")


@pytest.mark.parametrize(
    "spec,field",
    [
        ({"parallelism": {"data": 3}}, "spec.parallelism"),
        ({"nodes": 1, "procsPerNode": 4, "resources": {"gpus": 4}, "parallelism": {"data": 4, "tensor": 3}}, "spec.parallelism"),
        ({"nodes": 0}, "spec.nodes"),
        ({"procsPerNode": 9, "resources": {"gpus": 8}}, "spec.procsPerNode"),
        ({"elastic": {"minNodes": 3}}, "spec.elastic.minNodes"),
        ({"topology": {"policy": "required"}}, "spec.topology.level"),
    ],
)
def test_invalid_manifest_is_refused_by_the_api_server_with_the_field_path(api, namespace, spec, field):
    _, custom = api
    body = job_body("bad") 
    body["spec"].update(spec)
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(G, V, namespace, P, body)
    assert err.value.status == 422
    assert field in err.value.body


def test_invalid_name_is_refused(api, namespace):
    _, custom = api
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(G, V, namespace, P, job_body("x" * 60))
    assert err.value.status == 422 and "metadata.name" in err.value.body


def test_operator_restarts_mid_reconcile_leave_one_pod_per_rank(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    operator.kill()
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("crashy", nodes=4))
    for _ in range(3):  # kill the operator as soon as it has done part of the work
        operator.start()
        wait_for(lambda: pods_of(core, namespace, "crashy"), 60, "some pod created")
        operator.kill()
    operator.start()
    pods = wait_for(lambda: all_running(core, namespace, "crashy", 4), 120, "gang Running after restarts")
    ranks = sorted(int(p.metadata.labels[contract.LABEL_NODE_RANK]) for p in pods)
    assert ranks == [0, 1, 2, 3]
    assert len({p.spec.node_name for p in pods}) == 4


def test_failed_rank_restarts_the_gang_then_success_completes(api, namespace, gpu_nodes, operator, cluster):
    core, custom = api
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("flaky", nodes=2, runPolicy={"backoffLimit": 2}))
    wait_for(lambda: phase_is(custom, namespace, "flaky", "Running"), 90, "Running")
    first_uids = {p.metadata.uid for p in pods_of(core, namespace, "flaky")}
    end_pod(core, namespace, "flaky-1", 1)
    wait_for(lambda: job_status(custom, namespace, "flaky").get("restarts") == 1, 60, "restart counted")
    wait_for(lambda: all_running(core, namespace, "flaky", 2, first_uids), 120, "new gang Running")
    finish(core, namespace, "flaky")
    status = wait_for(lambda: phase_is(custom, namespace, "flaky", "Succeeded"), 60, "Succeeded")
    assert status["completionTime"] and condition(status, "Succeeded")["status"] == "True"


def test_kubectl_shows_printer_columns_and_explain(cluster, namespace, api, gpu_nodes, operator):
    _, custom = api
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("cols", nodes=1, gpus=64, procs=1))
    out = cluster.kubectl("get", "tj", "-n", namespace).stdout
    header = out.splitlines()[0].split()
    assert header[:4] == ["NAME", "PHASE", "NODES", "RESTARTS"] and "AGE" in header
    explain = cluster.kubectl("explain", "trainingjobs.spec.procsPerNode").stdout
    assert "Training processes per pod" in explain
