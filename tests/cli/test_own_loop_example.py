"""examples/own-loop under `railtrain run --local`: a plain PyTorch loop with the library's few lines gets the
built-in trainer's verdicts and recovery (one run: an activation bit flip, then a kill; issue 30)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from railtrain.crds import contract

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "own-loop"
CLI = [sys.executable, "-m", "railtrain.cli.main"]


def test_bitflip_then_kill_give_their_verdicts_and_the_run_resumes_to_the_end(tmp_path):
    """Rank 1's flipped activation at step 6 is found by re-execution (hardware-suspect, RerunMismatch, naming
    rank 1 on node local-1); the gang restarts from checkpoint 4; rank 0's kill at step 10 restarts it again from
    the newest complete checkpoint; the third gang trains to step 12 and saves it."""
    doc = yaml.safe_load((EXAMPLE / "trainingjob.yaml").read_text())
    doc["spec"]["command"] = ["torchrun", str(EXAMPLE / "train.py")]  # the committed manifest names it from the repository root
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    faults = ["--fault-bitflip", "rank=1,step=6,target=activation,bit=30", "--fault-kill", "rank=0,step=10"]
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", *faults], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out, err = proc.stdout, " ".join(proc.stderr.split())
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "railtrain: health: verdict=hardware-suspect reason=RerunMismatch ranks=[1] nodes=['local-1'] step=6: " in out, out
    assert re.search(r"gang failed: rank [01] exited with code 1: RerunMismatch: step 6: .*node\(s\) local-1 quarantined; restarting the whole gang", err), err
    assert "gang failed: rank 0 exited with code 1: worker rank 0 was killed by SIGKILL (exit code -9); restarting the whole gang" in err, err
    assert "all 2 nodes succeeded" in err and "after 2 restarts of the whole gang" in err, err  # the flip was not applied again
    last_gang = out[out.rindex("fault: rank 0 kills itself at step 10"):]  # after the kill (and its node's last lines shown)
    assert "[rank 0] resumed from step " in last_gang and "[rank 0] step=12 loss=" in last_gang and "[rank 0] done step=12" in last_gang, last_gang
    assert (tmp_path / "runs" / "own-loop" / "checkpoints" / "step-12").is_dir()


def test_a_malformed_contract_variable_is_one_sentence_and_exit_code_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", contract.ENV_JOB_NAME: "own-loop", contract.ENV_NAMESPACE: "default", contract.ENV_NNODES: "two",
           contract.ENV_NODE_RANK: "0", contract.ENV_PROCS_PER_NODE: "1", contract.ENV_RDZV_ADDR: "127.0.0.1"}  # fmt: skip
    proc = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--steps", "1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == contract.EXIT_USER_ERROR, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"railtrain: error: environment variable {contract.ENV_NNODES} must be an integer, got 'two'"]


def test_with_replica_groups_a_killed_group_heals_from_its_peer_and_the_run_finishes(tmp_path):
    """The library hook driving torchft (issue 31): the same own loop as 2 replica groups (``spec.faultTolerance``) with
    no other change than the lines the example already carries; ``--fault-kill-group group=1,step=4`` SIGKILLs group
    1. It is replaced alone, heals from group 0 (the hook's ``begin_step`` returns the quorum's step), and both train
    to the end: the run exits 0 and group 0 was never replaced. (With replica groups, ``StepHook`` needs the
    optimizer; without them, the example runs exactly as before.)"""
    pytest.importorskip("torchft")
    doc = yaml.safe_load((EXAMPLE / "trainingjob.yaml").read_text())
    doc["spec"]["command"] = ["torchrun", str(EXAMPLE / "train.py")]
    doc["spec"]["args"] = ["--steps", "40"]
    # minReplicas 2: the groups step together (this loop's steps take milliseconds: alone, group 0 would be done before
    # group 1 started); group 0 then waits for group 1's replacement, which heals from it
    doc["spec"]["faultTolerance"] = {"replicaGroups": 2, "minReplicas": 2, "quorumTimeoutSeconds": 300}
    doc["spec"].pop("checkpoint", None)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", "--fault-kill-group", "group=1,step=4"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out, err = proc.stdout, " ".join(proc.stderr.split())
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "replica group 1: healed from a peer at step" in out, out[-3000:]
    assert re.search(r"replica group 0: step 40, healed \d+ time\(s\), 0 replacement\(s\)", out + err), out[-2000:] + err[-2000:]
    assert re.search(r"replica group 1: step 40, healed [1-9]\d* time\(s\), 1 replacement\(s\)", out + err), out[-2000:] + err[-2000:]
