"""`railtrain run --local` after a failure: the failure policy applied to local gangs (pure decisions and real processes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from datetime import datetime, timezone

from railtrain.cli.local_recovery import local_failures, spent_faults, torchrun_cause
from railtrain.crds import contract, recovery
from railtrain.crds.validation import parse_manifest
from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]


def msg(kind, reason="Finding", nodes=("local-1",)):
    return contract.format_termination_message(kind, reason, "seen", nodes=list(nodes), ranks=[1])


def decide(job, messages, code, job_restarts, infrastructure_restarts, first=None, causes=None):
    counters = recovery.Counters(job_restarts=job_restarts, infrastructure_restarts=infrastructure_restarts)
    return recovery.decide(local_failures(messages, code, first, causes), job.spec.run_policy, counters, datetime.now(timezone.utc))


def gang_verdict(messages, code, first=None, causes=None):
    d = decide(parse_manifest(manifests.job()), messages, code, 0, 0, first, causes)
    return d.verdict, d.blamed.detail()


MAX_INFRA = 10  # runPolicy.maxInfrastructureRestarts' default


@pytest.mark.parametrize(
    "messages,code,restarts,want",
    [
        ([None, None], 3, (0, 0), ("restart-job", "retryable")),
        ([None, None], 2, (0, 0), ("fail", "user-error")),
        ([None, None], 3, (3, 0), ("fail", "retryable")),  # backoffLimit 3 spent
        ([msg("hang"), None], 1, (0, 0), ("restart-job", "hang")),
        ([msg("retryable"), msg("hardware-suspect")], 1, (3, 0), ("restart-infrastructure", "hardware-suspect")),
        ([msg("straggler"), msg("user-error")], 1, (0, 0), ("fail", "user-error")),
        ([msg("straggler"), None], 1, (0, MAX_INFRA), ("fail", "straggler")),
    ],
)
def test_decide_follows_the_failure_policy(messages, code, restarts, want):
    job = parse_manifest(manifests.job())
    d = decide(job, messages, code, *restarts, first=0)
    assert (d.action, d.verdict) == want


def test_gang_verdict_names_the_rank():
    assert gang_verdict([None, msg("hardware-suspect", "RerunMismatch")], 1) == ("hardware-suspect", "rank 1 exited with code 1: RerunMismatch: seen")


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
        assert "restarting the whole gang (job restarts 0/3, infrastructure restarts 1/10) (restart 1)" in proc.stderr
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


TORCHRUN_KILLED = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=====================================================
railtrain.trainer FAILED
-----------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_19:43:48
  host      : localhost
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 6449)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 6449
=====================================================""".splitlines()


def test_torchrun_cause_reads_the_root_cause_report():
    assert torchrun_cause(TORCHRUN_KILLED) == "worker rank 1 was killed by SIGKILL (exit code -9)"
    exited = [line.replace("-9 (pid: 6449)  (SIGKILL)", "3 (pid: 1)") for line in TORCHRUN_KILLED if "Signal" not in line]
    assert torchrun_cause(exited) == "worker rank 1 exited with code 3"
    assert torchrun_cause(["step=1 loss=5.7"]) is None


def test_the_killed_rank_decides_not_its_peers_closed_connection():
    """Rank 1 SIGKILLed, rank 0 fails in gloo after it: the summary names rank 1 and how it died, whichever node was seen first."""
    peer = contract.format_termination_message("retryable", "RuntimeError", "[gloo/pair.cc:561] Connection closed by peer")
    causes = {0: "worker rank 0 exited with code 1", 1: "worker rank 1 was killed by SIGKILL (exit code -9)"}
    for first in (0, 1):
        assert gang_verdict([peer, None], 1, first, causes) == ("retryable", "rank 1 exited with code 1: worker rank 1 was killed by SIGKILL (exit code -9)")


def test_plain_failures_are_told_by_the_node_that_failed_first_without_repeating_the_reason():
    crash = contract.format_termination_message("retryable", "RuntimeError", "RuntimeError: data file vanished")
    peer = contract.format_termination_message("retryable", "RuntimeError", "Connection closed by peer")
    assert gang_verdict([crash, peer], 1, 0) == ("retryable", "rank 0 exited with code 1: RuntimeError: data file vanished")
    assert gang_verdict([None, None], 2, 1) == ("user-error", "rank 1 exited with code 2")
    # a health verdict of any node still wins over the node seen first
    assert gang_verdict([peer, msg("hang", "NoProgress")], 1, 0) == ("hang", "rank 1 exited with code 1: NoProgress: seen")


def test_torchrun_cause_is_the_root_cause_not_the_other_failures():
    other = ["Failures:", "[1]:", "  rank      : 3 (local_rank: 1)", "  exitcode  : -15 (pid: 7)", "  traceback : Signal 15 (SIGTERM) received by PID 7", "-----"]
    root = ["Root Cause (first observed failure):", "[0]:", "  rank      : 2 (local_rank: 0)", "  exitcode  : 1 (pid: 6)", "  traceback : To enable traceback see: ...", "====="]
    assert torchrun_cause(other + root) == "worker rank 2 exited with code 1"
