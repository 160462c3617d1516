"""A node's HCA list reaches its rank or is refused aloud (issue 26, item 7; pure): NCCL's own syntax passes through
to the rank's pod, and a list the operator cannot use becomes a Warning Event naming the node and the value."""

from __future__ import annotations

from datetime import datetime, timezone

from railtrain.crds import fabric
from railtrain.operator.job import planner
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.scheduling.placement import Placement

from .builders import job_obj, node

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
HCA = "railtrain.dev/fabric-nccl-ib-hca"


def hca_node(name, value):
    n = node(name)
    n["metadata"]["annotations"] = {fabric.NODE_HCAS: value}
    return n


def admitted(values):
    from railtrain.operator.scheduling.placement import with_node_values  # what the admission pass applies to its placements

    nodes = {name: hca_node(name, value) for name, value in values.items()}
    placement = with_node_values(Placement(tuple(values)), fabric.PROFILES["infiniband"], nodes)
    return planner.plan(job_obj(nodes=len(values), status={}), [], None, NOW, placement, settings=PlanSettings(fabric=fabric.PROFILES["infiniband"]))


def test_nccl_syntax_on_the_node_reaches_the_rank_as_written():
    p = admitted({"a": "^mlx5_4,mlx5_5", "b": "=mlx5_0,mlx5_1"})
    assert [pod["metadata"]["annotations"].get(HCA) for pod in p.create_pods] == ["^mlx5_4,mlx5_5", "=mlx5_0,mlx5_1"]
    assert not [e for e in p.events if e[1] == "FabricNodeValueInvalid"]


def test_a_list_the_operator_cannot_use_is_a_warning_event_naming_the_node_and_the_value():
    p = admitted({"a": "mlx5_0;mlx5_1", "b": "mlx5_0"})
    assert [pod["metadata"]["annotations"].get(HCA) for pod in p.create_pods] == [None, "=mlx5_0"]
    warnings = [e for e in p.events if e[1] == "FabricNodeValueInvalid"]
    assert len(warnings) == 1 and warnings[0][0] == "Warning"
    assert "node a: annotation railtrain.dev/hcas='mlx5_0;mlx5_1' is not used" in warnings[0][2]
