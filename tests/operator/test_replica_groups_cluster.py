"""Replica groups on a real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK nodes):
the Lighthouse pod and Service owned by the job, per-group pods, and one deleted pod of group 1 replacing group 1 alone
while group 0's pods stay (same uids) and the job stays Running (docs/operator.md, "Replica groups")."""

from __future__ import annotations

import time

import pytest

from railtrain.crds import contract
from railtrain.crds import replica_groups as rg
from tests.polling import wait_for

from .clusterkit import G, P, V, job_body, job_status, phase_is, pods_of

pytestmark = pytest.mark.cluster


def env_of(pod):
    trainer = next(c for c in pod.spec.containers if c.name == "trainer")
    return {e.name: e.value for e in trainer.env or []}


def by_group(pods):
    out: dict[str, dict[str, object]] = {}
    for p in pods:
        out.setdefault(p.metadata.labels[rg.LABEL_REPLICA_GROUP], {})[p.metadata.name] = p
    return out


def running(core, ns, name, count):
    pods = pods_of(core, ns, name)
    ok = len(pods) == count and all(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods)
    return pods if ok else None


def test_group_1_is_replaced_alone_and_the_lighthouse_is_owned_by_the_job(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("ft", nodes=4, faultTolerance={"replicaGroups": 2, "minReplicas": 1}))
    pods = wait_for(lambda: running(core, namespace, "ft", 4), 60, "ft's 4 pods Running")
    wait_for(lambda: phase_is(custom, namespace, "ft", "Running"), 30, "phase Running")
    uid = custom.get_namespaced_custom_object(G, V, namespace, P, "ft")["metadata"]["uid"]

    lighthouse = wait_for(lambda: _read(core.read_namespaced_pod, namespace), 30, "the Lighthouse pod")
    service = wait_for(lambda: _read(core.read_namespaced_service, namespace), 30, "the Lighthouse Service")
    for obj in (lighthouse, service):
        assert [(r.kind, r.uid, r.controller) for r in obj.metadata.owner_references] == [("TrainingJob", uid, True)]
    assert lighthouse.spec.containers[0].command[:3] == ["torchft_lighthouse", "--min_replicas", "1"]
    assert service.spec.ports[0].port == rg.LIGHTHOUSE_PORT

    groups = by_group(pods)
    assert sorted(groups) == ["0", "1"] and sorted(groups["0"]) == ["ft-0", "ft-1"] and sorted(groups["1"]) == ["ft-2", "ft-3"]
    for name, host in (("ft-0", "ft-0"), ("ft-1", "ft-0"), ("ft-2", "ft-2"), ("ft-3", "ft-2")):
        env = env_of(next(p for p in pods if p.metadata.name == name))
        assert env[contract.ENV_PET_NNODES] == "2" and env[contract.ENV_PET_MASTER_ADDR] == f"{host}.ft.{namespace}.svc"
        assert env[rg.ENV_LIGHTHOUSE] == f"http://ft-lighthouse.{namespace}.svc:29510"
    kept = {p.metadata.name: p.metadata.uid for p in pods if p.metadata.name in ("ft-0", "ft-1")}
    old = {p.metadata.name: p.metadata.uid for p in pods if p.metadata.name in ("ft-2", "ft-3")}

    deleted_at = time.monotonic()
    core.delete_namespaced_pod("ft-3", namespace, grace_period_seconds=0)

    def replaced():
        now = running(core, namespace, "ft", 4)
        if now is None:
            return None
        uids = {p.metadata.name: p.metadata.uid for p in now}
        return uids if all(uids[n] != u for n, u in old.items()) else None

    uids = wait_for(replaced, 45, "group 1's pods replaced and Running")
    print(f"group 1's pods were Running again {time.monotonic() - deleted_at:.2f} s after ft-3's delete")  # shown with -s
    assert {n: uids[n] for n in kept} == kept  # group 0 untouched
    status = wait_for(lambda: (s := job_status(custom, namespace, "ft")).get("phase") == "Running"
                      and [g["phase"] for g in s.get("replicaGroups", [])] == ["Running", "Running"] and s, 30, "both groups Running")
    assert [g["replacements"] for g in status["replicaGroups"]] == [0, 1]
    assert status.get("restarts", 0) == 0 and status["replicaGroups"][1]["infrastructureRestarts"] == 1
    assert sorted(status["replicaGroups"][1]["members"]) == ["ft-2", "ft-3"]
    reasons = {e.reason for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=ft").items}
    assert "ReplicaGroupReplaced" in reasons and "RankVanished" not in reasons

    # the Lighthouse pod lost: created again at once, the gang untouched
    gone_at = time.monotonic()
    core.delete_namespaced_pod(rg.lighthouse_name("ft"), namespace, grace_period_seconds=0)
    wait_for(lambda: (p := _read(core.read_namespaced_pod, namespace)) is not None and p.metadata.uid != lighthouse.metadata.uid
             and not p.metadata.deletion_timestamp, 30, "a new Lighthouse pod")
    print(f"the Lighthouse pod was created again {time.monotonic() - gone_at:.2f} s after its delete")  # shown with -s (docs/operator.md)
    assert {p.metadata.name: p.metadata.uid for p in pods_of(core, namespace, "ft")} == uids
    assert job_status(custom, namespace, "ft")["phase"] == "Running"


def _read(read, namespace):
    from kubernetes.client.rest import ApiException

    try:
        return read(rg.lighthouse_name("ft"), namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_a_lost_node_moves_only_its_group_to_a_spare_node(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(5)  # four for the gang, one spare
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("mv", nodes=4, faultTolerance={"replicaGroups": 2, "minReplicas": 1}))
    pods = wait_for(lambda: running(core, namespace, "mv", 4), 60, "mv's 4 pods Running")
    wait_for(lambda: phase_is(custom, namespace, "mv", "Running"), 30, "phase Running")
    before = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in pods}
    victim = before["mv-3"][1]

    lost_at = time.monotonic()
    core.delete_node(victim)

    def moved():
        now = running(core, namespace, "mv", 4)
        if now is None:
            return None
        after = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in now}
        return after if all(after[n][0] != before[n][0] for n in ("mv-2", "mv-3")) else None

    after = wait_for(moved, 45, "group 1's pods Running on other nodes")
    print(f"group 1 was Running again {time.monotonic() - lost_at:.2f} s after its node's delete")  # shown with -s
    assert {n: after[n] for n in ("mv-0", "mv-1")} == {n: before[n] for n in ("mv-0", "mv-1")}  # group 0: same pods, same nodes
    assert victim not in {node for _, node in after.values()}
    status = wait_for(lambda: (s := job_status(custom, namespace, "mv")).get("phase") == "Running"
                      and [g["phase"] for g in s.get("replicaGroups", [])] == ["Running", "Running"] and s, 30, "both groups Running")
    assert status.get("restarts", 0) == 0 and status["replicaGroups"][1]["replacements"] == 1
    assert status["admission"]["nodes"][3] == after["mv-3"][1] and {"node": victim, "count": 1} in status["nodeFailures"]
    reasons = {e.reason for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=mv").items}
    assert "ReplicaGroupReplaced" in reasons and "NodeLost" not in reasons
