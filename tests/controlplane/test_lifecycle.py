"""Cluster lifecycle: `dev up` outlives its process, `dev down` and owner death kill it, failed starts clean up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
from kubernetes import client, config

from railtrain.cli.controlplane import ClusterError, LocalCluster, wait_until
from railtrain.cli.controlplane.dev import dev_down
from railtrain.cli.controlplane.processes import pid_alive

pytestmark = pytest.mark.cluster


def run_python(code: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (``-P``: the repo's ``operator/`` must not shadow the stdlib)."""
    return subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, cwd="/",
    )


def test_dev_up_outlives_its_process_and_dev_down_kills_it():
    name = f"pytest-dev-{uuid.uuid4().hex[:6]}"
    try:
        proc = run_python(f"""
            from railtrain.cli.controlplane.dev import dev_up
            print(dev_up(nodes=3, gpus_per_node=4, name={name!r}))
        """)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""  # dev_up prints nothing of its own
        kubeconfig = proc.stdout.strip()

        with config.new_client_from_config(config_file=kubeconfig) as api:
            nodes = client.CoreV1Api(api).list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
        assert {n.status.allocatable["nvidia.com/gpu"] for n in nodes} == {"4"}
        assert {n.metadata.labels["railtrain.dev/rack"] for n in nodes} == {"rack-0"}

        pids = LocalCluster(name).pids()
        assert len(pids) == 5 and all(pid_alive(p) for p in pids.values())

        assert dev_down(name) is True
        assert not [c for c, p in pids.items() if pid_alive(p)]
        assert not LocalCluster(name).state_dir.exists()
        assert dev_down(name) is False
    finally:
        dev_down(name)


def test_owned_cluster_dies_when_its_owner_is_killed():
    name = f"pytest-owner-{uuid.uuid4().hex[:6]}"
    owner = subprocess.Popen(
        [sys.executable, "-P", "-c", textwrap.dedent(f"""
            import os, sys
            from railtrain.cli.controlplane import LocalCluster
            LocalCluster({name!r}).start(owner_pid=os.getpid())
            print("up", flush=True)
            sys.stdin.read()  # hold until killed
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
    )
    cluster = LocalCluster(name)
    try:
        assert owner.stdout.readline().strip() == "up"
        pids = cluster.pids()
        assert len(pids) == 5 and all(pid_alive(p) for p in pids.values())

        os.kill(owner.pid, signal.SIGKILL)  # no cleanup runs in the owner
        owner.wait()

        wait_until(lambda: not any(pid_alive(p) for p in pids.values()), 30, "cluster processes to die")
        wait_until(lambda: not cluster.state_dir.exists(), 30, "state folder removed")
    finally:
        owner.kill()
        cluster.stop()


def test_failed_start_raises_with_logs_and_leaves_no_process(tmp_path):
    real = LocalCluster("unused").bin_dir
    fake = tmp_path / "cache" / "bin"
    fake.mkdir(parents=True)
    for binary in real.iterdir():
        (fake / binary.name).symlink_to(binary)
    (fake / "kube-apiserver").unlink()
    (fake / "kube-apiserver").write_text("#!/bin/sh\necho 'kube-apiserver: broken on purpose' >&2\nexit 1\n")
    (fake / "kube-apiserver").chmod(0o755)
    (tmp_path / "cache" / "kwok-stages").symlink_to(real.parent / "kwok-stages")
    cluster = LocalCluster("broken", state_root=tmp_path / "state", bin_dir=fake)

    with pytest.raises(ClusterError, match="kwokctl create cluster failed"):
        cluster.start(timeout=30)

    assert not any(pid_alive(p) for p in cluster.pids().values())
    cluster.stop()
    assert not cluster.state_dir.exists()


@pytest.mark.parametrize("name", ["", "Upper", "under_score", "-lead", "x" * 64])
def test_cluster_names_must_be_dns_labels(name):
    with pytest.raises(ValueError):
        LocalCluster(name)
