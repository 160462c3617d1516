"""The kwokctl configuration LocalCluster writes (pure; no cluster needed)."""

from __future__ import annotations

import yaml

from railtrain.cli.controlplane.kwokctl import KWOK_DEFAULT_STAGES, PORT_OPTIONS, kwokctl_config


def make_bin_dir(tmp_path):
    (tmp_path / "kwok-stages").mkdir()
    for name in KWOK_DEFAULT_STAGES:
        stage = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name.removesuffix(".yaml")}}
        (tmp_path / "kwok-stages" / name).write_text(yaml.safe_dump(stage))
    return tmp_path / "bin"


def test_kwok_default_stages_come_first_then_railtrain_stages(tmp_path):
    config, *stages = kwokctl_config(make_bin_dir(tmp_path), 3600)
    assert config["kind"] == "KwokctlConfiguration"
    assert [s["metadata"]["name"] for s in stages] == [
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-complete",
        "pod-delete",
        "railtrain-pod-succeeded",
        "railtrain-pod-failed",
        "railtrain-trainer-exited",
        "railtrain-node-not-ready",
        "railtrain-node-stays-not-ready",
        "railtrain-pod-evicted-for-its-limits",
        "railtrain-pod-refused",
    ]


def test_options_bind_loopback_with_distinct_ports_and_local_binaries(tmp_path):
    bin_dir = make_bin_dir(tmp_path)
    options = kwokctl_config(bin_dir, 3600)[0]["options"]
    assert options["runtime"] == "binary"
    assert options["bindAddress"] == "127.0.0.1"
    ports = [options[key] for key in PORT_OPTIONS]
    assert len(set(ports)) == len(PORT_OPTIONS) and all(1024 < p < 65536 for p in ports)
    assert options["kwokControllerBinary"] == str(bin_dir / "kwok")


def test_grace_period_is_divided_by_kwokctls_heartbeat_factor(tmp_path):
    options = kwokctl_config(make_bin_dir(tmp_path), 3600)[0]["options"]
    effective_ms = options["kubeControllerManagerNodeMonitorGracePeriodMilliseconds"] * options["heartbeatFactor"]
    assert effective_ms == 3600 * 1000


def test_railtrain_stages_use_the_published_label_and_annotation_names():
    from railtrain.cli.controlplane import ANNOTATION_KWOK_MESSAGE, LABEL_KWOK_EXIT
    from railtrain.cli.controlplane.kwokctl import RAILTRAIN_STAGES

    text = RAILTRAIN_STAGES.read_text()
    assert text.count(LABEL_KWOK_EXIT) >= 4 and text.count(ANNOTATION_KWOK_MESSAGE) >= 2


def test_node_not_ready_stages_outweigh_kwoks_node_stages_only_on_labelled_nodes():
    """kwok picks among the matching Stages with a positive weight; its own node Stages weigh 0."""
    from railtrain.cli.controlplane import LABEL_KWOK_NOT_READY
    from railtrain.cli.controlplane.kwokctl import RAILTRAIN_STAGES

    stages = {s["metadata"]["name"]: s["spec"] for s in yaml.safe_load_all(RAILTRAIN_STAGES.read_text()) if s}
    for name in ("railtrain-node-not-ready", "railtrain-node-stays-not-ready"):
        spec = stages[name]
        assert spec["resourceRef"]["kind"] == "Node" and spec["weight"] > 0
        assert spec["selector"]["matchLabels"] == {LABEL_KWOK_NOT_READY: "true"}
    assert "status: \"False\"" in stages["railtrain-node-not-ready"]["next"]["statusTemplate"]
    assert stages["railtrain-node-stays-not-ready"]["next"] == {}  # holds the node: no patch, no heartbeat
