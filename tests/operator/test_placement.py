"""All-or-nothing gang placement on cluster snapshots (pure)."""

import pytest

from railtrain.operator.cluster import parse_quantity, snapshot
from railtrain.operator.placement import GangRequest, Placement, Refusal, place_gang

from .builders import node, other_pod


def req(nodes, gpus=8, fixed=None):
    return GangRequest("ns/job", nodes, gpus, fixed or {})


@pytest.mark.parametrize(
    "text,value", [("8", 8), ("500m", 0.5), ("64Gi", 64 * 2**30), ("1k", 1000), (4, 4), ("1e3", 1000)]
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


def test_places_every_rank_on_distinct_nodes():
    snap = snapshot([node(f"n{i}") for i in range(4)], [])
    result = place_gang(req(3), snap)
    assert isinstance(result, Placement)
    assert len(set(result.nodes)) == 3


def test_total_suffices_but_no_node_fits_refuses():
    nodes = [node(f"n{i}") for i in range(4)]
    pods = [other_pod(f"n{i}", 4) for i in range(4)]  # 16 GPUs free in total, 4 per node
    result = place_gang(req(2, gpus=8), snapshot(nodes, pods))
    assert isinstance(result, Refusal) and result.reason == "Unschedulable"
    assert "0 of 4 nodes fit" in result.message


@pytest.mark.parametrize(
    "bad,why",
    [
        (dict(ready=False), "NotReady"),
        (dict(unschedulable=True), "cordoned"),
        (dict(taints=[{"key": "gpu-broken", "effect": "NoSchedule"}]), "taint gpu-broken"),
        (dict(labels={"railtrain.dev/quarantined": "sdc"}), "quarantined"),
    ],
)
def test_ineligible_nodes_are_excluded_and_named(bad, why):
    snap = snapshot([node("a"), node("b", **bad)], [])
    result = place_gang(req(2), snap)
    assert isinstance(result, Refusal) and why in result.message


def test_pinned_unbound_pods_count_as_promised_capacity():
    snap = snapshot([node("a"), node("b")], [other_pod("a", 8, phase="Pending", pinned=True)])
    assert snap.nodes["a"].free_gpus == 0
    assert isinstance(place_gang(req(2), snap), Refusal)


def test_terminal_pods_free_their_gpus():
    snap = snapshot([node("a")], [other_pod("a", 8, phase="Succeeded")])
    assert snap.nodes["a"].free_gpus == 8


def test_best_fit_prefers_fuller_nodes():
    snap = snapshot([node("big", gpus=8), node("small", gpus=8)], [other_pod("small", 4)])
    result = place_gang(req(1, gpus=4), snap)
    assert result.nodes == ("small",)


def test_fixed_ranks_are_kept():
    snap = snapshot([node("a"), node("b"), node("c")], [])
    result = place_gang(req(3, fixed={1: "c"}), snap)
    assert result.nodes[1] == "c" and len(set(result.nodes)) == 3
