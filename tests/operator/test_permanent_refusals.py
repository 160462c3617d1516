"""Waiting for what can never happen (issue 26, item 6; pure): the admission and placement code tells a refusal that
can never be cured on this cluster as it is (permanent: it says so, with the fix) from one that waits for capacity
others hold (it names them), and the nvidia preset places an NVLink gang on nodes without Topograph labels."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from railtrain.crds import contract
from railtrain.operator.scheduling import queue
from railtrain.operator.job import planner
from railtrain.operator.scheduling.snapshot import snapshot
from railtrain.operator.job.conditions import find
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.topology import PRESETS

from .builders import gang, job_obj, node, other_pod

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
CLIQUE = "nvidia.com/gpu.clique"


def nvidia(nodes, pods=()):
    return snapshot(nodes, list(pods), levels=PRESETS["nvidia"])


def test_the_nvidia_preset_places_an_nvlink_gang_on_nodes_with_only_the_clique_label():
    """The report: two free nodes share the clique, and the job waited forever with "the most any gpu.clique offers now is 2"."""
    snap = nvidia([node("a", labels={CLIQUE: "uuid.1"}), node("b", labels={CLIQUE: "uuid.1"}), node("c", labels={CLIQUE: "uuid.2"})])
    result = place_gang(GangRequest("team/j", 2, 8, nvlink=True), snap)
    assert isinstance(result, Placement), result
    assert sorted(result.nodes) == ["a", "b"] and result.summary["domain"] == "uuid.1"
    assert result.summary["domainLevel"] == PRESETS["nvidia"][3]


def test_policy_required_clique_level_groups_the_same_nodes():
    snap = nvidia([node("a", labels={CLIQUE: "uuid.1"}), node("b", labels={CLIQUE: "uuid.1"})])
    result = place_gang(GangRequest("team/j", 2, 8, policy="required", level=PRESETS["nvidia"][3]), snap)
    assert isinstance(result, Placement), result


def test_nodes_without_any_clique_label_never_group_and_the_refusal_says_it_is_permanent():
    snap = nvidia([node("a"), node("b")])
    result = place_gang(GangRequest("team/j", 2, 8, nvlink=True), snap)
    assert isinstance(result, Refusal) and result.permanent and contract.NEVER_FITS in result.message
    assert "label the 2 eligible nodes that carry no nvidia.com/gpu.clique" in result.message


def test_a_required_rack_across_two_known_blocks_stays_apart():
    """The path still keeps two racks of the same name in two different blocks apart."""
    levels = PRESETS["railtrain"]
    snap = snapshot([node("a", labels={levels[0]: "b1", levels[1]: "r1"}), node("b", labels={levels[0]: "b2", levels[1]: "r1"})], [], levels=levels)
    result = place_gang(GangRequest("team/j", 2, 8, policy="required", level=levels[1]), snap)
    assert isinstance(result, Refusal) and result.reason == "TopologyUnsatisfiable" and result.permanent


@pytest.mark.parametrize(
    "request_,reason",
    [
        (GangRequest("team/j", 1, 8, policy="required", level="example.com/pod"), "UnknownTopologyLevel"),
        (GangRequest("team/j", 1, 8, nvlink=True), "NoNVLinkDomainLevel"),
        (GangRequest("team/j", 3, 8), "Unschedulable"),
        (GangRequest("team/j", 1, 16), "Unschedulable"),
    ],
)
def test_every_permanent_refusal_says_so_and_names_the_fix(request_, reason):
    result = place_gang(request_, snapshot([node("a"), node("b")], []))
    assert isinstance(result, Refusal) and result.reason == reason
    assert result.permanent and contract.NEVER_FITS in result.message, result.message
    fix = result.message.split(contract.NEVER_FITS, 1)[1]
    assert any(word in fix for word in ("use one of them", "--topology-preset nvidia", "ask for fewer nodes")), fix


def test_a_waiting_refusal_is_not_permanent_and_names_the_jobs_that_hold_the_capacity():
    held = [other_pod("a", 8), other_pod("b", 8)]
    for pod, job in zip(held, ("team/first", "lab/second")):
        pod["metadata"] |= {"namespace": job.split("/")[0], "labels": {contract.LABEL_JOB_NAME: job.split("/")[1]}}
    result = place_gang(GangRequest("team/j", 2, 8), snapshot([node("a"), node("b")], held))
    assert isinstance(result, Refusal) and not result.permanent and contract.NEVER_FITS not in result.message
    assert result.message.endswith("It waits until enough nodes free up; the capacity is held by lab/second, team/first")


def _job_pod(node_name, gpus, job, pinned=False):
    """A pod of TrainingJob ``job`` (``namespace/name``) taking ``gpus`` GPUs on ``node_name``."""
    pod = other_pod(node_name, gpus, pinned=pinned)
    ns, name = job.split("/")
    pod["metadata"] = {"name": f"{name}-{node_name}", "namespace": ns, "labels": {contract.LABEL_JOB_NAME: name}}
    return pod


def test_capacity_promised_earlier_in_the_pass_is_named_as_the_pods_that_later_hold_it():
    """The churn seen on the control plane: "small" (same creation second as "wide", so ahead of it by name) is
    placed in the pass that refuses "wide"; the pass after, small's pods exist. The refusal must read the same in
    both, or each new message is a new status write and Event with nothing changed."""
    halves = [_job_pod(n, 4, "team/halves") for n in ("a", "b", "c")]
    nodes = [node("a"), node("b"), node("c")]
    small = GangRequest("team/small", 1, 4, created="2026-11-29T12:00:00Z")
    wide = GangRequest("team/wide", 1, 8, created="2026-11-29T12:00:00Z")
    promised = queue.schedule([small, wide], snapshot(nodes, halves))
    placed = promised[0].result
    assert promised[0].job == "team/small" and isinstance(placed, Placement), promised
    (created,) = queue.schedule([wide], snapshot(nodes, halves + [_job_pod(placed.nodes[0], 4, "team/small", pinned=True)]))
    assert isinstance(promised[1].result, Refusal) and isinstance(created.result, Refusal)
    assert promised[1].result.message == created.result.message
    assert created.result.message.endswith("the capacity is held by team/halves, team/small"), created.result.message


def test_capacity_held_for_a_restart_is_named_as_the_pods_that_later_hold_it():
    """A restarting gang's ``status.hold`` and the pods it is admitted with name the same holder; a job never sees
    itself named in its own view of its hold."""
    nodes, foreign = [node("a"), node("b")], other_pod("b", 8) | {"metadata": {"name": "x-b", "namespace": "lab"}}
    wide = GangRequest("team/wide", 2, 8)
    (held,) = queue.schedule([wide], snapshot(nodes, [foreign]), {"team/r": queue.Hold(("a",), 8, {})})
    (created,) = queue.schedule([wide], snapshot(nodes, [foreign, _job_pod("a", 8, "team/r")]))
    assert isinstance(held.result, Refusal) and held.result.message == created.result.message
    assert held.result.message.endswith("the capacity is held by pod lab/x-b, team/r"), held.result.message
    own = queue.schedule([GangRequest("team/r", 2, 8)], snapshot(nodes, [foreign]), {"team/r": queue.Hold(("a",), 8, {})})
    assert own[0].result.message.endswith("the capacity is held by pod lab/x-b"), own[0].result.message


def test_a_gang_whose_image_can_never_start_says_so_at_its_gang_timeout():
    released = "2026-11-29T11:00:00Z"
    obj = job_obj(nodes=2, status={"phase": "Pending", "admittedNodes": 2, "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": released}]})
    pods = gang(obj, phase="Pending", gated=False, nodes=["a", "b"])
    for pod in pods:
        pod["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {
            "reason": "InvalidImageName", "message": 'Failed to apply default image tag "Trainer:latest": invalid reference format'}}}]
    p = planner.plan(obj, pods, True, NOW)
    scheduled = find(p.status["conditions"], "Scheduled")
    assert scheduled["reason"] == "GangTimeout" and "pod llm-0: container trainer InvalidImageName: Failed to apply default image tag" in scheduled["message"]
    assert "It can never start as the job is written" in scheduled["message"] and "fix spec.image" in scheduled["message"]


def test_a_gang_timeout_names_a_cause_that_may_pass_without_calling_it_permanent():
    released = "2026-11-29T11:00:00Z"
    obj = job_obj(nodes=1, status={"phase": "Pending", "admittedNodes": 1, "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": released}]})
    (pod,) = gang(obj, phase="Pending", gated=False, nodes=["a"])
    pod["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}}}]
    scheduled = find(planner.plan(obj, [pod], True, NOW).status["conditions"], "Scheduled")
    assert 'container trainer ImagePullBackOff: Back-off pulling image "x"' in scheduled["message"] and "never" not in scheduled["message"]
