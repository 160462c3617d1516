"""Topology levels: presets, flags and environment (pure)."""

import pytest

from railtrain.operator.scheduling.topology import DEFAULT_LEVELS, ENV_LEVELS, ENV_PRESET, PRESETS, level_name, level_value, parse_levels, resolve_levels


def test_default_is_railtrain_block_rack_hostname():
    assert DEFAULT_LEVELS == ("railtrain.dev/block", "railtrain.dev/rack", "kubernetes.io/hostname")
    assert resolve_levels() == DEFAULT_LEVELS


@pytest.mark.parametrize(
    "preset,first",
    [
        ("gke", "cloud.google.com/gce-topology-block"),
        ("aws", "topology.k8s.aws/network-node-layer-1"),
        ("oci", "oci.oraclecloud.com/host.network_block_id"),
        ("nvidia", "network.topology.nvidia.com/core"),
    ],
)
def test_presets_are_widest_first_and_end_with_hostname(preset, first):
    levels = resolve_levels(preset)
    assert levels[0] == first and levels[-1] == "kubernetes.io/hostname"
    assert parse_levels(",".join(levels)) == levels  # every preset is a valid --topology-levels


def test_precedence_flags_then_environment():
    env = {ENV_PRESET: "gke", ENV_LEVELS: "a.example/x,kubernetes.io/hostname"}
    assert resolve_levels("aws", "b.example/y", env) == ("b.example/y",)
    assert resolve_levels("aws", None, env) == PRESETS["aws"]
    assert resolve_levels(None, None, env) == ("a.example/x", "kubernetes.io/hostname")
    assert resolve_levels(None, None, {ENV_PRESET: "oci"}) == PRESETS["oci"]


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: resolve_levels("azure"), "unknown preset 'azure'"),
        (lambda: parse_levels(" , "), "at least one node label key"),
        (lambda: parse_levels("rack name"), "'rack name' is not a valid node label key"),
        (lambda: parse_levels("a/b,a/b"), "listed twice"),
    ],
)
def test_bad_configuration_names_the_flag(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value) and "--topology-" in str(err.value)


def test_alternatives_take_the_first_label_present():
    level = "nvidia.com/gpu.clique|network.topology.nvidia.com/accelerator"
    assert level_value({"network.topology.nvidia.com/accelerator": "nvl1"}, level) == "nvl1"
    assert level_value({"nvidia.com/gpu.clique": "c.7", "network.topology.nvidia.com/accelerator": "nvl1"}, level) == "c.7"
    assert level_value({}, level) is None
    assert level_name(level) == "gpu.clique" and level_name("railtrain.dev/rack") == "rack"
