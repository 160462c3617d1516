"""NVLink domains across nodes (pure): the gang inside one clique or refused, its ComputeDomain, and the pods' claim."""

from __future__ import annotations

from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import nvlink
from railtrain.operator.job import planner
from railtrain.operator.job import render
from railtrain.operator.scheduling.snapshot import snapshot
from railtrain.crds.reasons import NO_NVLINK_DOMAIN_LEVEL as NO_NVLINK_LEVEL
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.topology import DEFAULT_LEVELS, PRESETS, nvlink_level

from .builders import job_obj, node

CLIQUE = "nvidia.com/gpu.clique"
LEVELS = PRESETS["nvidia"]


def gb200(name, clique, leaf="leaf-0"):
    """A 4-GPU GB200 node in NVLink domain ``clique`` (as the GPU operator labels it)."""
    tiers = {f"network.topology.nvidia.com/{t}": f"{t}-0" for t in ("core", "spine")}  # Topograph labels every tier
    return node(name, gpus=4, labels={CLIQUE: clique, "network.topology.nvidia.com/leaf": leaf, **tiers})


def nodes():
    # clique c1 has 3 nodes, c2 has 2; all on one leaf switch
    return [gb200("a1", "c1"), gb200("a2", "c1"), gb200("a3", "c1"), gb200("b1", "c2"), gb200("b2", "c2")]


def req(n, **kw):
    return GangRequest(job="ns/j", nodes=n, gpus_per_node=4, procs_per_node=4, nvlink=True, **kw)


def test_the_nvidia_preset_marks_the_clique_level():
    assert nvlink_level(LEVELS) == f"{CLIQUE}|network.topology.nvidia.com/accelerator"
    assert nvlink_level(DEFAULT_LEVELS) is None


def test_the_gang_is_placed_inside_one_clique():
    result = place_gang(req(3), snapshot(nodes(), [], levels=LEVELS))
    assert isinstance(result, Placement) and set(result.nodes) == {"a1", "a2", "a3"}, result


def test_tp_groups_of_whole_nodes_keep_data_parallel_peers_on_one_rail():
    # tensor 8 over 2 nodes of 4: DP peers are 8 ranks apart, the same local rank, so the same rail index
    result = place_gang(req(2, dp_stride=8), snapshot(nodes(), [], levels=LEVELS))
    assert isinstance(result, Placement) and result.summary["railAligned"] is True, result
    assert len({result.domains[r][LEVELS[3]] for r in range(2)}) == 1  # one clique


def test_a_gang_larger_than_every_clique_is_refused_not_spread():
    result = place_gang(req(4), snapshot(nodes(), [], levels=LEVELS))
    assert isinstance(result, Refusal) and result.reason == "TopologyUnsatisfiable", result
    assert "(spec.topology.nvlinkDomain)" in result.message and "the largest gpu.clique has 3 eligible nodes" in result.message
    assert "policy preferred" not in result.message
    # the same gang without nvlinkDomain spans cliques
    spread = place_gang(GangRequest(job="ns/j", nodes=4, gpus_per_node=4, procs_per_node=4), snapshot(nodes(), [], levels=LEVELS))
    assert isinstance(spread, Placement)


def test_an_operator_without_an_nvlink_level_refuses_with_a_sentence():
    result = place_gang(req(2), snapshot(nodes(), [], levels=DEFAULT_LEVELS))
    assert isinstance(result, Refusal) and result.reason == NO_NVLINK_LEVEL
    assert result.message.startswith("spec.topology.nvlinkDomain needs the gang inside one NVLink domain, and none of the operator's topology levels")
    assert "--topology-preset nvidia" in result.message


def body(**topology):
    return job_obj("tp", nodes=2, gpus=4, procs=4, parallelism={"tensor": 8}, topology={"nvlinkDomain": True, **topology})


def parse(obj):
    return TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": obj["metadata"]["name"]}})


def test_pods_claim_the_imex_channel_and_the_trainer_is_told():
    pod = render.render_pod(parse(body()), "team", "uid-tp", 0)
    assert pod["spec"]["resourceClaims"] == [{"name": "imex-channel", "resourceClaimTemplateName": "tp-imex-channel"}]
    trainer = pod["spec"]["containers"][0]
    assert trainer["resources"]["claims"] == [{"name": "imex-channel"}]
    assert {"name": contract.ENV_NVLINK_DOMAIN, "value": "1"} in trainer["env"]
    # a template's own resources keep the claim
    with_rdma = body()
    with_rdma["spec"]["template"] = {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"rdma/ib": "1"}}}]}}
    merged = render.render_pod(parse(with_rdma), "team", "uid-tp", 0)["spec"]["containers"][0]["resources"]
    assert merged["claims"] == [{"name": "imex-channel"}] and merged["limits"]["rdma/ib"] == "1"
    plain = render.render_pod(parse(job_obj("dp", nodes=2, gpus=4, procs=4)), "team", "uid-dp", 0)
    assert "resourceClaims" not in plain["spec"] and "claims" not in plain["spec"]["containers"][0]["resources"]


def test_the_first_pass_creates_the_compute_domain_owned_by_the_job():
    from datetime import datetime, timezone

    obj = body()
    from railtrain.operator.scheduling.placement import Placement

    plan = planner.plan(obj, [], None, datetime(2026, 1, 1, tzinfo=timezone.utc), Placement(("a", "b")))  # the pass placed the gang
    (cd,) = plan.create_objects
    assert cd["apiVersion"] == "resource.nvidia.com/v1beta1" and cd["kind"] == "ComputeDomain"
    assert cd["metadata"]["name"] == "tp-nvlink" and cd["metadata"]["namespace"] == "team"
    assert cd["spec"] == {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "tp-imex-channel"}}}
    (owner,) = cd["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-tp" and owner["kind"] == "TrainingJob" and owner["controller"] is True
    assert len(plan.create_pods) == 2
    assert planner.plan(job_obj("dp"), [], None, datetime(2026, 1, 1, tzinfo=timezone.utc), Placement(("a", "b"))).create_objects == []


def test_the_admission_request_asks_for_one_nvlink_domain():
    from railtrain.operator.job.request import admission_request
    from tests.operator.builders import gang

    obj = body()
    request, ready = admission_request(obj, gang(obj))
    assert ready and request.nvlink is True
    plain = job_obj("dp", nodes=2, gpus=4, procs=4)
    assert admission_request(plain, gang(plain))[0].nvlink is False


def test_names():
    assert nvlink.domain_name("j") == "j-nvlink" and nvlink.claim_template("j") == "j-imex-channel"
