"""Placement honours the pod template: node selector, required affinity, tolerations, and every requested resource (pure)."""

from __future__ import annotations

import pytest

from railtrain.operator.scheduling.queue import schedule
from railtrain.operator.scheduling.snapshot import pod_requests, snapshot
from railtrain.operator.scheduling.nodefit import PodNeeds, pod_needs, restrict, term_matches, tolerates
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.refusal import Refusal

from .builders import node, other_pod

H100 = {"nvidia.com/gpu.product": "H100"}


def req(nodes, gpus=8, job="ns/job", **needs):
    return GangRequest(job, nodes, gpus, procs_per_node=max(gpus, 1), policy="none", needs=PodNeeds(**needs))


def six_nodes_two_h100():
    return [node(f"n{i}", labels=H100 if i in (2, 5) else {"nvidia.com/gpu.product": "A100"}) for i in range(6)]


def test_node_selector_places_only_on_matching_nodes_and_refuses_when_too_few():
    snap = snapshot(six_nodes_two_h100(), [])
    placed = place_gang(req(2, node_selector=H100), snap)
    assert isinstance(placed, Placement) and set(placed.nodes) == {"n2", "n5"}
    refused = place_gang(req(3, node_selector=H100), snap)
    assert isinstance(refused, Refusal) and refused.reason == "Unschedulable"
    assert "2 of 6 nodes fit now" in refused.message and "4 not matching spec.template.spec.nodeSelector" in refused.message


def test_required_node_affinity_terms_are_ored_and_expressions_anded():
    nodes = [node("a", labels={"zone": "z1", "gen": "5"}), node("b", labels={"zone": "z2", "gen": "3"}), node("c", labels={"zone": "z3"})]
    terms = ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z3"]}, {"key": "gen", "operator": "Gt", "values": ["4"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]})
    snap = restrict(snapshot(nodes, []), PodNeeds(terms=terms), "nvidia.com/gpu")
    assert [n.name for n in snap.eligible()] == ["a", "b"]
    assert snap.nodes["c"].why_ineligible == "not matching the required node affinity"
    assert not term_matches({}, snap.nodes["a"])  # an empty term matches nothing


@pytest.mark.parametrize(
    "toleration,taint,ok",
    [
        ({"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}, {"key": "team", "value": "a", "effect": "NoSchedule"}, True),
        ({"key": "team", "value": "b", "effect": "NoSchedule"}, {"key": "team", "value": "a", "effect": "NoSchedule"}, False),
        ({"key": "team", "operator": "Exists"}, {"key": "team", "value": "a", "effect": "NoExecute"}, True),
        ({"operator": "Exists"}, {"key": "anything", "effect": "NoSchedule"}, True),
        ({"key": "team", "operator": "Exists", "effect": "NoExecute"}, {"key": "team", "effect": "NoSchedule"}, False),
    ],
)
def test_toleration_semantics(toleration, taint, ok):
    assert tolerates(toleration, taint) is ok


def test_a_toleration_opens_tainted_nodes_and_its_absence_keeps_the_gang_off():
    taint = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    snap = snapshot([node("plain"), node("t1", taints=taint), node("t2", taints=taint)], [])
    without = place_gang(req(2, node_selector={}), snap)
    assert isinstance(without, Refusal) and "2 with the untolerated taint dedicated=training:NoSchedule" in without.message
    tol = ({"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},)
    tainted_only = place_gang(req(2, tolerations=tol), snapshot([node("t1", taints=taint), node("t2", taints=taint)], []))
    assert isinstance(tainted_only, Placement) and set(tainted_only.nodes) == {"t1", "t2"}


def test_more_cpu_than_any_node_has_is_refused_naming_cpu():
    snap = snapshot([node(f"n{i}") for i in range(3)], [])  # 64 CPUs allocatable each
    result = place_gang(req(2, requests={"cpu": 128.0}), snap)
    assert isinstance(result, Refusal) and result.reason == "Unschedulable"
    assert "gang needs 2 nodes with 8 free GPUs, 128 cpu each" in result.message
    assert "3 with less than 128 cpu allocatable" in result.message and "It can never fit" in result.message


def test_cpu_held_by_other_pods_makes_a_node_busy_not_impossible():
    cpu_pod = other_pod("n0", 0)
    cpu_pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "60"
    snap = snapshot([node("n0"), node("n1")], [cpu_pod])
    result = place_gang(req(2, requests={"cpu": 8.0}), snap)
    assert isinstance(result, Refusal) and "1 with less than 8 cpu free" in result.message and "It waits" in result.message
    assert isinstance(place_gang(req(1, requests={"cpu": 8.0}), snap), Placement)


def test_one_pass_promises_cpu_once():
    snap = snapshot([node("n0", gpus=0), node("n1", gpus=0)], [])
    a, b = req(2, gpus=0, job="ns/a", requests={"cpu": 40.0}), req(2, gpus=0, job="ns/b", requests={"cpu": 40.0})
    decisions = {d.job: d.result for d in schedule([a, b], snap)}
    assert isinstance(decisions["ns/a"], Placement) and decisions["ns/b"].reason == "WaitingForEarlierJobs"


def test_pod_requests_follow_the_scheduler_rule():
    pod = {"spec": {
        "containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}, {"resources": {"limits": {"cpu": "500m"}}}],
        "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}, {"resources": {"requests": {"cpu": "8", "memory": "512Mi"}}}],
    }}
    assert pod_requests(pod) == {"cpu": 9.0, "memory": 2.0**30}  # max(2 + 0.5 + 1 sidecar, 8 init + 1 sidecar)


def test_pod_needs_read_from_a_rendered_pod():
    pod = {"spec": {"nodeSelector": H100, "tolerations": [{"key": "x", "operator": "Exists"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}},
                    "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8", "cpu": "16", "rdma/ib": "1"}}}]}}
    needs = pod_needs(pod, "nvidia.com/gpu")
    assert needs.requests == {"cpu": 16.0, "rdma/ib": 1.0} and needs.node_selector == H100 and len(needs.terms) == 1 and len(needs.tolerations) == 1


def test_extended_resources_like_rdma_are_counted():
    with_ib = node("ib")
    with_ib["status"]["allocatable"]["rdma/ib"] = "1"
    snap = snapshot([with_ib, node("plain")], [])
    result = place_gang(req(2, requests={"rdma/ib": 1.0}), snap)
    assert isinstance(result, Refusal) and "1 with less than 1 rdma/ib allocatable" in result.message
    assert place_gang(req(1, requests={"rdma/ib": 1.0}), snap).nodes == ("ib",)
