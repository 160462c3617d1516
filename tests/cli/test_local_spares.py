"""``railtrain run --local --spares N`` (``spec.spares``): hot spare nodes wait beside the gang; when a node's
processes are all SIGKILLed (``--fault-lose-node``, its machine lost) a spare takes exactly that node's rank and the
other nodes restart their processes in place under the same supervisors: no gang restart. Node rank 0 lost (it hosts
the coordinator at first) too: the next supervisor hosts the coordinator from its copy and the spare takes rank 0. The scripts are small Python programs (no torch) except the trainer test,
which checks the step the spare resumed from."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from railtrain.crds import contract
from railtrain.crds.supervisor import ENV_ATTEMPT, ENV_SPARE_WARMUP
from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]
REPO = Path(__file__).resolve().parents[2]

SCRIPT = f"""
import os, time
rank, attempt, node = os.environ[{contract.ENV_NODE_RANK!r}], os.environ[{ENV_ATTEMPT!r}], os.environ[{contract.ENV_NODE_NAME!r}]
for step in range(1, 31):
    print(f"step={{step}} loss=1.0 rank={{rank}} attempt={{attempt}} node={{node}} pid={{os.getppid()}}", flush=True)
    time.sleep(0.2)
"""


def run(tmp_path: Path, *flags: str, nodes: int = 3, **spec) -> subprocess.CompletedProcess:
    doc = manifests.job(command=["python", "-c", SCRIPT], nodes=nodes, env=[{"name": ENV_SPARE_WARMUP, "value": ""}],
                        runPolicy={"restartInPlace": True, "restartBackoffSeconds": 0}, **spec)  # fmt: skip
    path = manifests.write(tmp_path / "job.yaml", doc)
    return subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", *flags], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def logs(proc: subprocess.CompletedProcess) -> Path:
    return Path(re.search(r"^logs: (\S+)", proc.stderr, re.M).group(1))


def started(path: Path, cwd: Path) -> tuple[subprocess.Popen, Path]:
    """``run --local`` of ``path`` started in the background, and its log folder once it said where."""
    proc = subprocess.Popen([*CLI, "run", str(path), "--local", "--grace", "2"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if m := re.match(r"^logs: (\S+)", line):
            return proc, Path(m.group(1))
    proc.kill()
    raise AssertionError(f"run --local ended without naming its log folder: {proc.communicate()}")


def test_a_lost_node_s_rank_goes_to_the_spare_and_the_others_restart_in_place(tmp_path):
    proc = run(tmp_path, "--spares", "1", "--fault-lose-node", "node=1,step=8")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "a hot spare takes node rank 1's place, the others restarting in place (job restarts 0/3, infrastructure restarts 1/10) [path spare" in out
    folder = logs(proc)
    assert sorted(p.name for p in folder.glob("*.log")) == [f"restart-0-node-{i}.log" for i in range(5)]  # no second gang; node 4 is the refill
    assert "hot spare spare-1 started as local node 4: the spare pool is full again" in proc.stderr
    spare = (folder / "restart-0-node-3.log").read_text()
    assert "railtrain spare spare-0: takes node rank 1 at attempt 1" in spare
    assert re.search(r"^step=30 loss=1.0 rank=1 attempt=1 node=local-3 ", spare, re.M)  # rank 1 finished on the spare's node
    lost = (folder / "restart-0-node-1.log").read_text()
    assert "attempt=1" not in lost  # the lost node ran nothing after its loss
    for survivor in (0, 2):
        text = (folder / f"restart-0-node-{survivor}.log").read_text()
        pids = set(re.findall(r"pid=(\d+)", text))
        assert len(pids) == 1 and re.search(rf"^step=30 loss=1.0 rank={survivor} attempt=1 ", text, re.M)  # same supervisor, in place
    assert "restart_in_place_spare" in proc.stderr and "restart of the whole gang" not in proc.stderr
    assert "starting 3 ranks on 3 local nodes and 1 hot spare (waiting outside the world" in proc.stderr


def test_node_rank_0_lost_its_coordinator_moves_to_node_1_and_the_spare_takes_rank_0(tmp_path):
    proc = run(tmp_path, "--spares", "1", "--fault-lose-node", "node=0,step=5", nodes=2)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "restart of the whole gang" not in proc.stderr and "restart_in_place_spare" in proc.stderr
    folder = logs(proc)
    assert sorted(p.name for p in folder.glob("*.log")) == [f"restart-0-node-{i}.log" for i in range(4)]  # no second gang; node 3 is the refill
    refill = (folder / "restart-0-node-3.log").read_text()
    assert "railtrain spare spare-1: waiting beside the gang" in refill, refill  # it found the coordinator where it moved (node 1's supervisor)
    survivor = (folder / "restart-0-node-1.log").read_text()
    assert "railtrain supervisor (rank 1): the gang's coordinator (node rank 0's) is silent; this supervisor hosts it from attempt 0 on" in survivor
    assert "a hot spare takes node rank 0's place" in survivor
    assert len(set(re.findall(r"pid=(\d+)", survivor))) == 1 and re.search(r"^step=30 loss=1.0 rank=1 attempt=1 ", survivor, re.M)
    spare = (folder / "restart-0-node-2.log").read_text()
    assert "railtrain spare spare-0: takes node rank 0 at attempt 1" in spare
    assert re.search(r"^step=30 loss=1.0 rank=0 attempt=1 node=local-2 ", spare, re.M)  # rank 0 finished on the spare's node
    assert "attempt=1" not in (folder / "restart-0-node-0.log").read_text()


def test_spares_and_the_lose_node_flag_refuse_what_cannot_work(tmp_path):
    doc = manifests.job(command=["python", "-c", "pass"])
    path = manifests.write(tmp_path / "plain.yaml", doc)
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--spares", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--spares 1: spec.spares needs spec.runPolicy.restartInPlace: true" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run(tmp_path, "--spares", "1", "--fault-lose-node", "node=3,step=2")
    assert proc.returncode == 2 and "--fault-lose-node: node 3 does not exist (spec.nodes is 3)" in proc.stderr, proc.stderr
    assert "starting" not in proc.stderr  # refused before anything starts
    doc = manifests.job(command=["python", "-c", "pass"], args=["--steps", "40"], runPolicy={"restartInPlace": True})
    path = manifests.write(tmp_path / "steps.yaml", doc)
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--spares", "1", "--fault-lose-node", "node=1,step=99"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "--fault-lose-node: step 99 comes after the job's last step (40, --steps in spec.args)" in proc.stderr, proc.stderr


def test_the_spare_takes_a_lost_trainer_node_s_rank_0_and_resumes_from_the_checkpoint(tmp_path):
    """The tiny trainer, 2 nodes and 1 spare: node 0's machine (the coordinator's and torch's rendezvous store's host)
    is lost at step 6, after the step-4 checkpoint; node 1's supervisor hosts the coordinator, the spare takes rank 0
    and hosts the next attempt's rendezvous store (its node-local tiers are empty), both resume from the step-4
    checkpoint and finish; the screen follows rank 0 onto the spare."""
    doc = yaml.safe_load((REPO / "examples/tiny/trainingjob.yaml").read_text())
    args = doc["spec"]["args"]
    args[args.index("--steps") + 1], args[args.index("--log-every") + 1] = "8", "1"
    args += ["--seq-len", "32", "--no-checkpoint-async"]  # the step-4 checkpoint is complete before step 5 starts
    doc["spec"]["checkpoint"]["interval"] = 4
    doc["spec"]["runPolicy"] = {"restartInPlace": True}
    doc["spec"]["spares"] = 1
    path = manifests.write(tmp_path / "tiny.yaml", doc)
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", "--fault-lose-node", "node=0,step=6"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    folder = logs(proc)
    node1 = (folder / "restart-0-node-1.log").read_text()
    assert "this supervisor hosts it from attempt 0 on" in node1 and "[path spare, verdict retryable]" in node1, node1[-3000:]
    spare = (folder / "restart-0-node-2.log").read_text()
    assert "takes node rank 0 at attempt 1" in spare
    resumed = int(re.search(r"^resumed from step (\d+)", spare, re.M).group(1))  # rank 0 logs for the world
    assert resumed >= 4 and re.search(r"^step=8 loss=", spare, re.M)
    assert "threads: 1 per process" in node1[node1.index("[path spare"):]  # node 1's second attempt, in place
    assert re.search(r"^\[rank 0\] step=8 loss=", proc.stdout, re.M)  # the spare's lines, shown as rank 0's
    assert "restart_in_place_spare" in proc.stderr and not (folder / "restart-1-node-0.log").exists()  # no gang restart


def test_a_node_s_supervisor_stopped_as_for_a_deleted_pod_gives_its_rank_to_the_spare_at_once(tmp_path):
    """SIGTERM to node 1's supervisor, as the kubelet sends when the pod is deleted or evicted (a drain): it tells the
    coordinator it is leaving, so its rank goes to the spare without the 5 s of silence, and it stays until then."""
    import os
    import signal
    import time

    doc = manifests.job(command=["python", "-c", SCRIPT.replace("range(1, 31)", "range(1, 61)")], nodes=2, env=[{"name": ENV_SPARE_WARMUP, "value": ""}],
                        runPolicy={"restartInPlace": True, "restartBackoffSeconds": 0}, spares=1)  # fmt: skip
    path = manifests.write(tmp_path / "job.yaml", doc)
    proc, folder = started(path, tmp_path)
    try:
        node1 = folder / "restart-0-node-1.log"
        deadline = time.monotonic() + 120
        while not re.search(r"^step=5 .* pid=(\d+)", node1.read_text() if node1.exists() else "", re.M):
            assert time.monotonic() < deadline, "node 1 never reached step 5"
            time.sleep(0.1)
        supervisor = int(re.search(r"^step=5 .* pid=(\d+)", node1.read_text(), re.M).group(1))
        os.kill(supervisor, signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    text = node1.read_text()
    assert "railtrain supervisor (rank 1): stopped; hot spare spare-0 took this rank" in text, text[-2000:]
    survivor = (folder / "restart-0-node-0.log").read_text()
    assert "node rank 1's supervisor was stopped (its pod on local-1 deleted or evicted); a hot spare takes node rank 1's place" in survivor
    assert len(set(re.findall(r"pid=(\d+)", survivor))) == 1 and re.search(r"^step=60 loss=1.0 rank=0 attempt=1 ", survivor, re.M)
    assert re.search(r"^step=60 loss=1.0 rank=1 attempt=1 node=local-2 ", (folder / "restart-0-node-2.log").read_text(), re.M)
    assert "restart of the whole gang" not in err and "restart_in_place_spare" in err


SDC_SCRIPT = f"""
import json, os, sys, time
rank, attempt, node = os.environ[{contract.ENV_NODE_RANK!r}], os.environ[{ENV_ATTEMPT!r}], os.environ[{contract.ENV_NODE_NAME!r}]
for step in range(1, 31):
    if rank == "1" and attempt == "0" and step == 8:  # the health monitor's re-execution differed on this node: a hardware-suspect verdict
        with open(os.environ[{contract.ENV_TERMINATION_MESSAGE_PATH!r}], "w") as f:
            f.write({contract.format_termination_message(contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_RERUN_MISMATCH, "re-executed step 8 differs", nodes=["local-1"], ranks=[1])!r})
        sys.exit(1)
    print(f"step={{step}} loss=1.0 rank={{rank}} attempt={{attempt}} node={{node}} pid={{os.getppid()}}", flush=True)
    time.sleep(0.2)
"""


def test_a_hardware_verdict_sends_its_node_out_and_the_spare_takes_the_rank_without_a_gang_restart(tmp_path):
    """Issue 29, "when a node is lost or quarantined, a spare takes exactly the lost rank's place": rank 1's verdict
    names its node (hardware-suspect: quarantined at once by the default rule). With a spare waiting, the node leaves
    without a gang restart: the spare takes rank 1, ranks 0 and 2 restart in place under the same supervisors, rank 1's
    old supervisor is told its rank is gone and why, and leaves. (On a cluster the operator then quarantines the node:
    tests/operator/test_spares_cluster.py.) On the old code this restarted the whole gang."""
    doc = manifests.job(command=["python", "-c", SDC_SCRIPT], nodes=3, env=[{"name": ENV_SPARE_WARMUP, "value": ""}],
                        runPolicy={"restartInPlace": True, "restartBackoffSeconds": 0})  # fmt: skip
    path = manifests.write(tmp_path / "job.yaml", doc)
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", "--spares", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "node(s) local-1 quarantined; a hot spare takes node rank 1's place, the others restarting in place" in out, out
    assert "restart of the whole gang" not in proc.stderr
    folder = logs(proc)
    assert sorted(p.name for p in folder.glob("*.log")) == [f"restart-0-node-{i}.log" for i in range(5)]  # no second gang; node 4 is the refill
    spare = (folder / "restart-0-node-3.log").read_text()
    assert "railtrain spare spare-0: takes node rank 1 at attempt 1" in spare
    assert re.search(r"^step=30 loss=1.0 rank=1 attempt=1 node=local-3 ", spare, re.M)
    old = (folder / "restart-0-node-1.log").read_text()
    assert "node rank 1 was given to hot spare spare-0: its node must be left (hardware-suspect verdict of rank 1, RerunMismatch); leaving" in old, old
    assert "attempt=1" not in old
    for survivor in (0, 2):
        text = (folder / f"restart-0-node-{survivor}.log").read_text()
        assert len(set(re.findall(r"pid=(\d+)", text))) == 1 and re.search(rf"^step=30 loss=1.0 rank={survivor} attempt=1 ", text, re.M)


def test_the_pool_is_refilled_so_a_second_stopped_node_also_goes_to_a_spare(tmp_path):
    """Issue 29, "the operator refills the spare pool in the background", locally: after spare-0 takes rank 1, ``run
    --local`` starts spare-1 (as the operator creates a new spare pod); stopping the supervisor that now runs rank 1
    gives the rank to spare-1 in its turn: two takeovers, no gang restart, and spare-2 waits at the end. Fails on the
    old main (no refill: the second stop found no spare and the whole gang restarted)."""
    import os
    import signal
    import time

    doc = manifests.job(command=["python", "-c", SCRIPT.replace("range(1, 31)", "range(1, 91)")], nodes=2, env=[{"name": ENV_SPARE_WARMUP, "value": ""}],
                        runPolicy={"restartInPlace": True, "restartBackoffSeconds": 0}, spares=1)  # fmt: skip
    path = manifests.write(tmp_path / "job.yaml", doc)
    def supervisor_at(log: Path, pattern: str) -> int:
        deadline = time.monotonic() + 120
        while not (m := re.search(pattern, log.read_text() if log.exists() else "", re.M)):
            assert time.monotonic() < deadline, f"{log.name}: never matched {pattern!r}"
            time.sleep(0.1)
        return int(m.group(1))

    proc, folder = started(path, tmp_path)
    try:
        os.kill(supervisor_at(folder / "restart-0-node-1.log", r"^step=5 .* pid=(\d+)"), signal.SIGTERM)
        supervisor_at(folder / "restart-0-node-3.log", r"^railtrain spare spare-1: waiting beside the gang at attempt (\d+)")  # the refill is ready
        os.kill(supervisor_at(folder / "restart-0-node-2.log", r"^step=\d+ loss=1.0 rank=1 attempt=1 node=local-2 pid=(\d+)"), signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    assert "hot spare spare-1 started as local node 3: the spare pool is full again" in err, err
    assert "hot spare spare-2 started as local node 4" in err, err
    second = (folder / "restart-0-node-3.log").read_text()
    assert "railtrain spare spare-1: takes node rank 1 at attempt 2" in second, second[-2000:]
    assert re.search(r"^step=90 loss=1.0 rank=1 attempt=2 node=local-3 ", second, re.M), second[-2000:]
    survivor = (folder / "restart-0-node-0.log").read_text()
    assert len(set(re.findall(r"pid=(\d+)", survivor))) == 1 and re.search(r"^step=90 loss=1.0 rank=0 attempt=2 ", survivor, re.M)
    assert not list(folder.glob("restart-1-*")) and "restart of the whole gang" not in err  # no second gang


def test_the_lose_node_fault_waits_for_every_spare_to_wait_beside_the_gang():
    """Stop 48's runs of the lost-coordinator test, under load: the spare started seconds after the ranks, node 0 was
    lost at step 5 before the spare had heard its coordinator (or before node 1's supervisor had), nobody could follow
    it to node 1's supervisor, and the gang restarted. The fault now fires at node rank 0's first step line at or
    after ``step`` once every node has printed a line and every spare has said it waits. (On the old code it fired at
    step 5 with no spare waiting.)"""
    from railtrain.cli import runlocal
    from railtrain.crds.validation import parse_manifest

    doc = manifests.job(command=["python", "-c", "pass"], nodes=2, spares=2, runPolicy={"restartInPlace": True})
    job = parse_manifest(doc)
    killed: list[int] = []

    class Gang:
        def kill_node(self, node: int) -> None:
            killed.append(node)

    said: list[str] = []
    watch = runlocal.lose_node_watcher("node=0,step=5", job, lambda: Gang(), said.append)
    watch(0, "step=5 loss=1.0")
    watch(2, "railtrain spare spare-0: waiting beside the gang at attempt 0")
    watch(0, "step=6 loss=1.0")
    assert killed == []  # one of two spares waits, and node 1 has not trained yet
    watch(3, "railtrain spare spare-1: waiting beside the gang at attempt 0")
    watch(0, "step=7 loss=1.0")
    assert killed == []  # node 1 printed nothing yet (stop 48: its supervisor, never heard, could not host the coordinator)
    watch(1, "threads: 1 per process")  # node 1's first line: not node rank 0's step, so not yet
    assert killed == []
    watch(0, "step=8 loss=1.0")
    watch(0, "step=9 loss=1.0")
    assert killed == [0] and said == ["--fault-lose-node: node 0's processes killed at step 8 (its machine lost)"]
