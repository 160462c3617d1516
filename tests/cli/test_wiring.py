"""`dev up/down` and `operator` call their (lazily imported) implementations."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from railtrain.cli.main import app

runner = CliRunner()


def test_dev_up_prints_the_kubeconfig_export(monkeypatch, tmp_path):
    from railtrain.cli.controlplane import dev

    calls = []

    def fake_up(nodes, gpus_per_node, name):
        calls.append((nodes, gpus_per_node, name))
        return tmp_path / "kubeconfig.yaml"

    monkeypatch.setattr(dev, "dev_up", fake_up)
    result = runner.invoke(app, ["dev", "up", "--nodes", "2", "--gpus-per-node", "4", "--name", "demo"])
    assert result.exit_code == 0, result.output
    assert calls == [(2, 4, "demo")]
    assert result.stdout.strip() == f"export KUBECONFIG={tmp_path / 'kubeconfig.yaml'}"
    assert "kubeconfig" in result.stderr


def test_dev_up_failure_is_one_sentence(monkeypatch):
    from railtrain.cli.controlplane import ClusterError, dev

    def broken(nodes, gpus_per_node, name):
        raise ClusterError("kube-apiserver did not become ready in 180 s")

    monkeypatch.setattr(dev, "dev_up", broken)
    result = runner.invoke(app, ["dev", "up"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == "error: local cluster railtrain did not start: kube-apiserver did not become ready in 180 s"
    assert "Traceback" not in result.output


def test_dev_down(monkeypatch):
    from railtrain.cli.controlplane import dev

    monkeypatch.setattr(dev, "dev_down", lambda name: name == "demo")
    assert "local cluster demo is down" in runner.invoke(app, ["dev", "down", "--name", "demo"]).stderr
    assert "there was no local cluster named other" in runner.invoke(app, ["dev", "down", "--name", "other"]).stderr


def test_operator_runs_in_the_foreground(monkeypatch):
    from railtrain.operator import main as operator_main

    calls = []
    monkeypatch.setattr(
        operator_main, "run", lambda namespace, kubeconfig, unreachable_seconds, fabric_profile: calls.append((namespace, kubeconfig, unreachable_seconds, fabric_profile))
    )
    result = runner.invoke(app, ["operator", "-n", "team-a", "--kubeconfig", "/k.yaml", "--unreachable-seconds", "5", "--fabric-profile", "aws"])
    assert result.exit_code == 0, result.output
    assert calls == [("team-a", "/k.yaml", 5.0, "aws")]
    monkeypatch.delenv("KUBECONFIG", raising=False)
    runner.invoke(app, ["operator"])
    assert calls[-1] == (None, None, 60.0, None)
    bad = runner.invoke(app, ["operator", "--fabric-profile", "azure"])
    assert bad.exit_code == 1 and "--fabric-profile: unknown profile 'azure'; choose one of railtrain, gke, aws, oci, infiniband, none" in bad.stderr


def test_operator_that_cannot_start_or_loses_the_server_is_one_sentence_and_exit_1(monkeypatch):
    from railtrain.operator import main as operator_main

    def gone(namespace, kubeconfig, unreachable_seconds, fabric_profile=None):
        raise operator_main.OperatorError("the Kubernetes API server at https://x:6443 has not answered for 60 s; the operator stops")

    monkeypatch.setattr(operator_main, "run", gone)
    result = runner.invoke(app, ["operator"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: the Kubernetes API server at https://x:6443 has not answered for 60 s; the operator stops"]
    monkeypatch.undo()  # the real operator: its preflight refuses before kopf starts
    result = runner.invoke(app, ["operator", "--kubeconfig", "/nonexistent/kubeconfig"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: no kubeconfig file at /nonexistent/kubeconfig; pass --kubeconfig PATH or set KUBECONFIG to an existing file"
    ]


def test_operator_topology_flags_reach_the_operator_through_its_environment(monkeypatch):
    from railtrain.operator import main as operator_main
    from railtrain.operator import topology

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda namespace, kubeconfig, unreachable_seconds, fabric_profile: seen.append(topology.resolve_levels(environ=dict(os.environ))))
    monkeypatch.setenv(topology.ENV_LEVELS, "a.example/x")  # monkeypatch restores both variables afterwards
    monkeypatch.delenv(topology.ENV_PRESET, raising=False)
    assert runner.invoke(app, ["operator", "--topology-preset", "gke"]).exit_code == 0
    assert seen[-1] == topology.PRESETS["gke"]
    assert runner.invoke(app, ["operator", "--topology-levels", "railtrain.dev/rack,kubernetes.io/hostname"]).exit_code == 0
    assert seen[-1] == ("railtrain.dev/rack", "kubernetes.io/hostname")
    bad = runner.invoke(app, ["operator", "--topology-preset", "azure"])
    assert bad.exit_code == 1 and "unknown preset 'azure'" in bad.stderr
