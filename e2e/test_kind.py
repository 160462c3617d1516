"""Real pods on a real kind cluster: the operator in-cluster (Helm), the trainer in containers, torchrun rendezvous over DNS.

Case numbers follow the issue that asked for them: 1 the tiny example to
Succeeded, 2 a killed or deleted rank → gang restart → resume, 4 the memory
tier on the node survives the restart and is used, 5 get/describe/Events.
"""

from __future__ import annotations

import re

import pytest

from .conftest import railtrain, wait_for
from .kind_support import KindE2E, write_job

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]  # the first test also builds the images and starts the cluster

STEP_LINE = re.compile(r"^(?:\[rank 0\] )?step=(\d+) loss=([0-9.]+)", re.MULTILINE)  # a pod logs its own rank only
RESUMED = re.compile(r"resumed from step (\d+)")
TINY = "examples/tiny/trainingjob.yaml"
# torchrun is PID 1 of the trainer container; its worker is the other process running the module
# (this shell's own command line holds the pattern too, so it skips itself).
KILL_WORKER = (
    'for d in /proc/[0-9]*; do p=${d#/proc/}; { [ "$p" = 1 ] || [ "$p" = "$$" ]; } && continue; '
    'case "$(tr "\\0" " " < $d/cmdline 2>/dev/null)" in *"-m railtrain.trainer"*) kill -9 "$p";; esac; done; true'
)


def rank0_log(kind_cluster: KindE2E, name: str, ns: str) -> str:
    return kind_cluster.kubectl("logs", f"{name}-0", "-n", ns, check=False).stdout


def restarted(kind_cluster: KindE2E, name: str, ns: str) -> bool:
    """Whether the gang was restarted: a failure (``restarts``) or the infrastructure (``infrastructureRestarts``: node lost, pod deleted)."""
    status = kind_cluster.job(name, ns).get("status", {})
    return status.get("restarts", 0) + status.get("infrastructureRestarts", 0) >= 1


def losses(log: str) -> dict[int, float]:
    return {int(s): float(loss) for s, loss in STEP_LINE.findall(log)}


def workers_of(kind_cluster: KindE2E, name: str, ns: str) -> dict[int, str]:
    return {p["rank"]: p["node"] for p in kind_cluster.job(name, ns).get("status", {}).get("placement", [])}


def test_second_dev_up_reuses_the_cached_node_image(kind_cluster):
    """`railtrain dev up --kind` ran twice (with `dev down` between) for this session; the second start built nothing.

    How long the second start took is printed, not asserted: speed is measured, not timed in
    tests (the figures, with their load, are in e2e/README.md).
    """
    first, second = kind_cluster.node_image_ids
    assert first and first == second, kind_cluster.node_image_ids
    print(f"second railtrain dev up --kind to every node Ready: {kind_cluster.timings['second_dev_up']:.0f} s")
    nodes = kind_cluster.kubectl("get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.railtrain\\.dev/rack} {.status.capacity.nvidia\\.com/gpu}{'\\n'}{end}").stdout
    workers = sorted(line.split() for line in nodes.splitlines() if "-worker" in line)
    assert [w[1:] for w in workers] == [["rack-0", "8"], ["rack-0", "8"], ["rack-1", "8"]], nodes


def test_tiny_example_trains_in_two_pods_and_is_visible_with_get_describe_and_events(kind_cluster, kind_ns, tmp_path):
    """Cases 1 and 5: the example, submitted with the CLI, trains in 2 pods on 2 workers to Succeeded."""
    path, _ = write_job(tmp_path, TINY, kind_cluster.trainer_image)
    railtrain("submit", str(path), "-n", kind_ns, kubeconfig=kind_cluster.kubeconfig)
    wait_for(lambda: kind_cluster.phase("tiny", kind_ns) == "Running", 300, "tiny Running")
    placed = workers_of(kind_cluster, "tiny", kind_ns)
    assert sorted(placed) == [0, 1] and len(set(placed.values())) == 2, placed
    assert all("-worker" in node for node in placed.values()), placed
    pods = {p["metadata"]["name"]: p for p in kind_cluster.pods(kind_ns)}
    for rank, node in placed.items():  # the pods really run where the operator placed them, with the pod contract's command
        pod = pods[f"tiny-{rank}"]
        assert pod["spec"]["nodeName"] == node
        assert pod["spec"]["containers"][0]["command"] == ["torchrun", "-m", "railtrain.trainer"]
    shown = railtrain("get", "tiny", "-n", kind_ns, kubeconfig=kind_cluster.kubeconfig).stdout
    assert "Running" in shown and all(node in shown for node in placed.values()), shown

    wait_for(lambda: kind_cluster.phase("tiny", kind_ns) in ("Succeeded", "Failed"), 900, "tiny finished", interval=2)
    assert kind_cluster.phase("tiny", kind_ns) == "Succeeded"
    log = rank0_log(kind_cluster, "tiny", kind_ns)
    steps = losses(log)
    assert steps and min(steps) <= 10 and max(steps) == 300, log[-3000:]
    assert steps[max(steps)] < steps[min(steps)] - 1.0, steps  # the loss clearly falls, as in the local run
    assert "world=2" in log

    shown = railtrain("get", "tiny", "-n", kind_ns, kubeconfig=kind_cluster.kubeconfig).stdout
    assert "Succeeded" in shown and all(node in shown for node in placed.values()), shown
    described = kind_cluster.kubectl("describe", "trainingjob", "tiny", "-n", kind_ns).stdout
    for reason in ("GangCreated", "GangPlaced", "AllRanksRunning", "Completed"):
        assert reason in described, (reason, described)
    events = kind_cluster.kubectl("get", "events", "-n", kind_ns, "--field-selector", "involvedObject.kind=TrainingJob", "-o", "name").stdout
    assert events.strip(), "no Events on the TrainingJob"


def _run_until_step(kind_cluster: KindE2E, ns: str, name: str, step: int) -> None:
    wait_for(lambda: kind_cluster.phase(name, ns) == "Running", 300, f"{name} Running")
    wait_for(lambda: max(losses(rank0_log(kind_cluster, name, ns)) or [0]) >= step, 600, f"{name} at step {step}", interval=2)


def _restart_job(tmp_path, kind_cluster: KindE2E, ns: str, name: str, checkpoint: dict, steps: int = 160) -> None:
    path, _ = write_job(
        tmp_path, TINY, kind_cluster.trainer_image,
        args=["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", str(steps), "--lr-decay-steps", str(steps), "--log-every", "10"],
        checkpoint=checkpoint,
    )  # fmt: skip
    text = path.read_text().replace("name: tiny", f"name: {name}", 1)
    path.write_text(text)
    railtrain("submit", str(path), "-n", ns, kubeconfig=kind_cluster.kubeconfig)


@pytest.mark.parametrize("how", ["kill", "delete"])
def test_a_lost_rank_restarts_the_gang_which_resumes_from_the_newest_checkpoint(kind_cluster, kind_ns, tmp_path, how):
    """Case 2: rank 1's trainer killed (kill -9) or its pod deleted mid-run → gang restart → resume at step > 0 → Succeeded."""
    name = f"resume-{how}"
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "local": {"interval": 20, "keep": 2}})
    _run_until_step(kind_cluster, kind_ns, name, 50)
    if how == "kill":
        kind_cluster.kubectl("exec", f"{name}-1", "-n", kind_ns, "--", "sh", "-c", KILL_WORKER)
    else:
        kind_cluster.kubectl("delete", "pod", f"{name}-1", "-n", kind_ns, "--wait=false")
    wait_for(lambda: restarted(kind_cluster, name, kind_ns), 300, f"{name} restarted")
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 900, f"{name} finished", interval=2)
    assert kind_cluster.phase(name, kind_ns) == "Succeeded"
    log = rank0_log(kind_cluster, name, kind_ns)
    resumed = RESUMED.search(log)
    assert resumed and int(resumed.group(1)) >= 40, log[-3000:]  # the newest local checkpoint before the loss, not step 0


def test_memory_tier_on_the_node_survives_a_pod_restart_and_is_used_to_resume(kind_cluster, kind_ns, tmp_path):
    """Case 4: the memory tier (node tmpfs via hostPath) outlives rank 1's pod; the restarted gang on the same nodes loads it."""
    name = "resume-memory"
    _restart_job(tmp_path, kind_cluster, kind_ns, name, {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}})
    _run_until_step(kind_cluster, kind_ns, name, 50)
    before = workers_of(kind_cluster, name, kind_ns)
    kind_cluster.kubectl("exec", f"{name}-1", "-n", kind_ns, "--", "sh", "-c", KILL_WORKER)
    wait_for(lambda: restarted(kind_cluster, name, kind_ns), 300, f"{name} restarted")
    wait_for(lambda: kind_cluster.phase(name, kind_ns) in ("Succeeded", "Failed"), 900, f"{name} finished", interval=2)
    assert kind_cluster.phase(name, kind_ns) == "Succeeded"
    assert workers_of(kind_cluster, name, kind_ns) == before  # restarted on the same nodes
    log = rank0_log(kind_cluster, name, kind_ns)
    resumed = RESUMED.search(log)
    assert resumed and int(resumed.group(1)) >= 50, log[-3000:]
    assert re.search(r"checkpoint: loaded step \d+ from memory", log), log[-3000:]
