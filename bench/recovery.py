"""Recovery time: from a fault to training again, on the local control plane and in local real runs.

**Operator part** (``--part operator``; KWOK nodes, a real kube-apiserver,
scheduler and controller-manager, the operator as a subprocess): an
``--nodes``-node gang (default 8) runs; the fault is injected; the clock stops
when every rank of a *new* gang is Running. Fault kinds:

``rank-killed``
    one rank's trainer dies (the pod ends Failed, exit code 137, no verdict):
    a job restart;
``node-lost``
    one rank's Node is deleted: NodeLost, the gang restarts on a spare node;
``hardware-suspect``
    one rank ends with a hardware-suspect verdict naming its node: the node is
    quarantined and the gang restarts elsewhere;
``hang``
    one rank ends with a hang verdict: a job restart;
``rank-deleted``
    one rank's pod is deleted by hand: RankVanished.

KWOK marks a pod Running as soon as it is bound, so this is the operator's
and the control plane's share of recovery; the trainer's share is the local
part. Between measurements the job is deleted, quarantine taints are
removed and lost nodes replaced (untimed).

**Local part** (``--part local``): fault → first training step of the
restarted gang and steps lost, in local real runs (bench/recovery_local.py).

Run from the repository root::

    python bench/recovery.py --part operator --repeats 5
    python bench/recovery.py --part local --local-repeats 3 --local-faults rank-killed,node-lost
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from harness import RESULTS_DIR, Table, fmt_s, machine, median, write_json
from kwokbench import BenchCluster, Operator, trainingjob

from railtrain.crds import contract
from railtrain.operator.scheduling.quarantine import TAINT_KEY

G, V, P = contract.API_GROUP, contract.API_VERSION, contract.PLURAL
FAULTS = ("rank-killed", "node-lost", "hardware-suspect", "hang", "rank-deleted")
GOAL_S = 3.0


def _new_gang_running(bc: BenchCluster, ns: str, name: str, size: int, old: set[str]) -> bool:
    pods = bc.core.list_namespaced_pod(ns, label_selector=f"{contract.LABEL_JOB_NAME}={name}").items
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    return len(live) == size and all(p.status.phase == "Running" and p.metadata.uid not in old for p in live)


def _poll(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll until ``check()``; returns the monotonic time it first held. Raises TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def inject(bc: BenchCluster, ns: str, fault: str, pod: Any) -> None:
    """Inject ``fault`` on ``pod`` (a V1Pod of the running gang)."""
    name, node = pod.metadata.name, pod.spec.node_name
    if fault == "node-lost":
        bc.core.delete_node(node)
    elif fault == "rank-deleted":
        bc.core.delete_namespaced_pod(name, ns)
    else:
        code, message = {
            "rank-killed": ("137", ""),
            "hardware-suspect": ("1", contract.format_termination_message(contract.VERDICT_HARDWARE_SUSPECT, "ParameterMismatch", "bench", nodes=[node], ranks=[3])),
            "hang": ("1", contract.format_termination_message(contract.VERDICT_HANG, "NoProgress", "bench", nodes=[node], ranks=[3])),
        }[fault]
        bc.core.patch_namespaced_pod(name, ns, {"metadata": {"labels": {"railtrain.dev/kwok-exit": code}, "annotations": {"railtrain.dev/kwok-message": message}}})


def measure_operator(bc: BenchCluster, ns: str, fault: str, size: int, rep: str, timeout: float) -> dict[str, Any]:
    """One measurement: job Running → fault → new gang Running; returns the sample and restores the cluster."""
    name = f"rec-{fault}-{rep}"
    bc.custom.create_namespaced_custom_object(G, V, ns, P, trainingjob(name, size, 8) | {"metadata": {"name": name}})
    _poll(lambda: _new_gang_running(bc, ns, name, size, set()), timeout, f"{name} Running", 0.2)
    pods = sorted(bc.core.list_namespaced_pod(ns, label_selector=f"{contract.LABEL_JOB_NAME}={name}").items, key=lambda p: p.metadata.name)
    victim = next(p for p in pods if p.metadata.name.endswith("-3"))
    old = {p.metadata.uid for p in pods}
    t0 = time.monotonic()
    inject(bc, ns, fault, victim)
    t1 = _poll(lambda: _new_gang_running(bc, ns, name, size, old), timeout, f"{name}: a new gang Running after {fault}")
    status = bc.custom.get_namespaced_custom_object(G, V, ns, P, name).get("status") or {}
    sample = {"fault": fault, "rep": rep, "seconds": round(t1 - t0, 3), "load1": round(os.getloadavg()[0], 2),
              "jobRestarts": status.get("jobRestarts", 0), "infrastructureRestarts": status.get("infrastructureRestarts", 0)}
    bc.empty(ns)
    if fault == "hardware-suspect":
        node = bc.core.read_node(victim.spec.node_name)
        taints = [t for t in node.spec.taints or [] if t.key != TAINT_KEY]
        bc.core.patch_node(node.metadata.name, {"spec": {"taints": [t.to_dict() for t in taints] or None}})
    if fault == "node-lost":
        bc.nodes.remove(victim.spec.node_name)
        bc.nodes.extend(bc.local.add_gpu_nodes(1, 8, name_prefix=f"{bc.prefix}-spare-{name}", timeout=120))
    return sample


def run_operator(args: argparse.Namespace) -> dict[str, Any]:
    record: dict[str, Any] = {"machine_before": machine(), "params": {k: str(v) for k, v in vars(args).items()}}
    samples = []
    with BenchCluster("recovery", args.attach) as bc:
        bc.add_nodes(args.nodes + 2, 8)
        ns = bc.namespace("op")
        operator = Operator(bc.local.kubeconfig, ns, RESULTS_DIR / f"recovery-operator-{os.getpid()}.log", args.resync_seconds)
        operator.start()
        try:
            measure_operator(bc, ns, "rank-killed", args.nodes, "warm", args.timeout)  # warm the operator's and scheduler's caches
            for i in range(args.repeats):
                for fault in args.faults.split(","):
                    operator.check()
                    s = measure_operator(bc, ns, fault, args.nodes, f"r{i}", args.timeout)
                    print(f"  r{i} {fault:17} new gang Running after {s['seconds']:.2f}s (load {s['load1']})", flush=True)
                    samples.append(s)
        except BaseException:
            print("---- operator log tail ----\n" + operator.tail(), file=sys.stderr)
            raise
        finally:
            operator.stop()
        record["kubernetes"] = bc.version
    record["machine_after"] = machine()
    record["samples"] = samples
    faults = args.faults.split(",")
    record["summary"] = {f: {"p50_s": median(s["seconds"] for s in samples if s["fault"] == f), "max_s": max(s["seconds"] for s in samples if s["fault"] == f)} for f in faults}
    table = Table(f"Fault → new {args.nodes}-node gang Running (operator + control plane, KWOK), {args.repeats} repeats",
                  ["fault", "p50 s", "max s", f"goal ≤ {GOAL_S:.0f} s", "restart counted as"],
                  note=f"load average (1 min) median {median(s['load1'] for s in samples):.1f}; operator resync {args.resync_seconds or 2} s")
    for f in faults:
        kind = "infrastructure" if any(s["infrastructureRestarts"] for s in samples if s["fault"] == f) else "job"
        table.add(f, fmt_s(record["summary"][f]["p50_s"]), fmt_s(record["summary"][f]["max_s"]), "met" if record["summary"][f]["p50_s"] <= GOAL_S else "missed", kind)
    table.print()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("operator", "local", "all"), default="all")
    parser.add_argument("--nodes", type=int, default=8, help="Gang size of the operator part (default 8).")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"Comma-separated subset of {','.join(FAULTS)}.")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--resync-seconds", type=float, default=None)
    parser.add_argument("--attach", default=None, help="Use a running LocalCluster by name instead of starting one.")
    parser.add_argument("--local-repeats", type=int, default=3, help="Repeats of the local part.")
    from recovery_local import add_args

    add_args(parser)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    record: dict[str, Any] = {}
    if args.part in ("operator", "all"):
        record["operator"] = run_operator(args)
    if args.part in ("local", "all"):
        from recovery_local import run_local

        record["local"] = run_local(args)
    print(f"wrote {write_json('recovery', record, args.json)}")


if __name__ == "__main__":
    main()
