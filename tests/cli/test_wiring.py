"""`dev up/down` and `operator` call their (lazily imported) implementations."""

from __future__ import annotations

import os

import pytest

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
    from railtrain.operator.settings import Settings

    calls = []
    monkeypatch.setattr(operator_main, "run", calls.append)
    result = runner.invoke(app, ["operator", "-n", "team-a", "--kubeconfig", "/k.yaml", "--unreachable-seconds", "5", "--max-quarantines-per-hour", "3"])
    assert result.exit_code == 0, result.output
    got = calls[-1]
    assert (got.namespace, got.kubeconfig, got.unreachable_seconds, got.max_quarantines_per_hour) == ("team-a", "/k.yaml", 5.0, 3)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("RAILTRAIN_TOPOLOGY_PRESET", raising=False)
    monkeypatch.delenv("RAILTRAIN_TOPOLOGY_LEVELS", raising=False)
    runner.invoke(app, ["operator"])
    assert calls[-1] == Settings()  # the defaults are the settings' own


def test_operator_leaves_the_process_only_for_threads_its_own_run_left(monkeypatch):
    """A ``railtrain-*`` thread the process had before (in CI: another test's, in the same xdist worker) is not the
    run's: ``railtrain operator`` returns normally. Stop 35's fresh-clone run lost a worker here: the old check counted
    every such thread and ended the worker's process through ``leave_process``. One the run leaves does count."""
    import threading

    from railtrain.cli import main as cli_main
    from railtrain.operator import main as operator_main

    left = []
    monkeypatch.setattr(cli_main, "leave_process", left.append)  # recorded, never os._exit in a test
    release = threading.Event()
    earlier = threading.Thread(target=release.wait, name="railtrain-earlier", daemon=True)
    earlier.start()
    try:
        monkeypatch.setattr(operator_main, "run", lambda settings: None)
        assert runner.invoke(app, ["operator"]).exit_code == 0 and left == []
        started = threading.Thread(target=release.wait, name="railtrain-watch", daemon=True)
        monkeypatch.setattr(operator_main, "run", lambda settings: started.start())
        runner.invoke(app, ["operator"])
        assert left == [0]  # its own thread is still alive: it leaves, status 0
    finally:
        release.set()


def test_railtrain_operator_and_railtrain_operator_script_parse_the_same_flags(monkeypatch):
    from railtrain.operator import __main__ as script
    from railtrain.operator import main as operator_main

    seen = []
    monkeypatch.setattr(operator_main, "run", seen.append)
    argv = ["--namespace", "ns", "--resync-seconds", "0.5", "--topology-preset", "gke", "--max-quarantines-per-hour", "0"]
    assert runner.invoke(app, ["operator", *argv]).exit_code == 0
    script.main(argv)
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0].max_quarantines_per_hour == 0


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (["--unreachable-seconds", "0"], "--unreachable-seconds: must be more than 0 seconds, got 0"),
        (["--resync-seconds", "-1"], "--resync-seconds: must be more than 0 seconds, got -1"),
        (["--max-quarantines-per-hour", "-2"], "--max-quarantines-per-hour: must be 0 or more, got -2"),
        (["--max-quarantines-per-hour", "many"], "argument --max-quarantines-per-hour: invalid int value: 'many'"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["--fabric-profile", "azure"], "--fabric-profile: unknown profile 'azure'; choose one of railtrain, gke, aws, oci, infiniband, none"),
    ],
)
def test_a_bad_operator_flag_is_one_sentence_from_both_entry_points(monkeypatch, capsys, argv, sentence):
    from railtrain.operator import __main__ as script
    from railtrain.operator import main as operator_main

    monkeypatch.setattr(operator_main, "run", lambda settings: pytest.fail("the operator must not start"))
    result = runner.invoke(app, ["operator", *argv])
    assert result.exit_code == 1 and result.stderr.strip().splitlines() == [f"error: {sentence}"]
    with pytest.raises(SystemExit) as done:
        script.main(argv)
    assert done.value.code == 2 and capsys.readouterr().err.strip() == f"railtrain-operator: error: {sentence}"


def test_operator_that_cannot_start_or_loses_the_server_is_one_sentence_and_exit_1(monkeypatch):
    from railtrain.operator import main as operator_main

    def gone(settings):
        raise operator_main.OperatorError("the Kubernetes API server at https://x:6443 has not answered for 60 s; the operator stops")

    monkeypatch.setattr(operator_main, "run", gone)
    result = runner.invoke(app, ["operator"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: the Kubernetes API server at https://x:6443 has not answered for 60 s; the operator stops"]
    monkeypatch.undo()  # the real operator: its preflight refuses before kopf starts
    result = runner.invoke(app, ["operator", "--kubeconfig", "/nonexistent/kubeconfig"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: --kubeconfig: no kubeconfig file at /nonexistent/kubeconfig; pass --kubeconfig PATH or set KUBECONFIG "
        "(start a local cluster with 'railtrain dev up', which prints one)"
    ]  # the same sentence as railtrain get's (one client edge)


def test_operator_topology_flags_reach_the_operator_settings(monkeypatch):
    from railtrain.operator import main as operator_main
    from railtrain.operator.scheduling import topology

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda settings: seen.append(settings.topology_levels))
    monkeypatch.setenv(topology.ENV_LEVELS, "a.example/x")  # monkeypatch restores both variables afterwards
    monkeypatch.delenv(topology.ENV_PRESET, raising=False)
    assert runner.invoke(app, ["operator", "--topology-preset", "gke"]).exit_code == 0
    assert seen[-1] == topology.PRESETS["gke"]
    assert runner.invoke(app, ["operator", "--topology-levels", "railtrain.dev/rack,kubernetes.io/hostname"]).exit_code == 0
    assert seen[-1] == ("railtrain.dev/rack", "kubernetes.io/hostname")
    bad = runner.invoke(app, ["operator", "--topology-preset", "azure"])
    assert bad.exit_code == 1 and "unknown preset 'azure'" in bad.stderr


def test_operator_fabric_profile_reaches_the_settings(monkeypatch):
    from railtrain.crds import fabric
    from railtrain.operator import main as operator_main

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda settings: seen.append(settings.fabric.name))
    monkeypatch.setenv(fabric.ENV_PROFILE, "oci")
    assert runner.invoke(app, ["operator", "--fabric-profile", "aws"]).exit_code == 0
    assert runner.invoke(app, ["operator"]).exit_code == 0
    monkeypatch.delenv(fabric.ENV_PROFILE)
    assert runner.invoke(app, ["operator"]).exit_code == 0
    assert seen == ["aws", "oci", "railtrain"]
