"""kind tooling without Docker: the capability check, the cluster config, the base spec and the docker wrapper's flag rewriting."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from railtrain.cli.controlplane import kind

STATUS = "Name:\tpython3\nCapInh:\t0000000000000000\nCapBnd:\t{}\nCapAmb:\t0000000000000000\n"


@pytest.mark.parametrize("capbnd,lacks", [("000001ffffffffff", False), ("000001fffeffffff", True), ("0000000001000000", False)])
def test_cap_sys_resource_is_bit_24_of_the_bounding_set(capbnd, lacks):
    assert kind.lacks_cap_sys_resource(STATUS.format(capbnd)) is lacks


def test_no_bounding_set_line_means_nothing_is_missing():
    assert kind.lacks_cap_sys_resource("Name:\tx\n") is False


def test_workers_are_two_to_a_rack_and_two_racks_to_a_block():
    assert [kind.worker_labels(i) for i in (0, 1, 2, 4)] == [
        {"railtrain.dev/rack": "rack-0", "railtrain.dev/block": "block-0"},
        {"railtrain.dev/rack": "rack-0", "railtrain.dev/block": "block-0"},
        {"railtrain.dev/rack": "rack-1", "railtrain.dev/block": "block-0"},
        {"railtrain.dev/rack": "rack-2", "railtrain.dev/block": "block-1"},
    ]
    with pytest.raises(ValueError, match="worker index"):
        kind.worker_labels(-1)


def test_stock_config_has_no_workarounds():
    cfg = kind.kind_config("c", 3, "img:1", restrict_oom_score_adj=False)
    assert cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4" and cfg["name"] == "c"
    assert [n["role"] for n in cfg["nodes"]] == ["control-plane", "worker", "worker", "worker"]
    assert all(n["image"] == "img:1" for n in cfg["nodes"])
    assert cfg["nodes"][3]["labels"]["railtrain.dev/rack"] == "rack-1"
    assert "containerdConfigPatches" not in cfg and all("extraMounts" not in n for n in cfg["nodes"])


def test_missing_capability_adds_the_containerd_patch_and_cuda_libs_mount_every_node(tmp_path):
    cfg = kind.kind_config("c", 1, "img:1", restrict_oom_score_adj=True, cuda_libs=tmp_path, base_spec=tmp_path / "spec.json")
    patches = "\n".join(cfg["containerdConfigPatches"])
    assert "restrict_oom_score_adj = true" in patches
    assert f'base_runtime_spec = "{kind.BASE_SPEC_NODE_PATH}"' in patches
    for node in cfg["nodes"]:  # the patch reaches every node, so every node must have the files
        assert {m["containerPath"] for m in node["extraMounts"]} == {kind.CUDA_LIBS_NODE_PATH, kind.BASE_SPEC_NODE_PATH}
        assert all(m["readOnly"] for m in node["extraMounts"])
    with pytest.raises(ValueError, match="workers must be >= 1"):
        kind.kind_config("c", 0, "img:1", restrict_oom_score_adj=False)


def test_base_spec_gains_one_read_only_bind_and_keeps_the_rest():
    base = {"ociVersion": "1.2.0", "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}], "hooks": {"createContainer": []}}
    spec = kind.base_spec_with_cuda_libs(base)
    assert spec["mounts"][0] == base["mounts"][0] and len(base["mounts"]) == 1  # input untouched
    assert spec["mounts"][1] == {
        "destination": kind.CUDA_LIBS_CONTAINER_PATH, "type": "bind", "source": f"{kind.CUDA_LIBS_NODE_PATH}/nvidia", "options": ["rbind", "ro"],
    }  # fmt: skip
    assert spec["hooks"] == base["hooks"]


@pytest.fixture
def wrapper(tmp_path: Path):
    """Run kind-docker.sh with a fake real docker that prints its arguments one per line."""
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)

    def run(*args: str) -> list[str]:
        out = subprocess.run(["bash", str(kind.DOCKER_WRAPPER), *args], capture_output=True, text=True, check=True,
                             env={**os.environ, "RAILTRAIN_REAL_DOCKER": str(fake)})  # fmt: skip
        return out.stdout.splitlines()

    return run


def test_wrapper_swaps_privileged_for_explicit_capabilities_on_run(wrapper):
    args = wrapper("run", "--detach", "--privileged", "--security-opt", "seccomp=unconfined", "--hostname", "n", "img")
    assert "--privileged" not in args
    assert args[:2] == ["run", "--detach"] and args[-5:] == ["--security-opt", "seccomp=unconfined", "--hostname", "n", "img"]
    joined = " ".join(args)
    for flag in ("--cap-add ALL", "--cap-drop SYS_RESOURCE", "--security-opt systempaths=unconfined", "--device-cgroup-rule a *:* rwm", "--device /dev/kmsg"):
        assert flag in joined


def test_wrapper_drops_privileged_from_exec_and_passes_everything_else(wrapper):
    # only kind's own flag goes; one in the command run inside the node stays
    assert wrapper("exec", "--privileged", "-i", "node", "cat", "--privileged") == ["exec", "-i", "node", "cat", "--privileged"]
    assert wrapper("ps", "-a", "--filter", "label=x") == ["ps", "-a", "--filter", "label=x"]
