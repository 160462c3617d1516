"""Fake GPU node manifests (pure; no cluster needed)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from railtrain.cli.controlplane.nodes import (
    GPU_RESOURCE,
    LABEL_BLOCK,
    LABEL_RACK,
    gpu_node,
    node_schedulable,
    ordinal_ip,
)


@pytest.mark.parametrize(
    ("index", "rack", "block"),
    [(0, "rack-0", "block-0"), (3, "rack-0", "block-0"), (4, "rack-1", "block-0"), (8, "rack-2", "block-1")],
)
def test_topology_labels_follow_the_index(index, rack, block):
    labels = gpu_node("n", index, nodes_per_rack=4, racks_per_block=2)["metadata"]["labels"]
    assert (labels[LABEL_RACK], labels[LABEL_BLOCK]) == (rack, block)


def test_capacity_equals_allocatable_and_labels_override_defaults():
    node = gpu_node("n-0", 0, gpus=4, labels={LABEL_RACK: "r7"}, internal_ip="10.64.0.1")
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert node["status"]["capacity"][GPU_RESOURCE] == "4"
    assert node["metadata"]["labels"][LABEL_RACK] == "r7"
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "10.64.0.1"}


@pytest.mark.parametrize("kwargs", [{"gpus": -1}, {"nodes_per_rack": 0}, {"racks_per_block": 0}])
def test_bad_shapes_are_rejected(kwargs):
    with pytest.raises(ValueError):
        gpu_node("n", 0, **kwargs)


def test_ordinal_ips_are_distinct():
    assert len({ordinal_ip(i) for i in range(70_000)}) == 70_000


def _node(ready: str, taints: list[str]) -> NS:
    return NS(
        status=NS(conditions=[NS(type="Ready", status=ready)]),
        spec=NS(taints=[NS(key=k) for k in taints]),
    )


@pytest.mark.parametrize(
    ("ready", "taints", "expected"),
    [
        ("True", [], True),
        ("False", [], False),
        ("True", ["node.kubernetes.io/not-ready"], False),
        ("True", ["example.com/other"], True),
    ],
)
def test_node_schedulable(ready, taints, expected):
    assert node_schedulable(_node(ready, taints)) is expected
