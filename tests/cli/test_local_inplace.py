"""``railtrain run --local`` with ``spec.runPolicy.restartInPlace``: real processes under the pod-side supervisor
(crds/supervisor.py) restart in place by the one rule, the second failure in a row escalates to a gang restart, and
in-place restarts alone can spend the job's budget. The commands are small Python scripts (no torch) except the
last test, which kills a real trainer rank and checks the step the in-place attempt resumed from."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from railtrain.crds import contract
from railtrain.crds.supervisor import ENV_ATTEMPT
from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]
REPO = Path(__file__).resolve().parents[2]

SCRIPT = f"""
import os, sys
rank, restart, attempt = (int(os.environ[k]) for k in ({contract.ENV_NODE_RANK!r}, {contract.ENV_RESTART_COUNT!r}, {ENV_ATTEMPT!r}))
print(f"rank {{rank}} restart {{restart}} attempt {{attempt}} pid {{os.getppid()}}", flush=True)
if (rank, restart, attempt) in {{FAIL}}:
    sys.exit(3)
"""


def run_script(tmp_path, fail: set, backoff_limit: int = 3) -> subprocess.CompletedProcess:
    script = SCRIPT.replace("{FAIL}", repr(fail))
    doc = manifests.job(command=["python", "-c", script], runPolicy={"restartInPlace": True, "backoffLimit": backoff_limit, "restartBackoffSeconds": 0})
    path = manifests.write(tmp_path / "job.yaml", doc)
    return subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=180)


def logged(proc: subprocess.CompletedProcess, name: str = "*.log") -> str:
    """The lines the nodes wrote, from the run's log files ``name`` (the screen may drop a stopped node's last lines)."""
    logs = Path(re.search(r"^logs: (\S+)", proc.stderr, re.M).group(1))
    return "".join(p.read_text() for p in sorted(logs.glob(name)))


def supervisors(out: str, restart: int) -> set[str]:
    """The supervisor pids (the script's parent) of one gang, per rank line."""
    return set(re.findall(rf"rank \d restart {restart} attempt \d pid (\d+)", out))


def test_killed_rank_restarts_in_place_then_twice_in_a_row_escalates(tmp_path):
    # attempt 0 fails: in place (attempt 1, same supervisors); attempt 1 fails again: the whole gang (restart 1)
    proc = run_script(tmp_path, {(1, 0, 0), (1, 0, 1)})
    out = proc.stdout + proc.stderr + logged(proc)
    assert proc.returncode == 0, out
    assert "rank 0 restart 0 attempt 1" in out and "rank 1 restart 0 attempt 1" in out  # both ranks agree on the attempt
    assert len(supervisors(out, 0)) == 2  # attempt 1 ran under the same two supervisors ("nodes"): nothing torn down
    assert "restarting in place (job restarts 1/3" in out
    assert "escalated: the attempt restarted in place failed again" in out
    assert "1 in-place restart(s) in this gang (retryable 1)" in out
    assert "restarting the whole gang (job restarts 2/3" in out  # both paths spend the one budget
    assert "rank 0 restart 1 attempt 0" in out and "restart 1 attempt 1" not in out


def test_the_rendezvous_hosts_process_killed_restarts_in_place_too(tmp_path):
    # node rank 0's workers host torchrun's store; the coordinator lives in its supervisor, which outlives them
    proc = run_script(tmp_path, {(0, 0, 0)})
    out = proc.stdout + proc.stderr + logged(proc)
    assert proc.returncode == 0, out
    assert "attempt 0: rank 0 exited with code 3; restarting in place" in out and "rank 1 restart 0 attempt 1" in out
    assert "restart 1 attempt" not in out  # no gang restart


def test_budget_spent_by_in_place_restarts_alone_fails_the_job(tmp_path):
    proc = run_script(tmp_path, {(1, 0, 0), (1, 0, 1), (1, 1, 0)}, backoff_limit=1)
    out = proc.stdout + proc.stderr + logged(proc)
    assert proc.returncode != 0, out
    assert "restarting in place (job restarts 1/1" in out
    assert "runPolicy.backoffLimit=1 restarts used" in out and "not restarting" in out
    assert "restart 1 attempt" not in out  # nothing restarted after


def test_killed_trainer_rank_restarts_in_place_and_resumes_from_its_checkpoint(tmp_path):
    """The tiny trainer, 2 nodes: rank 1 SIGKILLs itself at step 5 after the step-4 checkpoint; the same supervisors
    start attempt 1, which resumes from step 4 and finishes; the fault is not met again; goodput names the cause."""
    doc = yaml.safe_load((REPO / "examples/tiny/trainingjob.yaml").read_text())
    args = doc["spec"]["args"]
    args[args.index("--steps") + 1], args[args.index("--log-every") + 1] = "6", "1"
    args += ["--seq-len", "32", "--no-checkpoint-async"]  # the step-4 checkpoint is complete before step 5 starts
    doc["spec"]["checkpoint"]["interval"] = 4
    doc["spec"]["runPolicy"] = {"restartInPlace": True}
    path = manifests.write(tmp_path / "tiny.yaml", doc)
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", "--fault-kill", "rank=1,step=5"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr + logged(proc)
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"attempt 0: rank 1 .*restarting in place \(job restarts 1/3.*\[path in-place, verdict retryable\]", out), out[-4000:]
    assert "resumed from step 4" in out
    node0 = logged(proc, "restart-0-node-0.log")
    attempt1 = node0[node0.index("[path in-place"):]
    assert re.search(r"^step=5 loss=", attempt1, re.M) and not re.search(r"^step=[1-4] loss=", attempt1, re.M)  # continued at step 5
    assert "restart of the whole gang" not in proc.stderr  # no gang restart
    assert "restart_in_place_retryable" in proc.stderr  # the goodput line


WARM_SCRIPT = f"""
import os, sys, time
rank, attempt = os.environ["RANK"], os.environ[{ENV_ATTEMPT!r}]
print(f"worker rank {{rank}} attempt {{attempt}} rdzv {{os.environ['PET_RDZV_ID'] if 'PET_RDZV_ID' in os.environ else os.environ.get('TORCHELASTIC_RUN_ID')}} agent {{os.getppid()}}", flush=True)
if attempt == "0":
    time.sleep(3)  # long enough for the next attempt's warm launcher to start
    sys.exit(3 if rank == "1" else 0)
"""


def test_an_in_place_attempt_starts_in_the_warm_launcher_with_its_own_arguments_and_environment(tmp_path):
    """Issue 29, the in-place restart's own start: while attempt 0 trains, each supervisor starts the next attempt's
    torchrun with its module imported (RAILTRAIN_SUPERVISOR_WARM=0.5: after 0.5 s instead of 10); attempt 1 runs in it,
    with attempt 1's environment (its attempt number and rendezvous id reach the workers) and the job's arguments, and
    the run ends as a cold start would. With the launcher turned off (``off``) no attempt says it."""
    script = tmp_path / "worker.py"
    script.write_text(WARM_SCRIPT)

    def run(warm: str) -> tuple[subprocess.CompletedProcess, str]:
        doc = manifests.job(command=["torchrun", str(script)], env=[{"name": "RAILTRAIN_SUPERVISOR_WARM", "value": warm}],
                            runPolicy={"restartInPlace": True, "restartBackoffSeconds": 0})  # fmt: skip
        path = manifests.write(tmp_path / f"job-{warm}.yaml", doc)
        proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        return proc, proc.stdout + proc.stderr + logged(proc)

    proc, out = run("0.5")
    assert proc.returncode == 0, out[-4000:]
    assert "railtrain supervisor (rank 0): attempt 1 started in the warm launcher" in out and "railtrain supervisor (rank 1): attempt 1 started in the warm launcher" in out, out[-4000:]
    for rank in (0, 1):
        first = re.search(rf"worker rank {rank} attempt 0 rdzv (\S+) agent (\d+)", out)
        second = re.search(rf"worker rank {rank} attempt 1 rdzv (\S+) agent (\d+)", out)
        assert first and second, out[-4000:]
        assert first.group(1).endswith("-0-0") and second.group(1).endswith("-0-1")  # the attempt's own rendezvous id, not the import-time one
        assert first.group(2) != second.group(2)  # another torchrun process: the warm one
    cold, out = run("off")
    assert cold.returncode == 0 and "warm launcher" not in out and "worker rank 1 attempt 1" in out, out[-4000:]
