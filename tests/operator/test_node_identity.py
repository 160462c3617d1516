"""A name is not an identity (issue 26, item 3; pure): a Node deleted and created again under the same name is a
lost node, told by the uid recorded on the rank's pod at placement, not by the name alone."""

from __future__ import annotations

from datetime import datetime, timezone

from railtrain.crds import fabric
from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find
from railtrain.operator.scheduling.placement import Placement

from .builders import gang, job_obj, node

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
RELEASED = "2026-11-29T11:00:00Z"
NODE_UID = "railtrain.dev/node-uid"  # written out: the test reads the pod as the API server stores it


def running():
    return {
        "phase": "Running", "startTime": RELEASED, "admittedNodes": 2,
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": RELEASED},
            {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "", "lastTransitionTime": RELEASED},
        ],
    }


def with_uid(n, uid):
    n["metadata"]["uid"] = uid
    return n


def placed_gang(obj, uids):
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    for p, uid in zip(pods, uids):
        p["metadata"].setdefault("annotations", {})[NODE_UID] = uid
    return pods


def test_a_node_created_again_under_the_same_name_is_lost_and_the_gang_restarts():
    obj = job_obj(nodes=2, status=running())
    pods = placed_gang(obj, ["uid-a-1", "uid-b-1"])
    p = planner.plan(obj, pods, True, NOW, nodes=[with_uid(node("a"), "uid-a-2"), with_uid(node("b"), "uid-b-1")])
    scheduled = find(p.status["conditions"], "Scheduled")
    assert p.status["phase"] == "Restarting" and scheduled["reason"] == "NodeLost"
    assert "node a: the Node was deleted and created again under the same name (uid uid-a-1" in scheduled["message"]
    assert p.force_delete_pods == ["llm-0"]  # only the pod on the re-created node: its kubelet never knew it


def test_the_same_node_object_is_not_lost():
    obj = job_obj(nodes=2, status=running())
    pods = placed_gang(obj, ["uid-a-1", "uid-b-1"])
    p = planner.plan(obj, pods, True, NOW, nodes=[with_uid(node("a"), "uid-a-1"), with_uid(node("b"), "uid-b-1")])
    assert p.status["phase"] == "Running" and not p.force_delete_pods and not p.delete_pods


def test_a_pod_without_the_record_is_judged_by_the_name_alone():
    obj = job_obj(nodes=2, status=running())
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])  # placed by an operator that did not record uids
    p = planner.plan(obj, pods, True, NOW, nodes=[with_uid(node("a"), "uid-a-2"), with_uid(node("b"), "uid-b-1")])
    assert p.status["phase"] == "Running"


def test_an_admitted_gang_records_the_uid_of_each_node_on_its_pods():
    from railtrain.operator.scheduling.placement import with_node_values

    obj = job_obj(nodes=2, status={})
    nodes = {"a": with_uid(node("a"), "uid-a"), "b": with_uid(node("b"), "uid-b")}
    placement = with_node_values(Placement(("b", "a")), None, nodes)
    p = planner.plan(obj, [], None, NOW, placement)
    created = {pod["metadata"]["name"]: pod["metadata"]["annotations"].get(NODE_UID) for pod in p.create_pods}
    assert created == {"llm-0": "uid-b", "llm-1": "uid-a"}


def test_the_record_comes_with_the_fabric_values():
    from railtrain.operator.scheduling.placement import with_node_values

    n = with_uid(node("a"), "uid-a")
    n["metadata"]["annotations"] = {fabric.NODE_HCAS: "mlx5_0"}
    placed = with_node_values(Placement(("a",)), fabric.PROFILES["infiniband"], {"a": n})
    assert placed.annotations == ({NODE_UID: "uid-a", "railtrain.dev/fabric-nccl-ib-hca": "=mlx5_0"},)
