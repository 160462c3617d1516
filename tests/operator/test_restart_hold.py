"""A restarting gang keeps its nodes (pure): ``status.hold`` written at the restart, counted by the admission
pass for every other job, given back to the gang rank by rank (docs/scheduling.md, "Restarts keep their nodes")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from railtrain.operator.scheduling import queue
from railtrain.operator.scheduling import snapshot as cluster
from railtrain.operator.job import planner
from railtrain.operator.job.records import hold_record
from railtrain.operator.job.request import hold_of
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang

from .builders import RACK, fabric, fail, gang, job_obj, node, other_pod

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def restarted(nodes, **spec):
    """A running gang on ``nodes`` whose rank 0 failed, and the plan that restarts it."""
    obj = job_obj(nodes=len(nodes), **spec)
    pods = gang(obj, phase="Running", gated=False, nodes=nodes)
    fail(pods[0], code=1, message="NCCL timeout")
    return obj, planner.plan(obj, pods, True, NOW)


def test_a_restart_holds_the_failed_gangs_node_of_every_rank_until_backoff_plus_gang_timeout():
    obj, p = restarted(["a", "b", "c"], runPolicy={"gangTimeoutSeconds": 120})
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1
    assert p.status["hold"] == {"restarts": 1, "nodes": ["a", "b", "c"], "until": "2026-11-29T12:02:00Z"}  # first restart: no backoff
    after = obj | {"status": p.status}
    assert hold_record(after["status"], NOW + timedelta(seconds=119)) is not None
    assert hold_record(after["status"], NOW + timedelta(seconds=120)) is None  # lapsed: a gang that cannot come back frees them
    hold = hold_of(after, NOW)
    assert hold.nodes == ("a", "b", "c") and hold.gpus_per_node == 8


def test_quarantined_or_avoided_nodes_are_not_held():
    obj = job_obj(nodes=3)
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b", "c"])
    fail(pods[1], code=1, message='{"verdict": "hardware-suspect", "reason": "ParameterMismatch", "message": "bytes differ", "nodes": ["b"]}')
    p = planner.plan(obj, pods, True, NOW, nodes=[node(n) for n in "abc"])
    assert "b" in p.status["avoidNodes"]
    assert p.status["hold"]["nodes"] == ["a", "", "c"]


def test_a_hold_ends_when_the_gang_is_admitted_finished_or_suspended():
    obj, p = restarted(["a", "b"])
    status = p.status
    assert hold_record(status, NOW) is not None
    admitted = planner.plan(obj | {"status": status}, [], True, NOW, Placement(("a", "b")))
    assert admitted.status.get("hold") is None and admitted.status["admission"]["nodes"] == ["a", "b"]
    assert hold_record(status | {"phase": "Failed"}, NOW) is None
    assert hold_record(status | {"phase": "Suspended"}, NOW) is None
    assert hold_record(status | {"restarts": 2}, NOW) is None  # another gang's hold


def test_the_restarted_gang_asks_for_its_old_nodes_by_rank():
    obj, p = restarted(["a", "b"])
    request, ready = planner.admission_request(obj | {"status": p.status}, [], NOW)
    assert ready and request.prefer == ("a", "b")


def test_each_rank_gets_its_old_node_back_even_where_best_fit_would_choose_others():
    # rack r0: a0..a3, rack r1: b0..b3; a restarted 2-node gang ran on a1 and b2 (spanning racks).
    snap = cluster.snapshot(*fabric(blocks=1, racks=2, per_rack=4))
    fresh = place_gang(GangRequest("ns/j", 2, 8), snap)
    old = tuple(sorted(n for n in snap.nodes))[1], tuple(sorted(n for n in snap.nodes))[6]
    assert set(fresh.nodes) != set(old)
    back = place_gang(GangRequest("ns/j", 2, 8, prefer=(old[1], old[0])), snap)
    assert back.nodes == (old[1], old[0]) and "2 of 2 ranks back on the nodes they ran on" in back.explanation


def test_a_lost_node_is_replaced_next_to_the_kept_ones():
    snap = cluster.snapshot(*fabric(blocks=1, racks=2, per_rack=4))
    names = sorted(snap.nodes)
    rack = {n: snap.nodes[n].labels[RACK] for n in names}
    a = [n for n in names if rack[n] == rack[names[0]]]
    lost = a[1]
    snap = snap.excluding([lost], "NotReady")
    back = place_gang(GangRequest("ns/j", 3, 8, prefer=(a[0], lost, a[2])), snap)
    assert back.nodes[0] == a[0] and back.nodes[2] == a[2]
    assert back.nodes[1] != lost and rack[back.nodes[1]] == rack[a[0]]  # the new node in the same rack
    assert "2 of 3 ranks back" in back.explanation


def test_a_smaller_job_behind_does_not_get_held_nodes_and_the_holder_gets_them_back():
    nodes = [node(n) for n in ("a", "b", "c")]
    snap = cluster.snapshot(nodes, [])
    holds = {"ns/big": queue.Hold(("a", "b"), 8, {})}
    small = GangRequest("ns/small", 1, 8, created="2026-11-29T11:00:00Z")  # queued ahead of big
    big = GangRequest("ns/big", 2, 8, created="2026-11-29T11:30:00Z", prefer=("b", "a"))
    out = {d.job: d.result for d in queue.schedule([small, big], snap, holds)}
    assert out["ns/small"].nodes == ("c",)
    assert out["ns/big"].nodes == ("b", "a")
    alone = {d.job: d.result for d in queue.schedule([small, GangRequest("ns/s2", 1, 8, created="2026-11-29T11:01:00Z")], snap, holds)}
    assert alone["ns/small"].nodes == ("c",) and not isinstance(alone["ns/s2"], Placement)  # a and b stay held


def test_releasing_a_hold_on_an_overcommitted_node_never_shows_capacity_that_is_not_there():
    # A foreign pod took all of b's GPUs after the gang left it: b is not free for the holder either.
    snap = cluster.snapshot([node("a"), node("b")], [other_pod("b", 8)])
    held = snap.reserve(["a", "b"], 8)
    assert held.nodes["b"].free_gpus == -8
    mine = held.release(["a", "b"], 8)
    assert mine.nodes["a"].free_gpus == 8 and mine.nodes["b"].free_gpus == 0
    back = place_gang(GangRequest("ns/j", 1, 8, prefer=("b",)), mine)
    assert back.nodes == ("a",)


def test_a_holder_whose_old_pods_still_end_is_not_placed_elsewhere_too():
    obj, p = restarted(["a", "b"])
    old = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    for pod in old:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:01Z"
    request, ready = planner.admission_request(obj | {"status": p.status}, old, NOW)
    assert not ready and hold_of(obj | {"status": p.status}, NOW) is not None  # the pass leaves it out: the hold is its place


def test_a_rank_that_just_failed_keeps_its_node_until_the_job_has_decided():
    obj = job_obj(nodes=2, status={"phase": "Running", "restarts": 0})
    pods = gang(obj, phase="Running", gated=False, nodes=["a", "b"])
    fail(pods[0])
    ended = planner.ended_pods(obj, pods)
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in ended] == [("llm-0", "Running")]
    snap = cluster.snapshot([node("a"), node("b"), node("c")], [p for p in pods if p["status"]["phase"] == "Running"] + ended)
    assert place_gang(GangRequest("ns/other", 1, 8), snap).nodes == ("c",)  # not a, the failed rank's node
    assert planner.ended_pods(obj | {"status": {"phase": "Failed", "restarts": 0}}, pods) == []  # a finished job holds nothing
    assert planner.ended_pods(obj | {"status": {"phase": "Restarting", "restarts": 1}}, pods) == []  # an older gang's: the hold counts


def test_the_hold_is_in_placement_order_so_a_new_rotation_moves_each_rank_by_one():
    # The failed gang was admitted with rankShift 1: rank 0 ran on b, rank 1 on a (placement order a, b).
    obj = job_obj(nodes=2, status={"phase": "Running", "restarts": 0, "rankShift": 1})
    pods = gang(obj, phase="Running", gated=False, nodes=["b", "a"])
    fail(pods[0], code=1, message='{"verdict": "hang", "reason": "NoProgress", "message": "rank 0 stopped", "nodes": ["b"], "ranks": [0]}')
    p = planner.plan(obj, pods, True, NOW, nodes=[node(n) for n in "ab"])
    assert p.status["rankShift"] == 2 and p.status["hold"]["nodes"] == ["a", "b"]
    request, _ = planner.admission_request(obj | {"status": p.status}, [], NOW)
    fresh = planner.plan(obj | {"status": p.status}, [], True, NOW, place_gang(request, cluster.snapshot([node("a"), node("b")], [])))
    assert [pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] for pod in fresh.create_pods] == ["a", "b"]  # rank 0 moved off b


def test_a_job_kept_out_only_by_a_hold_is_told_which_restarting_gang_holds_the_nodes():
    snap = cluster.snapshot([node("a"), node("b")], [])
    out = queue.schedule([GangRequest("ns/small", 1, 8)], snap, {"ns/big": queue.Hold(("a", "b"), 8, {})})
    (d,) = out
    assert d.result.reason == queue.WAITING_FOR_RESTART and not d.result.warning
    assert d.result.message.endswith("held for restarting gangs until they are admitted again: ns/big")
