"""A restarting gang keeps its nodes on a real control plane (KWOK nodes): while an old pod of the failed gang
lingers, a smaller job queued behind it does not take the nodes the other old pods freed, and every rank of the
new gang lands on the node it ran on before (its node-local checkpoints are there)."""

from __future__ import annotations

import pytest

from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, condition, end_pod, job_body, job_status, observe, pods_of, refused

pytestmark = pytest.mark.cluster


def test_a_restarting_gang_keeps_its_nodes_from_a_smaller_job_and_each_rank_gets_its_node_back(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("big", nodes=4, runPolicy={"backoffLimit": 2}))
    old = wait_for(lambda: all_running(core, namespace, "big", 4), 90, "big Running on all 4 nodes")
    before = {p.metadata.name: p.spec.node_name for p in old}
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("small", nodes=1))
    wait_for(lambda: refused(custom, namespace, "small"), 60, "small waiting: the cluster is full")

    core.patch_namespaced_pod("big-3", namespace, {"metadata": {"finalizers": ["example.com/linger"]}})  # one old pod ends late
    end_pod(core, namespace, "big-0", 1)  # a retryable failure: the whole gang restarts
    status = wait_for(lambda: (s := job_status(custom, namespace, "big")).get("restarts") == 1 and s.get("hold") and s, 60, "big restarting with a hold")
    assert status["hold"]["nodes"] == [before[f"big-{r}"] for r in range(4)]
    wait_for(lambda: [p.metadata.name for p in pods_of(core, namespace, "big")] == ["big-3"], 60, "three old pods gone, big-3 lingering")

    # Three nodes are free, but held for big: small neither gets one nor has a pod, over several passes.
    assert observe(lambda: (len(pods_of(core, namespace, "small")), (condition(job_status(custom, namespace, "small"), "Scheduled") or {}).get("status")), 5) == [(0, "False")]

    core.patch_namespaced_pod("big-3", namespace, {"metadata": {"finalizers": None}})
    new = wait_for(lambda: all_running(core, namespace, "big", 4, {p.metadata.uid for p in old}), 90, "the new gang Running")
    assert {p.metadata.name: p.spec.node_name for p in new} == before
    status = job_status(custom, namespace, "big")
    assert not status.get("hold") and "4 of 4 ranks back on the nodes they ran on" in condition(status, "Scheduled")["message"]
    assert not pods_of(core, namespace, "small") and condition(job_status(custom, namespace, "small"), "Scheduled")["status"] == "False"
