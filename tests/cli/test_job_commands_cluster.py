"""The job commands against the real control plane with the operator running: submit --wait (exit codes, and the
live view in a terminal), describe, get -o json, suspend, resume, delete, plan (live and from a snapshot), logs.

The CLI runs as a real process (``python -m railtrain.cli.main``), so exit statuses are the ones a CI pipeline sees.
KWOK runs no containers: a test ends a pod as the kubelet would report it (tests/operator/clusterkit.py ``end_pod``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from railtrain.cli.describe import duration
from railtrain.crds import contract
from tests.operator.clusterkit import all_running, end_pod, finish, job_body, job_status, pods_of
from tests.polling import wait_for

pytestmark = pytest.mark.cluster
CLI = [sys.executable, "-m", "railtrain.cli.main"]


def _env(cluster) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "80", "PYTHONUNBUFFERED": "1"}


def _cli(cluster, *args, timeout=60):
    return subprocess.run([*CLI, *args], env=_env(cluster), capture_output=True, text=True, timeout=timeout)


def _manifest(tmp_path, name, nodes=2, **spec):
    body = job_body(name, nodes=nodes, command=["python", "-c", "print('hi')"], **spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _phase(kube, namespace, name):
    """The job's phase, or None while the CLI process has not created it yet."""
    from kubernetes.client.rest import ApiException

    try:
        return job_status(kube.custom, namespace, name).get("phase")
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _start_wait(cluster, path, namespace):
    return subprocess.Popen([*CLI, "submit", str(path), "-n", namespace, "--wait"], env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_submit_wait_exits_0_when_the_job_succeeds(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    gpu_nodes(2)
    proc = _start_wait(cluster, _manifest(tmp_path, "ok"), namespace)
    try:
        wait_for(lambda: _phase(kube, namespace, "ok") == "Running", 90, "phase Running")
        finish(kube.core, namespace, "ok")
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    lines = out.strip().splitlines()
    assert lines[0] == f"trainingjob.railtrain.dev/ok created in namespace {namespace}"
    assert any(line.endswith("phase Running") for line in lines), out
    assert lines[-1].startswith("trainingjob ok succeeded"), out


def test_submit_wait_exits_1_and_names_the_cause_when_the_job_fails(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    gpu_nodes(2)
    proc = _start_wait(cluster, _manifest(tmp_path, "bad", runPolicy={"backoffLimit": 0}), namespace)
    try:
        wait_for(lambda: all_running(kube.core, namespace, "bad", 2), 90, "both pods Running")
        message = contract.format_termination_message(contract.VERDICT_USER_ERROR, "InvalidConfiguration", "--seq-len 4096 exceeds preset 'tiny''s max_seq_len 2048")
        end_pod(kube.core, namespace, "bad-1", code=2, message=message)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, out + err
    last = out.strip().splitlines()[-1]
    assert last.startswith("trainingjob bad failed: UserError: rank 1 exited with code 2: InvalidConfiguration: --seq-len 4096 exceeds"), out
    assert "Traceback" not in out + err

    described = _cli(cluster, "describe", "bad", "-n", namespace)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    for expected in ("Phase:", "Failed", "Placement", "Failed ranks", "user-error (InvalidConfiguration)", "Events", "GangPlaced"):
        assert expected in text, (expected, text)
    assert " ".join(text.strip().split("\n\n")[-1].split()).startswith("trainingjob bad failed: UserError: rank 1 exited with code 2")


def test_submit_wait_exits_1_when_the_job_can_never_fit(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    """3 nodes asked on a 2-node cluster: --wait stops on the operator's "can never fit" and the job stays Pending."""
    gpu_nodes(2)
    proc = _start_wait(cluster, _manifest(tmp_path, "huge", nodes=3), namespace)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, out + err
    last = " ".join(out.strip().splitlines()[-1].split())
    assert last.startswith("stopped following; trainingjob huge stays Pending: ") and "It can never fit" in last, out
    assert last.endswith("('railtrain delete huge' removes it)") and "Traceback" not in out + err
    assert _phase(kube, namespace, "huge") == "Pending"


def test_describe_json_suspend_resume_delete(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    gpu_nodes(2)
    created = _cli(cluster, "submit", str(_manifest(tmp_path, "life")), "-n", namespace)
    assert created.returncode == 0, created.stderr
    wait_for(lambda: all_running(kube.core, namespace, "life", 2), 90, "both pods Running")

    as_json = _cli(cluster, "describe", "life", "-n", namespace, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["job"]["metadata"]["name"] == "life" and len(doc["pods"]) == 2 and any(e["reason"] == "GangPlaced" for e in doc["events"])
    assert "managedFields" not in as_json.stdout
    got = json.loads(_cli(cluster, "get", "life", "-n", namespace, "-o", "json").stdout)
    assert got["status"]["jobRestarts"] == 0  # the printer column's value is 0, not blank

    railtrain = str(Path(sys.executable).parent / "railtrain")  # completion is keyed by the program's name
    completion = subprocess.run([railtrain], env={**_env(cluster), "_RAILTRAIN_COMPLETE": "complete_bash", "COMP_WORDS": f"railtrain describe -n {namespace} li",
                                             "COMP_CWORD": "4"}, capture_output=True, text=True, timeout=60)
    assert completion.stdout.split() == ["life"], completion.stdout + completion.stderr  # shell completion lists job names

    suspended = _cli(cluster, "suspend", "life", "-n", namespace)
    assert suspended.returncode == 0 and suspended.stdout.strip() == "trainingjob.railtrain.dev/life suspended", suspended.stderr
    wait_for(lambda: job_status(kube.custom, namespace, "life").get("phase") == "Suspended" and not pods_of(kube.core, namespace, "life"), 90, "suspended, pods gone")
    again = _cli(cluster, "suspend", "life", "-n", namespace)
    assert again.returncode == 0 and "already suspended" in again.stderr

    resumed = _cli(cluster, "resume", "life", "-n", namespace)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "trainingjob.railtrain.dev/life resumed", resumed.stderr
    twice = _cli(cluster, "resume", "life", "-n", namespace)
    assert twice.returncode == 0 and "trainingjob life is not suspended; nothing to do" in twice.stderr, twice.stderr
    wait_for(lambda: all_running(kube.core, namespace, "life", 2), 90, "the gang back")

    deleted = _cli(cluster, "delete", "life", "-n", namespace)
    assert deleted.returncode == 0 and deleted.stdout.strip() == f"trainingjob.railtrain.dev/life deleted from namespace {namespace}"
    gone = _cli(cluster, "describe", "life", "-n", namespace)
    assert gone.returncode == 1 and gone.stderr.strip() == f"error: trainingjob life not found in namespace {namespace}"
    missing = _cli(cluster, "delete", "life", "-n", namespace)
    assert missing.returncode == 1 and missing.stderr.strip() == f"error: trainingjob life not found in namespace {namespace}"


def test_plan_live_and_from_a_snapshot_agree_and_say_why_not(cluster, kube, namespace, gpu_nodes, tmp_path):
    """No operator needed: plan is read-only and runs the operator's admission code in the CLI."""
    names = gpu_nodes(2, gpus_per_node=8)
    fits = _manifest(tmp_path, "fits")
    live = _cli(cluster, "plan", str(fits), "-n", namespace, "--topology-preset", "railtrain", "-o", "json")
    assert live.returncode == 0, live.stderr
    decision = json.loads(live.stdout)["decision"]
    assert decision["admitted"] is True and sorted(decision["nodes"]) == sorted(names)

    snap = tmp_path / "cluster.yaml"
    taken = _cli(cluster, "snapshot")
    assert taken.returncode == 0, taken.stderr
    snap.write_text(taken.stdout)
    offline = _cli(cluster, "plan", str(fits), "-n", namespace, "--topology-preset", "railtrain", "--snapshot", str(snap), "-o", "json")
    assert json.loads(offline.stdout)["decision"]["nodes"] == decision["nodes"]

    too_big = _manifest(tmp_path, "big", nodes=3)
    why = _cli(cluster, "plan", str(too_big), "-n", namespace, "--snapshot", str(snap))
    assert why.returncode == 0, why.stderr
    text = " ".join(why.stdout.split())
    assert f"{namespace}/big would wait: Unschedulable: gang needs 3 nodes with 8 free GPUs each" in text
    assert "FOR THIS JOB" in why.stdout and max(len(line) for line in why.stdout.splitlines()) <= 80
    as_json = json.loads(_cli(cluster, "plan", str(too_big), "-n", namespace, "--snapshot", str(snap), "-o", "json").stdout)
    assert {n["name"]: n["verdict"] for n in as_json["nodes"]} == {name: "fits" for name in names}  # it fits no filter's refusal: too few nodes
    bad = _cli(cluster, "plan", str(too_big), "--snapshot", str(fits))
    assert bad.returncode == 2 and "not a cluster snapshot" in bad.stderr


def test_logs_of_a_kwok_pod_is_one_sentence(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    """KWOK simulates the kubelet without container logs; the real call goes through the API server to it, and
    whatever it answers is one sentence naming the pod, never a traceback (the interleaving is tests/cli/test_jobviews.py's)."""
    gpu_nodes(2)
    assert _cli(cluster, "submit", str(_manifest(tmp_path, "talk")), "-n", namespace).returncode == 0
    wait_for(lambda: all_running(kube.core, namespace, "talk", 2), 90, "both pods Running")
    for args in (["--all"], []):  # -f follows the job to its end: test_logs_follow_goes_on_across_a_restart_...
        one = _cli(cluster, "logs", "talk", "-n", namespace, *args)
        said = one.stdout + one.stderr
        assert "Traceback" not in said and "unexpected" not in said and "validation error" not in said, (args, said)
        if one.returncode:
            assert one.stderr.startswith("error: no log of pod talk-"), (args, one.stderr)
            assert "the API server could not reach the kubelet of the pod's node (" in one.stderr and "lookup" not in one.stderr, one.stderr
            assert "logs need a real kubelet" in one.stderr
            assert len(one.stderr.strip().splitlines()) == 1, (args, one.stderr)
    both = _cli(cluster, "logs", "talk", "-n", namespace, "--rank", "1", "--all")
    assert both.returncode == 2 and "--rank and --all exclude each other" in both.stderr
    wrong = _cli(cluster, "logs", "talk", "-n", namespace, "--rank", "7")
    assert wrong.returncode == 1 and "--rank 7: trainingjob talk has node ranks 0..1" in wrong.stderr


class _Lines:
    """A running CLI process whose stdout and stderr are collected line by line as they come (for polling)."""

    def __init__(self, cluster, *args):
        self.proc = subprocess.Popen([*CLI, *args], env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, into):
        for line in stream:
            into.append(line.rstrip("\n"))

    def said(self) -> str:
        return "\n".join(self.out) + "\n" + "\n".join(self.err)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(10)
        return code


def test_logs_follow_goes_on_across_a_restart_and_exits_with_the_jobs_outcome(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    """Issue 26 item 9: `logs -f` picked the pods once, so it stopped with the first gang and exited 0 whatever the job
    did next. Now it follows the job: a retryable failure restarts the gang, -f prints the attempt marker and reads the
    new gang's pods; the next failure (a user error) fails the job, and -f ends with exit status 1 and the job's cause.
    KWOK pods have no container logs: each pod's log is one sentence on stderr, and following goes on."""
    gpu_nodes(2)
    path = _manifest(tmp_path, "again", runPolicy={"backoffLimit": 3, "restartBackoffSeconds": 0})
    assert _cli(cluster, "submit", str(path), "-n", namespace).returncode == 0
    first = wait_for(lambda: all_running(kube.core, namespace, "again", 2), 90, "gang 1 Running")
    follow = _Lines(cluster, "logs", "again", "-n", namespace, "--all", "-f")
    try:
        # -f has picked up both pods of the first gang (on KWOK: one sentence each, that its log cannot be read)
        wait_for(lambda: sum("no log of pod again-" in line for line in follow.err) >= 2 or follow.proc.poll() is not None, 90, "both pods of gang 1 read")
        assert follow.proc.poll() is None, follow.said()  # still following the job
        retryable = contract.format_termination_message(contract.VERDICT_RETRYABLE, "Crash", "segfault")
        end_pod(kube.core, namespace, "again-1", code=1, message=retryable)
        wait_for(lambda: all_running(kube.core, namespace, "again", 2, {p.metadata.uid for p in first}), 90, "gang 2 Running")
        marker = "==> trainingjob again: attempt 2 (restart 1) <=="
        wait_for(lambda: marker in follow.out or follow.proc.poll() is not None, 60, "the attempt marker")
        assert follow.proc.poll() is None and marker in follow.out, follow.said()
        wait_for(lambda: sum("no log of pod again-" in line for line in follow.err) >= 4, 90, "both pods of gang 2 read")
        user_error = contract.format_termination_message(contract.VERDICT_USER_ERROR, "BadFlag", "--lr must be > 0")
        end_pod(kube.core, namespace, "again-0", code=2, message=user_error)
        code = follow.wait(120)
    finally:
        follow.proc.kill()
    assert code == 1, follow.said()
    assert follow.err[-1].startswith("trainingjob again failed: UserError: rank 0 exited with code 2: BadFlag: --lr must be > 0"), follow.said()
    assert "Traceback" not in follow.said()


def test_validate_server_asks_the_api_server_about_the_job_and_one_rendered_pod(cluster, kube, namespace, tmp_path):
    """Issue 26 item 10: a volume named Scratch_Vol passes every check of the CRD (a template's volumes are the API
    server's pod rules) and the job then fails when the operator creates its pods. validate --server dry-runs the job
    and its rank-0 pod as the operator renders it, and says the server's sentence; offline validate says that
    pod-level rules are the server's. Nothing is created (no operator runs here either)."""
    body = job_body("scratch", nodes=1, command=["python", "-c", "print('hi')"])
    body["spec"]["template"] = {"spec": {
        "volumes": [{"name": "Scratch_Vol", "emptyDir": {}}],
        "containers": [{"name": "trainer", "volumeMounts": [{"name": "Scratch_Vol", "mountPath": "/scratch"}]}],
    }}
    path = tmp_path / "scratch.yaml"
    path.write_text(yaml.safe_dump(body))

    offline = _cli(cluster, "validate", str(path))
    assert offline.returncode == 0, offline.stderr
    assert "pod-level rules" in offline.stderr and "'railtrain validate --server'" in offline.stderr, offline.stderr
    assert len(offline.stderr.strip().splitlines()) == 1

    checked = _cli(cluster, "validate", str(path), "--server", "-n", namespace)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    said = " ".join(checked.stderr.split())
    assert said.startswith(f"error: {path}: the API server would refuse the pods of trainingjob scratch"), said
    assert "spec.volumes[" in said and "Scratch_Vol" in said and "RFC 1123" in said and "Traceback" not in said, said
    assert not kube.custom.list_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL)["items"]
    assert not kube.core.list_namespaced_pod(namespace).items

    body["spec"]["template"]["spec"]["volumes"][0]["name"] = "scratch"
    body["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "scratch"
    path.write_text(yaml.safe_dump(body))
    fine = _cli(cluster, "validate", str(path), "--server", "-n", namespace)
    assert fine.returncode == 0 and fine.stdout.strip() == f"{path}: valid TrainingJob scratch (1 node × 8 processes, world size 8)", fine.stdout + fine.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a pseudo-terminal")
def test_the_live_view_renders_updates_and_ends_in_a_terminal(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    """submit --wait in a real pseudo-terminal (tmux): the live line shows the phase, changes as the job runs, the
    progress bar follows status.progress, and the command ends with the job's exit status. The job is submitted
    suspended and resumed only after the first live line is on screen, so it is seen Suspended before it is seen
    Running (an idle cluster admits a gang faster than the first frame is drawn)."""
    gpu_nodes(2)
    path = _manifest(tmp_path, "live", runPolicy={"suspend": True})
    socket = f"rt-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "exit-status"
    command = f"{' '.join(CLI)} submit {path} -n {namespace} --wait; echo $? > {done}; sleep 60"
    env = _env(cluster)
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "24", "-e", f"KUBECONFIG={env['KUBECONFIG']}", command], check=True, env=env)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True).stdout

        first = wait_for(lambda: (s := screen()) and "live  " in s and s, 60, "the live line")
        wait_for(lambda: (s := screen()) and "live  Suspended" in s, 60, "the live line to show Suspended")
        assert _cli(cluster, "resume", "live", "-n", namespace).returncode == 0
        wait_for(lambda: _phase(kube, namespace, "live") == "Running", 90, "phase Running")
        running = wait_for(lambda: (s := screen()) and "live  Running" in s and s, 60, "the live line to show Running")
        assert running != first
        for step, loss in ((10, 3.25), (60, 1.75)):  # status.progress as the operator writes it from rank 0's metrics (KWOK pods serve none)
            progress = {"step": step, "totalSteps": 100, "loss": loss, "tokensPerSecond": 5000.0, "etaSeconds": 100 - step,
                        "lastUpdateTime": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
            kube.custom.patch_namespaced_custom_object_status(contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, "live", {"status": {"progress": progress}})
            bar = wait_for(lambda: (s := screen()) and f"step {step}/100" in s and s, 30, f"the progress bar at step {step}")
            assert f"{step}%" in bar and f"loss {loss:.3g}" in bar and "tokens/s 5,000" in bar and f"ETA {duration(100 - step)}" in bar, bar
        finish(kube.core, namespace, "live")
        wait_for(done.exists, 90, "the command to end")
        end = screen()
        assert done.read_text().strip() == "0", end
        assert "trainingjob live succeeded" in end and "live  Running" not in end  # the live area is gone, the result stays
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a pseudo-terminal")
def test_ctrl_c_stops_following_and_leaves_the_job_running(cluster, kube, namespace, gpu_nodes, operator, tmp_path):
    gpu_nodes(2)
    path = _manifest(tmp_path, "stay")
    socket = f"rt-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "exit-status"
    env = _env(cluster)
    tmux = ["tmux", "-L", socket]
    command = f"{' '.join(CLI)} submit {path} -n {namespace} --wait; echo $? > {done}; sleep 60"
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "24", "-e", f"KUBECONFIG={env['KUBECONFIG']}", command], check=True, env=env)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True).stdout

        wait_for(lambda: "stay  Running" in screen(), 90, "the live line to show Running")
        subprocess.run([*tmux, "send-keys", "C-c"], check=True)
        wait_for(done.exists, 30, "the command to end")
        assert done.read_text().strip() == "130"
        text = " ".join(screen().split())
        assert "stopped following; trainingjob stay keeps running ('railtrain delete stay' stops it)" in text
        assert _phase(kube, namespace, "stay") == "Running" and all_running(kube.core, namespace, "stay", 2)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
