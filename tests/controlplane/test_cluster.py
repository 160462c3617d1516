"""The local control plane behaves like a cluster: real scheduling, KWOK pods."""

from __future__ import annotations

import time

import pytest

from railtrain.cli.controlplane import (
    ANNOTATION_KWOK_MESSAGE,
    GPU_RESOURCE,
    LABEL_BLOCK,
    LABEL_HOSTNAME,
    LABEL_KWOK_EXIT,
    LABEL_KWOK_NOT_READY,
    LABEL_RACK,
    wait_until,
)

pytestmark = pytest.mark.cluster


def gpu_pod(name: str, gpus: int, node: str | None = None, message: str | None = None) -> dict:
    spec: dict = {
        "containers": [
            {"name": "trainer", "image": "railtrain/trainer:test", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}
        ],
        "restartPolicy": "Never",
    }
    if node:
        spec["nodeSelector"] = {LABEL_HOSTNAME: node}
    annotations = {ANNOTATION_KWOK_MESSAGE: message} if message else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def phase_of(kube, namespace: str, name: str) -> str:
    return kube.core.read_namespaced_pod(name, namespace).status.phase


def test_nodes_are_ready_with_gpu_capacity_and_topology_labels(kube, gpu_nodes):
    names = gpu_nodes(3, gpus_per_node=4, nodes_per_rack=2, racks_per_block=1, labels={"pool": "a100"})

    nodes = [kube.core.read_node(name) for name in names]
    prefix = names[0].rsplit("-", 1)[0]
    assert [n.metadata.labels[LABEL_RACK] for n in nodes] == [f"{prefix}-rack-{k}" for k in (0, 0, 1)]
    assert [n.metadata.labels[LABEL_BLOCK] for n in nodes] == [f"{prefix}-block-{k}" for k in (0, 0, 1)]
    for node in nodes:
        assert node.metadata.labels[LABEL_HOSTNAME] == node.metadata.name
        assert node.metadata.labels["pool"] == "a100"
        assert node.status.capacity[GPU_RESOURCE] == "4"
        assert node.status.allocatable[GPU_RESOURCE] == "4"
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
        assert not [t for t in node.spec.taints or [] if t.key == "node.kubernetes.io/not-ready"]
        assert [a.type for a in node.status.addresses] == ["InternalIP", "Hostname"]


def test_pod_is_bound_by_kube_scheduler_and_runs(kube, namespace, gpu_nodes):
    nodes = gpu_nodes(2)
    kube.core.create_namespaced_pod(namespace, gpu_pod("rank-0", gpus=8, node=nodes[1]))

    wait_until(lambda: phase_of(kube, namespace, "rank-0") == "Running", 30, "pod rank-0 Running")
    pod = kube.core.read_namespaced_pod("rank-0", namespace)
    assert pod.spec.node_name == nodes[1]
    assert {c.type: c.status for c in pod.status.conditions}["PodScheduled"] == "True"
    assert pod.status.container_statuses[0].state.running is not None
    events = kube.core.list_namespaced_event(namespace, field_selector="involvedObject.name=rank-0").items
    assert any(e.reason == "Scheduled" and nodes[1] in e.message for e in events)


@pytest.mark.parametrize(
    ("exit_label", "phase", "exit_code", "reason"),
    [("0", "Succeeded", 0, "Completed"), ("3", "Failed", 3, "Error")],
)
def test_exit_label_ends_running_pod(kube, namespace, gpu_nodes, exit_label, phase, exit_code, reason):
    (node,) = gpu_nodes(1)
    message = f"railtrain: exit {exit_code}"
    kube.core.create_namespaced_pod(namespace, gpu_pod("worker", gpus=1, node=node, message=message))
    wait_until(lambda: phase_of(kube, namespace, "worker") == "Running", 30, "pod worker Running")

    kube.core.patch_namespaced_pod("worker", namespace, {"metadata": {"labels": {LABEL_KWOK_EXIT: exit_label}}})

    wait_until(lambda: phase_of(kube, namespace, "worker") == phase, 30, f"pod worker {phase}")
    terminated = kube.core.read_namespaced_pod("worker", namespace).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (exit_code, reason, message)


def test_failed_pod_without_message_annotation_gets_a_default_message(kube, namespace, gpu_nodes):
    (node,) = gpu_nodes(1)
    kube.core.create_namespaced_pod(namespace, gpu_pod("worker", gpus=1, node=node))
    wait_until(lambda: phase_of(kube, namespace, "worker") == "Running", 30, "pod worker Running")

    kube.core.patch_namespaced_pod("worker", namespace, {"metadata": {"labels": {LABEL_KWOK_EXIT: "137"}}})

    wait_until(lambda: phase_of(kube, namespace, "worker") == "Failed", 30, "pod worker Failed")
    terminated = kube.core.read_namespaced_pod("worker", namespace).status.container_statuses[0].state.terminated
    assert terminated.exit_code == 137
    assert "137" in terminated.message


def test_pod_needing_more_gpus_than_any_node_stays_pending(kube, namespace, gpu_nodes):
    gpu_nodes(2, gpus_per_node=8)
    kube.core.create_namespaced_pod(namespace, gpu_pod("too-big", gpus=16))

    def unschedulable():
        pod = kube.core.read_namespaced_pod("too-big", namespace)
        cond = {c.type: c for c in pod.status.conditions or []}.get("PodScheduled")
        return pod if cond and cond.status == "False" and cond.reason == "Unschedulable" else None

    pod = wait_until(unschedulable, 30, "pod too-big marked Unschedulable")
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    assert f"Insufficient {GPU_RESOURCE}" in {c.type: c for c in pod.status.conditions}["PodScheduled"].message


def ready_of(kube, node: str):
    return next(c for c in kube.core.read_node(node).status.conditions if c.type == "Ready")


def test_not_ready_label_makes_the_node_not_ready_until_it_is_removed(kube, gpu_nodes):
    sick, well = gpu_nodes(2)
    kube.core.patch_node(sick, {"metadata": {"labels": {LABEL_KWOK_NOT_READY: "true"}}})

    down = wait_until(lambda: (c := ready_of(kube, sick)).status == "False" and c, 30, f"{sick} NotReady")
    assert down.reason == "KubeletNotReady" and LABEL_KWOK_NOT_READY in down.message
    seen = set()
    deadline = time.monotonic() + 5  # an observation window: kwok's node-initialize would re-report Ready at once
    while time.monotonic() < deadline:
        c = ready_of(kube, sick)
        seen.add((c.status, c.last_transition_time, c.last_heartbeat_time))
        assert ready_of(kube, well).status == "True"
        time.sleep(0.5)
    assert seen == {("False", down.last_transition_time, down.last_heartbeat_time)}  # nothing rewrites it

    kube.core.patch_node(sick, {"metadata": {"labels": {LABEL_KWOK_NOT_READY: None}}})
    up = wait_until(lambda: (c := ready_of(kube, sick)).status == "True" and c, 30, f"{sick} Ready again")
    assert up.reason == "KubeletReady"


def test_a_start_whose_port_was_taken_before_its_component_listened_is_tried_again(monkeypatch):
    """A fresh-clone run lost a worker's control plane: kube-scheduler could not bind the free port kwokctl had
    picked (an outgoing connection took it first). That start is tried again with new ports; any other failure is not."""
    from railtrain.cli.controlplane import ClusterError, LocalCluster
    from railtrain.cli.controlplane import cluster as cluster_module

    tries: list[str] = []

    def once(self, timeout, owner_pid):
        tries.append(self.name)
        if len(tries) == 1:
            raise ClusterError('kube-scheduler exited during startup\n"command failed" err="failed to create listener: listen tcp 127.0.0.1:35977: bind: address already in use"')
        return self

    monkeypatch.setattr(LocalCluster, "_start_once", once)
    c = LocalCluster("port-race")
    assert c.start() is c and len(tries) == 2

    def broken(self, timeout, owner_pid):
        tries.append("broken")
        raise ClusterError("kube-apiserver exited during startup: bad flag")

    monkeypatch.setattr(LocalCluster, "_start_once", broken)
    tries.clear()
    with pytest.raises(ClusterError, match="bad flag"):
        c.start()
    assert tries == ["broken"]  # not a port race: no second try
    assert cluster_module.START_TRIES >= 2
