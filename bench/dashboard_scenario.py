"""The cluster half of bench/dashboard_render.py: a scenario of jobs on KWOK nodes under the real operator.

research/tiny runs on two KWOK nodes whose pod IPs are on the loopback network, so the
operator's read of its rank 0 metrics endpoint reaches a real local gang; the other jobs'
pod exits are reported through KWOK, as tests/operator/clusterkit.end_pod does.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[dashboard {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def poll(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    """``check()``'s first truthy value (exceptions count as not yet), polled every ``interval`` s.

    Raises:
        TimeoutError: none within ``timeout`` seconds, naming ``what``.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Exception:  # noqa: BLE001 - not up yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


LOOPBACK_LABEL = "railtrain.dev/dashboard-loopback"
"""Label and taint key of the nodes whose pod IPs are on 127.0.0.0/8 (only research/tiny tolerates the taint)."""


def loopback_nodes(bc: Any, count: int = 2) -> list[str]:
    """Add ``count`` KWOK nodes whose pods get IPs on the loopback network (spec.podCIDR 127.0.1N.0/24; KWOK assigns
    pod IPs from a node's podCIDR), tainted so only research/tiny runs there; returns their names."""
    names = bc.local.add_gpu_nodes(count, 8, name_prefix=f"{bc.prefix}-loopback", labels={LOOPBACK_LABEL: "true"}, timeout=120)
    for i, name in enumerate(names):
        taints = (bc.core.read_node(name).spec.taints or []) + [{"key": LOOPBACK_LABEL, "value": "true", "effect": "NoSchedule"}]
        bc.core.patch_node(name, {"spec": {"podCIDR": f"127.0.{10 + i}.0/24", "podCIDRs": [f"127.0.{10 + i}.0/24"], "taints": taints}})
    return names


def tiny_job() -> dict[str, Any]:
    """examples/tiny as research/tiny, pinned to the loopback nodes (see :func:`loopback_nodes`)."""
    import yaml

    job = yaml.safe_load((REPO / "examples/tiny/trainingjob.yaml").read_text())
    job["spec"]["template"] = {"spec": {"nodeSelector": {LOOPBACK_LABEL: "true"},
                                        "tolerations": [{"key": LOOPBACK_LABEL, "operator": "Exists", "effect": "NoSchedule"}]}}
    return job


def scenario(bc: Any, beat: float, start_trainer: Callable[[], subprocess.Popen], trainer_timeout: float = 900) -> list[str]:
    """Submit and disturb jobs (module docstring, step 4); returns what happened, one line per event.

    ``start_trainer`` starts the local gang that stands in for research/tiny's pods once they are Running; the
    scenario waits for it to end and then reports those pods' exit with the gang's exit status.
    """
    sys.path.insert(0, str(REPO))
    from tests.operator.clusterkit import all_running, end_pod, finish, job_body, phase_is, pods_of

    from railtrain.crds import contract

    G, V, P = contract.API_GROUP, contract.API_VERSION, contract.PLURAL
    core, custom = bc.core, bc.custom
    events: list[str] = []

    def note(s: str) -> None:
        events.append(f"{time.strftime('%H:%M:%S', time.gmtime())} {s}")
        log(s)

    for ns in ("research", "platform"):
        core.create_namespace({"metadata": {"name": ns}})
        poll(lambda: core.read_namespaced_service_account("default", ns), 60, f"ServiceAccount {ns}/default")

    def submit(ns: str, name: str, nodes: int, **spec: Any) -> None:
        custom.create_namespaced_custom_object(G, V, ns, P, job_body(name, nodes=nodes, **spec))
        note(f"submitted {ns}/{name} ({nodes} nodes x 8 GPUs)")

    def running(ns: str, name: str, count: int, old: frozenset = frozenset()) -> list[Any]:
        pods = poll(lambda: all_running(core, ns, name, count, old), 180, f"{ns}/{name} Running")
        poll(lambda: phase_is(custom, ns, name, "Running"), 60, f"{ns}/{name} phase Running")
        note(f"{ns}/{name} Running")
        return pods

    custom.create_namespaced_custom_object(G, V, "research", P, tiny_job())
    note("submitted research/tiny (examples/tiny, 2 nodes x 1 process, on the loopback nodes)")
    tiny = running("research", "tiny", 2)
    trainer = start_trainer()
    note(f"the local tiny gang started; its rank 0 serves 0.0.0.0:9400, which research/tiny's pod IPs ({', '.join(sorted(p.status.pod_ip for p in tiny))}) reach")

    def report_exit() -> None:  # the pods end when the real gang does, with its exit status
        code = trainer.wait()
        for p in pods_of(core, "research", "tiny"):
            end_pod(core, "research", p.metadata.name, code)
        note(f"the local tiny gang exited {code}; research/tiny's pods report that exit")

    reporter = threading.Thread(target=report_exit, daemon=True)
    reporter.start()
    submit("research", "pretrain-7b", 4)
    submit("research", "finetune", 2, runPolicy={"backoffLimit": 3})
    submit("platform", "eval", 1, runPolicy={"backoffLimit": 0})
    running("research", "pretrain-7b", 4)
    ft = running("research", "finetune", 2)
    running("platform", "eval", 1)
    time.sleep(beat)
    submit("platform", "sweep", 8)  # 12 nodes, 7 taken: waits in the queue
    time.sleep(beat)
    end_pod(core, "research", ft[1].metadata.name, 1, contract.format_termination_message(contract.VERDICT_RETRYABLE, "Crash", "rank 1 exited with a segfault"))
    note("research/finetune rank 1 failed (retryable)")
    ft = running("research", "finetune", 2, frozenset(p.metadata.uid for p in ft))
    time.sleep(beat)
    end_pod(core, "platform", pods_of(core, "platform", "eval")[0].metadata.name, 1)
    poll(lambda: phase_is(custom, "platform", "eval", "Failed"), 60, "platform/eval Failed")
    note("platform/eval failed (exit 1, backoffLimit 0): Failed")
    time.sleep(beat)
    bad = ft[0].spec.node_name
    end_pod(core, "research", ft[0].metadata.name, 1, contract.format_termination_message(
        contract.VERDICT_HARDWARE_SUSPECT, "ParameterMismatch", "rank 0 parameter bytes differ", nodes=[bad], ranks=[0], step=40))
    note(f"research/finetune rank 0: hardware-suspect verdict naming {bad}")
    ft = running("research", "finetune", 2, frozenset(p.metadata.uid for p in ft))
    time.sleep(beat)
    finish(core, "research", "pretrain-7b")
    poll(lambda: phase_is(custom, "research", "pretrain-7b", "Succeeded"), 60, "pretrain-7b Succeeded")
    note("research/pretrain-7b Succeeded")
    running("platform", "sweep", 8)
    time.sleep(beat)
    finish(core, "research", "finetune")
    poll(lambda: phase_is(custom, "research", "finetune", "Succeeded"), 60, "finetune Succeeded")
    note("research/finetune Succeeded")
    reporter.join(trainer_timeout)
    if reporter.is_alive():
        raise TimeoutError(f"the local tiny gang did not end within {trainer_timeout:.0f}s")
    phase = "Succeeded" if trainer.returncode == 0 else "Failed"
    poll(lambda: phase_is(custom, "research", "tiny", phase), 60, f"research/tiny {phase}")
    note(f"research/tiny {phase}")
    return events
