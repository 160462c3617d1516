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
