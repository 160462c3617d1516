"""Topology-aware gang admission on a real control plane with KWOK nodes carrying topology labels.

Node ``i`` of ``gpu_nodes(count, nodes_per_rack=R, racks_per_block=B)`` sits in
rack ``<prefix>-rack-<i // R>`` and block ``<prefix>-block-<i // (R * B)>``
(railtrain's default topology levels). The operator runs with a 1 s resync.
"""

from __future__ import annotations

import pytest

from railtrain.crds import contract
from tests.polling import wait_for

from .clusterkit import all_running, condition, events, events_with, finish, foreign_pod, job_body, job_obj, job_status, observe, phase_is, pods_of, refused, unreleased

pytestmark = pytest.mark.cluster

RACK, BLOCK = "railtrain.dev/rack", "railtrain.dev/block"


def test_spread_free_gpus_no_node_fits_pending_without_churn_others_run(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(3, gpus_per_node=8)
    submit(job_body("halves", nodes=3, gpus=4, procs=4))  # leaves 4 free GPUs on each node: 12 in total
    wait_for(lambda: all_running(core, namespace, "halves", 3), 60, "halves Running")
    submit(job_body("wide", nodes=1, gpus=8, procs=8))
    c = wait_for(lambda: refused(custom, namespace, "wide", "Unschedulable"), 60, "wide refused")
    assert "0 of 3 nodes fit now: 3 with fewer than 8 free GPUs (12 free across them); the free GPUs add up to enough but are spread" in c["message"]
    submit(job_body("small", nodes=1, gpus=4, procs=4))
    wait_for(lambda: all_running(core, namespace, "small", 1), 60, "a later job that fits runs")
    wait_for(lambda: "(8 free across them)" in refused(custom, namespace, "wide", "Unschedulable")["message"], 30, "wide's reason updated once")

    def state():
        wide = pods_of(core, namespace, "wide")
        others = pods_of(core, namespace, "halves") + pods_of(core, namespace, "small")
        return (
            job_obj(custom, namespace, "wide")["metadata"]["resourceVersion"],
            tuple((p.metadata.uid, p.metadata.resource_version) for p in wide),
            unreleased(wide),
            tuple(sorted((p.metadata.uid, p.status.phase) for p in others)),
        )

    seen = observe(state, seconds=4)  # four resync periods
    assert len(seen) == 1, f"churn: {seen}"
    assert seen[0][2] is True and all(phase == "Running" for _, phase in seen[0][3])
    assert sum(1 for e in events(core, namespace, "wide") if e.reason == "Unschedulable") <= 2  # one per distinct reason, never per resync


def test_two_large_jobs_together_exactly_one_runs_nothing_partially_bound(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(4, gpus_per_node=8)
    submit(job_body("first", nodes=3))
    submit(job_body("second", nodes=3))

    def one_running():
        running = [n for n in ("first", "second") if job_status(custom, namespace, n).get("phase") == "Running"]
        return running if len(running) == 1 else None

    (winner,) = wait_for(one_running, 60, "one of the two jobs Running")
    loser = "second" if winner == "first" else "first"
    c = wait_for(lambda: condition(job_status(custom, namespace, loser), "Scheduled"), 30, "the other job's reason")
    assert c["status"] == "False" and c["reason"] in ("WaitingForEarlierJobs", "Unschedulable"), c

    def held():
        return (job_status(custom, namespace, loser).get("phase"), unreleased(pods_of(core, namespace, loser)), len(pods_of(core, namespace, loser)))

    assert observe(held, seconds=3) == [("Pending", True, 0)]  # admit before creating: the loser has no pod at all
    finish(core, namespace, winner)
    wait_for(lambda: all_running(core, namespace, loser, 3), 90, f"{loser} Running once {winner} finished")


def test_required_rack_on_fragmented_racks(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    nodes = gpu_nodes(8, gpus_per_node=8, nodes_per_rack=4, racks_per_block=2)
    for i in (0, 1, 4):  # rack-0 keeps 2 free nodes, rack-1 keeps 3: 5 free, no rack with 4
        core.create_namespaced_pod(namespace, foreign_pod(f"other-{i}", nodes[i]))
    rack = {node: f"{nodes[0].rsplit('-', 1)[0]}-rack-{i // 4}" for i, node in enumerate(nodes)}
    submit(job_body("four", nodes=4, topology={"policy": "required", "level": RACK}))
    c = wait_for(lambda: refused(custom, namespace, "four", "TopologyUnsatisfiable"), 60, "four refused")
    assert "the most any rack offers now is 3" in c["message"] and "5 nodes fit cluster-wide" in c["message"]
    submit(job_body("three", nodes=3, topology={"policy": "required", "level": RACK}))
    pods = wait_for(lambda: all_running(core, namespace, "three", 3), 60, "three Running")
    assert {rack[p.spec.node_name] for p in pods} == {rack[nodes[4]]}
    status = job_status(custom, namespace, "three")
    assert status["topology"]["domainLevel"] == RACK and status["topology"]["domain"] == rack[nodes[4]]
    assert all(e["domains"][RACK] == rack[nodes[4]] for e in status["placement"])
    assert unreleased(pods_of(core, namespace, "four"))


def test_preferred_block_job_spans_blocks_in_block_order(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(4, gpus_per_node=8, nodes_per_rack=2, racks_per_block=1)  # two blocks of two nodes
    submit(job_body("span", nodes=3, topology={"policy": "preferred", "level": BLOCK}))
    wait_for(lambda: all_running(core, namespace, "span", 3), 60, "span Running")
    status = wait_for(lambda: phase_is(custom, namespace, "span", "Running"), 30, "phase Running")
    topo = status["topology"]
    assert topo["spread"][BLOCK] == 2 and topo["domainLevel"] == "" and "spans blocks" in topo["reason"]
    blocks = [e["domains"][BLOCK] for e in sorted(status["placement"], key=lambda e: e["rank"])]
    assert blocks == sorted(blocks) and len(set(blocks)) == 2  # consecutive ranks share a block
    placed = condition(status, "Scheduled")
    assert placed["status"] == "True" and "spans blocks" in placed["message"]


def test_elastic_job_is_admitted_below_its_maximum(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(3, gpus_per_node=8)
    submit(job_body("stretch", nodes=4, elastic={"minNodes": 2}))
    pods = wait_for(lambda: all_running(core, namespace, "stretch", 3), 60, "3 of at most 4 ranks Running")
    status = wait_for(lambda: phase_is(custom, namespace, "stretch", "Running"), 30, "phase Running")
    assert status["admittedNodes"] == 3 and "admitted 3 of at most 4" in status["topology"]["reason"]
    for p in pods:
        assert p.metadata.annotations[contract.ANNOTATION_NNODES] == "3"
        env = {e.name: e for e in p.spec.containers[0].env}
        assert env["PET_NNODES"].value_from.field_ref.field_path == f"metadata.annotations['{contract.ANNOTATION_NNODES}']"
    assert sorted(int(p.metadata.labels[contract.LABEL_NODE_RANK]) for p in pods) == [0, 1, 2]


def test_gang_not_running_in_time_is_released_and_requeued(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(2, gpus_per_node=8)
    # The nodes fit; kube-scheduler then finds no PersistentVolumeClaim "absent": the pinned pods stay Pending.
    missing = {"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "absent"}}]}}
    submit(job_body("stuck", nodes=2, template=missing, runPolicy={"gangTimeoutSeconds": 2}))
    c = wait_for(lambda: refused(custom, namespace, "stuck", "GangTimeout"), 60, "gang timeout")
    assert "runPolicy.gangTimeoutSeconds=2" in c["message"] and "re-queued" in c["message"]
    status = job_status(custom, namespace, "stuck")
    assert status["requeues"] == 1 and status["requeueAfter"] and status["phase"] == "Pending"
    assert "admittedNodes" not in status  # dropped keys are deleted on the server (merge patch with null)
    wait_for(lambda: not pods_of(core, namespace, "stuck"), 60, "no pod holding capacity while backing off")
    events_with(core, namespace, "stuck", "GangTimeout", where=lambda e: e.type == "Warning")
