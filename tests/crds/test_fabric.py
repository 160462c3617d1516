"""Fabric profiles (pure): each profile's variables, user overrides, per-node values, the RDMA check, what a rank got."""

from __future__ import annotations

import pytest

from railtrain.crds import fabric
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render


def spec(nodes=2, gpus=8, env=None, template=None, **extra):
    body = {"image": "img:1", "nodes": nodes, "procsPerNode": 8 if gpus else 1, "resources": {"gpus": gpus}, **extra}
    if env:
        body["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if template:
        body["template"] = template
    return TrainingJob.model_validate({"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j"}, "spec": body}).spec


def literal(items):
    return {i["name"]: i["value"] for i in items if "value" in i}


# Every profile's literal variables, as docs/fabric.md lists them with their sources.
EXPECTED = {
    "railtrain": {"NCCL_CROSS_NIC": "0", "NCCL_SOCKET_IFNAME": "=eth0"},
    "gke": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_CROSS_NIC": "0"},
    "aws": {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "=eth0"},
    "oci": {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "41", "NCCL_IB_SL": "0",
        "NCCL_IB_TIMEOUT": "22", "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
    },
    "infiniband": {"NCCL_CROSS_NIC": "0", "NCCL_SOCKET_IFNAME": "=eth0"},
    "none": {},
}
PER_NODE = {"railtrain": ["NCCL_IB_HCA"], "gke": [], "aws": [], "oci": ["NCCL_IB_HCA"], "infiniband": ["NCCL_IB_HCA"], "none": []}


def test_every_profile_is_listed():
    assert set(fabric.PROFILES) == set(EXPECTED) and fabric.DEFAULT_PROFILE == "railtrain"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_variables(name):
    items = fabric.container_env(fabric.PROFILES[name], spec())
    assert literal(items) == EXPECTED[name]
    refs = [i for i in items if "valueFrom" in i]
    assert [i["name"] for i in refs] == PER_NODE[name]
    for i in refs:
        assert i["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.annotations['railtrain.dev/fabric-nccl-ib-hca']"}}


def test_no_profile_renders_nothing():
    assert fabric.container_env(None, spec()) == []


def test_user_env_and_template_env_win():
    template = {"spec": {"containers": [{"name": "trainer", "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}]}]}}
    items = fabric.container_env(fabric.PROFILES["oci"], spec(env={"NCCL_IB_TC": "106"}, template=template))
    names = [i["name"] for i in items]
    assert "NCCL_IB_TC" not in names and "NCCL_IB_HCA" not in names
    assert literal(items)["NCCL_IB_GID_INDEX"] == "3"


def test_host_network_drops_the_pod_interface_name_except_where_the_vendor_keeps_it():
    host = {"spec": {"hostNetwork": True}}
    assert "NCCL_SOCKET_IFNAME" not in literal(fabric.container_env(fabric.PROFILES["infiniband"], spec(template=host)))
    # OCI's host-network NCCL tests keep NCCL_SOCKET_IFNAME=eth0: the host's primary interface is eth0 there.
    assert literal(fabric.container_env(fabric.PROFILES["oci"], spec(template=host)))["NCCL_SOCKET_IFNAME"] == "eth0"


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("mlx5_0,mlx5_1,mlx5_3", "=mlx5_0,mlx5_1,mlx5_3"),
        (" mlx5_0 , mlx5_1:1 ", "=mlx5_0,mlx5_1:1"),
        ("", None),
        (None, None),
        ("mlx5_0;rm -rf", None),
        ("mlx5_0,,", "=mlx5_0"),
    ],
)
def test_node_value(raw, expected):
    assert fabric.node_value(raw, "=") == expected


def test_rank_annotations_read_the_node_annotation():
    node = {"metadata": {"name": "n", "annotations": {fabric.NODE_HCAS: "mlx5_0,mlx5_1"}}}
    assert fabric.rank_annotations(fabric.PROFILES["infiniband"], node) == {"railtrain.dev/fabric-nccl-ib-hca": "=mlx5_0,mlx5_1"}
    assert fabric.rank_annotations(fabric.PROFILES["aws"], node) == {}
    assert fabric.rank_annotations(fabric.PROFILES["infiniband"], {"metadata": {"name": "n"}}) == {}
    assert fabric.rank_annotations(None, node) == {}


DEVICES = {
    "aws": {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"vpc.amazonaws.com/efa": 32}}}]}},
    "gke": {"metadata": {"annotations": {"networking.gke.io/interfaces": "[]"}}},
    "oci": {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/rdma-vf": 16}}}]}},
    "infiniband": {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"rdma/rdma_shared_device_a": 1}, "limits": {"rdma/rdma_shared_device_a": 1}}}]}},
}


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_device_check_speaks_when_the_profile_needs_one_and_the_job_has_none(name):
    profile = fabric.PROFILES[name]
    problem = fabric.device_problem(profile, spec())
    assert problem is not None and problem.startswith(f"spec.template: the operator's fabric profile {name} expects ")
    assert fabric.device_problem(profile, spec(template=DEVICES[name])) is None


def test_device_check_is_quiet_where_none_is_needed():
    assert fabric.device_problem(fabric.PROFILES["railtrain"], spec()) is None
    assert fabric.device_problem(fabric.PROFILES["aws"], spec(nodes=1)) is None  # one node: NVLink and shared memory
    assert fabric.device_problem(fabric.PROFILES["aws"], spec(gpus=0)) is None
    assert fabric.device_problem(fabric.PROFILES["infiniband"], spec(template={"spec": {"hostNetwork": True}})) is None


def test_the_sentence_names_the_device_and_the_ways():
    text = fabric.device_problem(fabric.PROFILES["aws"], spec())
    assert text == (
        "spec.template: the operator's fabric profile aws expects EFA devices for a multi-node GPU job "
        "(resource vpc.amazonaws.com/efa in the trainer container), and this job requests none, "
        "so NCCL will fall back to slower transports such as TCP sockets"
    )


def test_resolve_profile():
    assert fabric.resolve_profile(None, {}).name == "railtrain"
    assert fabric.resolve_profile(None, {fabric.ENV_PROFILE: "aws"}).name == "aws"
    assert fabric.resolve_profile("gke", {fabric.ENV_PROFILE: "aws"}).name == "gke"
    with pytest.raises(ValueError, match=r"^--fabric-profile: unknown profile 'azure'; choose one of railtrain, gke, aws, oci, infiniband, none$"):
        fabric.resolve_profile("azure", {})


def test_rank_settings_of_a_rendered_pod_after_release():
    template = {"spec": {"containers": [{"name": "trainer", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}}
    job = TrainingJob.model_validate(
        {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j"},
         "spec": {"image": "i", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8}, "template": template}}
    )
    pod = render.render_pod(job, "ns", "uid", 0, profile=fabric.PROFILES["infiniband"])
    assert pod["metadata"]["annotations"][fabric.ANNOTATION_PROFILE] == "infiniband"
    assert fabric.rank_settings(pod) == {"NCCL_CROSS_NIC": "0", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "", "NCCL_DEBUG": "INFO"}
    pod["metadata"]["annotations"]["railtrain.dev/fabric-nccl-ib-hca"] = "=mlx5_0"
    assert fabric.rank_settings(pod)["NCCL_IB_HCA"] == "=mlx5_0"
    assert "RAILTRAIN_JOB_NAME" not in fabric.rank_settings(pod)


def test_rank_settings_name_other_sources():
    pod = {"spec": {"containers": [{"name": "trainer", "env": [{"name": "NCCL_IB_HCA", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}]}}
    assert fabric.rank_settings(pod) == {"NCCL_IB_HCA": "<from configMapKeyRef>"}
    assert fabric.rank_settings({}) == {}


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("=mlx5_0,mlx5_1", "=mlx5_0,mlx5_1"),  # NCCL's exact-match syntax, kept as written
        ("^mlx5_4,mlx5_5", "^mlx5_4,mlx5_5"),  # NCCL's exclusion: an exclusion stays an exclusion
        ("^=mlx5_4", "^=mlx5_4"),
        (" = mlx5_0 , mlx5_1:1", "=mlx5_0,mlx5_1:1"),
    ],
)
def test_node_value_accepts_nccl_syntax(raw, expected):
    """Issue 26, item 7: a node's HCA list in NCCL's own syntax was dropped and NCCL used every device."""
    assert fabric.node_value(raw, "=") == expected


@pytest.mark.parametrize("raw,why", [("mlx5_0;rm -rf", "'mlx5_0;rm -rf' is not a device name"), ("^", "it lists no device"), ("=,", "it lists no device")])
def test_a_malformed_hca_list_is_reported_naming_the_node_and_the_value(raw, why):
    node = {"metadata": {"name": "gpu-17", "annotations": {fabric.NODE_HCAS: raw}}}
    (problem,) = fabric.node_value_problems(fabric.PROFILES["infiniband"], node)
    assert problem.startswith(f"node gpu-17: annotation railtrain.dev/hcas={raw!r} is not used ({why}")
    assert "NCCL_IB_HCA is left unset" in problem
    assert fabric.rank_annotations(fabric.PROFILES["infiniband"], node) == {}


def test_a_good_hca_list_reports_nothing():
    node = {"metadata": {"name": "n", "annotations": {fabric.NODE_HCAS: "^mlx5_4"}}}
    assert fabric.node_value_problems(fabric.PROFILES["infiniband"], node) == []
    assert fabric.node_value_problems(fabric.PROFILES["infiniband"], {"metadata": {"name": "n"}}) == []
