"""The images built from operator/Dockerfile and trainer/Dockerfile run their entry points."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]  # the first test also builds the images and starts the cluster


def docker_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "run", "--rm", *args], capture_output=True, text=True, timeout=300)


def test_operator_image_runs_as_non_root_on_a_read_only_root_filesystem(app_images):
    operator = app_images[0]
    out = docker_run("--read-only", operator, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.lower().startswith("usage: railtrain-operator")
    # The operator's real imports (kopf, the kubernetes client) load, and torch is not there.
    probe = docker_run("--read-only", "--entrypoint", "python", operator, "-c",
                       "import getpass, importlib.util as u, os, railtrain.operator.main; print(os.getuid(), getpass.getuser(), u.find_spec('torch') is None)")  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["65532", "nonroot", "True"]  # kopf names its peering identity after the user name


def test_trainer_image_runs_the_trainer_and_torchrun(app_images):
    """The CPU variant (TORCH_CUDA_LIBS=drop) with the CUDA libraries mounted where kind nodes put them."""
    from railtrain.cli.controlplane.kind import CUDA_LIBS_CONTAINER_PATH

    _, trainer, cuda_libs, _ = app_images
    libs = f"--volume={cuda_libs}/nvidia:{CUDA_LIBS_CONTAINER_PATH}:ro"
    out = docker_run(libs, trainer, "python", "-m", "railtrain.trainer", "--help")
    assert out.returncode == 0, out.stderr
    assert "--preset" in out.stdout
    probe = docker_run(libs, trainer, "sh", "-c", "command -v torchrun && python -c 'import torch, importlib.util as u; print(torch.distributed.is_gloo_available(), u.find_spec(\"kopf\") is None)'")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[-2:] == ["True", "True"]
    # torchft for replica groups (spec.faultTolerance): the Manager imports, and the Lighthouse the operator runs from
    # the job's image is on PATH.
    ft = docker_run(libs, trainer, "sh", "-c", "command -v torchft_lighthouse && python -c 'import torchft; from torchft.manager import Manager; print(\"ok\")'")
    assert ft.returncode == 0 and ft.stdout.split()[-1] == "ok", ft.stderr
