"""The supervisor's warm launcher (crds/supervisor.py: WarmLauncher): which commands it warms and when. Its use in an
in-place restart is tested with real processes in tests/cli/test_local_inplace.py."""

from __future__ import annotations


def test_the_warm_launcher_knows_torchrun_by_its_module_or_its_script_and_nothing_else(tmp_path):
    """crds/supervisor.py: torchrun_args finds the interpreter that would run torchrun and its arguments: ``python -m
    torch.distributed.run``, or a ``torchrun`` script on PATH whose ``#!`` names a Python (directly or through env);
    any other command (a script, a shell, a torchrun that is not Python) gets no warm launcher. RAILTRAIN_SUPERVISOR_WARM
    sets the delay or turns it off."""
    from railtrain.crds import supervisor

    assert supervisor.torchrun_args(["python3", "-m", "torch.distributed.run", "--nnodes", "2", "train.py"]) == ("python3", ["--nnodes", "2", "train.py"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for line, expected in [("#!/opt/venv/bin/python3.11", "/opt/venv/bin/python3.11"), ("#!/usr/bin/env python3", "python3"), ("#!/bin/sh", None)]:
        script = bin_dir / "torchrun"
        script.write_text(line + "\nexec something\n")
        script.chmod(0o755)
        found = supervisor.torchrun_args(["torchrun", "-m", "railtrain.trainer"], str(bin_dir))
        assert found == ((expected, ["-m", "railtrain.trainer"]) if expected else None), line
    assert supervisor.torchrun_args(["python", "-c", "print(1)"]) is None and supervisor.torchrun_args([]) is None
    assert supervisor.torchrun_args(["torchrun", "x.py"], str(tmp_path / "nowhere")) is None
    assert supervisor.warm_after({}) == supervisor.WARM_AFTER_SECONDS and supervisor.warm_after({supervisor.ENV_WARM: "off"}) is None
    assert supervisor.warm_after({supervisor.ENV_WARM: "2.5"}) == 2.5 and supervisor.warm_after({supervisor.ENV_WARM: "soon"}) == supervisor.WARM_AFTER_SECONDS


def test_the_manifest_check_and_the_pods_supervisors_read_the_tunables_with_one_parser():
    """``RAILTRAIN_SUPERVISOR_WARM`` and ``..._LOST_SECONDS`` were read by two parsers: the pods' ``warm_after`` took any
    float (``1e3``, ``-5``, ``inf``, ``OFF``) while the manifest check took plain numbers only; a value the check
    refuses must never reach a pod, and every value it accepts must mean the same in the pod. Now both go through
    ``parse_warm`` / ``parse_lost``: accepted values parse to what the supervisor uses, refused ones raise."""
    from types import SimpleNamespace

    from railtrain.crds import supervisor

    def spec(name, value):
        return SimpleNamespace(env=[SimpleNamespace(name=name, value=value)])

    for value, want in [("off", None), ("", supervisor.WARM_AFTER_SECONDS), ("0", 0.0), (" 2.5 ", 2.5), ("30", 30.0)]:
        assert supervisor.tunables_valid(spec(supervisor.ENV_WARM, value)) and supervisor.parse_warm(value) == want, value
        assert supervisor.warm_after({supervisor.ENV_WARM: value}) == want, value
    for value in ("OFF", "1e3", "-5", "inf", "soon", ".5"):
        assert not supervisor.tunables_valid(spec(supervisor.ENV_WARM, value)), value
        try:
            supervisor.parse_warm(value)
        except ValueError:
            pass
        else:
            raise AssertionError(f"parse_warm accepted {value!r}, which the manifest check refuses")
    for value, ok in [("2", True), ("600", True), ("1", True), ("0.5", False), ("601", False), ("", False), ("5s", False)]:
        assert supervisor.tunables_valid(spec(supervisor.ENV_LOST, value)) == ok, value
