"""`railtrain run --local` after a failure: the failure policy applied to local gangs (pure decisions and real processes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from railtrain.cli.local_recovery import MAX_INFRASTRUCTURE_RESTARTS, decide, gang_verdict, spent_faults
from railtrain.crds import contract
from railtrain.crds.validation import parse_manifest
from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]


def msg(kind, reason="Finding", nodes=("local-1",)):
    return contract.format_termination_message(kind, reason, "seen", nodes=list(nodes), ranks=[1])


@pytest.mark.parametrize(
    "messages,code,restarts,want",
    [
        ([None, None], 3, (0, 0), ("restart-job", "retryable")),
        ([None, None], 2, (0, 0), ("fail", "user-error")),
        ([None, None], 3, (3, 0), ("fail", "retryable")),  # backoffLimit 3 spent
        ([msg("hang"), None], 1, (0, 0), ("restart-job", "hang")),
        ([msg("retryable"), msg("hardware-suspect")], 1, (3, 0), ("restart-infrastructure", "hardware-suspect")),
        ([msg("straggler"), msg("user-error")], 1, (0, 0), ("fail", "user-error")),
        ([msg("straggler"), None], 1, (0, MAX_INFRASTRUCTURE_RESTARTS), ("fail", "straggler")),
    ],
)
def test_decide_follows_the_failure_policy(messages, code, restarts, want):
    job = parse_manifest(manifests.job())
    d = decide(job, messages, code, *restarts)
    assert (d.action, d.verdict) == want


def test_gang_verdict_names_the_node():
    assert gang_verdict([msg("hardware-suspect", "RerunMismatch")], 1) == ("hardware-suspect", "RerunMismatch: seen on local-1")


def test_faults_met_by_the_failed_gang_are_dropped_later_ones_kept():
    env = {contract.ENV_FAULT_BITFLIP: "rank=1,step=100", contract.ENV_FAULT_HANG: "rank=0,step=200", "OTHER": "x"}
    at = lambda step: [contract.format_termination_message("hardware-suspect", "RerunMismatch", "m", step=step)]  # noqa: E731
    assert spent_faults(env, at(110)) == {contract.ENV_FAULT_BITFLIP}
    assert spent_faults(env, at(200)) == {contract.ENV_FAULT_BITFLIP, contract.ENV_FAULT_HANG}
    assert spent_faults(env, [None]) == {contract.ENV_FAULT_BITFLIP, contract.ENV_FAULT_HANG}  # a crash: no step known


SCRIPT = f"""
import os, sys
rank, restart = int(os.environ[{contract.ENV_NODE_RANK!r}]), int(os.environ[{contract.ENV_RESTART_COUNT!r}])
fault = os.environ.get({contract.ENV_FAULT_KILL!r}, "")
print(f"rank {{rank}} restart {{restart}} fault={{fault!r}}", flush=True)
if restart == 0 and rank == 1:
    open(os.environ[{contract.ENV_TERMINATION_MESSAGE_PATH!r}], "w").write(os.environ["VERDICT"])
    sys.exit(1)
"""


@pytest.mark.parametrize("verdict,expect_code", [(contract.VERDICT_HARDWARE_SUSPECT, 0), (contract.VERDICT_USER_ERROR, 1)])
def test_local_gang_restarts_per_verdict_without_the_injected_fault(tmp_path, verdict, expect_code):
    env = [{"name": "VERDICT", "value": msg(verdict)}, {"name": contract.ENV_FAULT_KILL, "value": "rank=1,step=5"}]
    path = manifests.write(tmp_path / "job.yaml", manifests.job(command=["python", "-c", SCRIPT], env=env))
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == expect_code, proc.stdout + proc.stderr
    if expect_code == 0:
        assert "restarting the whole gang (restart 1: job restarts 0/3, infrastructure restarts 1)" in proc.stderr
        assert "[rank 0] rank 0 restart 1 fault=''" in proc.stdout  # the fault applied to the first gang only
    else:
        assert "not restarting" in proc.stderr and "restart 1" not in proc.stdout


FLAG_SCRIPT = f"""
import os, sys
rank, restart = int(os.environ[{contract.ENV_NODE_RANK!r}]), int(os.environ[{contract.ENV_RESTART_COUNT!r}])
print(f"rank {{rank}} restart {{restart}} kill={{os.environ.get({contract.ENV_FAULT_KILL!r}, '')!r}} hang={{os.environ.get({contract.ENV_FAULT_HANG!r}, '')!r}}", flush=True)
if restart == 0 and rank == 1:
    open(os.environ[{contract.ENV_TERMINATION_MESSAGE_PATH!r}], "w").write(os.environ["VERDICT"])
    sys.exit(1)
"""


def test_fault_flags_reach_restarted_gangs_until_met(tmp_path):
    verdict = contract.format_termination_message(contract.VERDICT_RETRYABLE, "Killed", "rank 1 killed", step=5)
    path = manifests.write(tmp_path / "job.yaml", manifests.job(command=["python", "-c", FLAG_SCRIPT], env=[{"name": "VERDICT", "value": verdict}]))
    args = ["run", str(path), "--local", "--grace", "2", "--fault-kill", "rank=1,step=5", "--fault-hang", "rank=0,step=50"]
    proc = subprocess.run([*CLI, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[rank 0] rank 0 restart 0 kill='rank=1,step=5' hang='rank=0,step=50,kind=compute'" in proc.stdout
    assert "[rank 0] rank 0 restart 1 kill='' hang='rank=0,step=50,kind=compute'" in proc.stdout
