"""railtrain side by side with stock Kueue (Topology Aware Scheduling) and the floor, on one KWOK cluster, in one run.

Three modes start the same pods (railtrain's own rendering) on the same
nodes, interleaved within every repetition (see ``kwokbench``):

``floor``     the pods created with ``nodeName`` set: no operator, no scheduler.
``operator``  TrainingJobs through the railtrain operator (a subprocess).
``kueue``     the pods as a Kueue plain-pod group (``pod-group-name`` label,
              ``pod-group-total-count`` annotation, preferred topology
              ``railtrain.dev/rack``), admitted by stock Kueue's manager (a
              local process, ``kueue_local``), bound by kube-scheduler.
``via-kueue`` TrainingJobs labelled with the same LocalQueue, admitted by
              the same Kueue through railtrain's external-framework
              integration (docs/kueue.md): Kueue's quota and TAS choose the
              nodes, a second railtrain operator (watching only this mode's
              namespace, its own Lease) places the gang rail-aware inside
              that assignment and binds it. Not run for the many-jobs
              workload (pods of 1 GPU): Kueue's TAS packs pods of less than
              a node onto one node, and railtrain runs one rank per node
              (such a job waits with reason ``OutsideKueueAssignment``).

Measured: apply → every pod Running for gangs of 8, 64, 256 pods (8 GPUs
each), and 100 jobs × 8 pods of 1 GPU applied at once; then placement: gangs
applied one after another on an empty and on a fragmented cluster (free
nodes only in some racks), and the share placed inside the smallest domain
(rack, else block) that could hold them. Kueue's fixed 1 s TAS batching
wait is stock behaviour: it is reported (column "gate wait": all ungated −
all created), not patched.

    python bench/vs_kueue.py                                   # full size, 3 repeats
    python bench/vs_kueue.py --sizes 2 --jobs 2 --pods-per-job 2 --repeats 1 --warmup 0 \
        --placement-gangs 2,3 --kueue cached                   # the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from harness import RESULTS_DIR, Table, fmt_pct, fmt_s, machine, median, ratio
from kueue_local import GROUP, QUEUE, LocalKueue, cached_root, ensure_kueue, pod_group
from kwokbench import BenchCluster, Operator, Workload, bare_pods, in_parallel, job_names, measure, report, sample_of, summarize, trainingjob, G, V, P
from many_jobs import min_nodes

from railtrain.crds.labels import RAILTRAIN_BLOCK, RAILTRAIN_RACK
from timeline import act_and_watch

from railtrain.cli.controlplane import wait_until
from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import kueue as kueue_names

GPUS_PER_NODE, NODES_PER_RACK, RACKS_PER_BLOCK = 8, 8, 4
FRAGMENT_FREE = (1, 6, 2, 7, 3, 0, 5, 4)
"""Free nodes left in rack i (cycled) on the fragmented cluster; the rest of each rack is taken by filler pods."""


def gone_ok(call) -> None:
    """Run ``call``; an object that is already gone (404) is fine."""
    from kubernetes.client.rest import ApiException

    try:
        call()
    except ApiException as exc:
        if exc.status != 404:
            raise


def empty_kueue(bc: BenchCluster, namespace: str, timeout: float = 120) -> None:
    """Delete the pods and Workloads of ``namespace`` and wait until both are gone.

    Kueue keeps a ``kueue.x-k8s.io/managed`` finalizer on its pods and one on
    Workloads in use; after 5 s any still present are stripped so the next
    measurement starts on an empty namespace with its quota released.
    """
    bc.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _preload_content=False)
    bc.custom.delete_collection_namespaced_custom_object(GROUP, "v1beta2", namespace, "workloads")
    deadline, stripped = time.monotonic() + timeout, False
    while True:
        pods = json.loads(bc.core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
        wls = bc.custom.list_namespaced_custom_object(GROUP, "v1beta2", namespace, "workloads")["items"]
        if not pods and not wls:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pods)} pods and {len(wls)} Workloads left in {namespace}")
        if not stripped and time.monotonic() > deadline - timeout + 5:
            stripped = True
            for pod in pods:
                gone_ok(lambda: bc.core.patch_namespaced_pod(pod["metadata"]["name"], namespace, {"metadata": {"finalizers": None}}))
            for wl in wls:
                gone_ok(lambda: bc.custom.patch_namespaced_custom_object(GROUP, "v1beta2", namespace, "workloads", wl["metadata"]["name"], {"metadata": {"finalizers": None}}))
        time.sleep(0.25)


def measure_kueue(bc: BenchCluster, namespace: str, workload: Workload, rep: str, workers: int, timeout: float) -> dict[str, Any]:
    """Start ``workload`` as Kueue pod groups, time it to all pods Running (as ``kwokbench.measure``), then empty the namespace."""
    pods = []
    for name in job_names(workload, rep):
        pods += pod_group(bare_pods(name, namespace, workload.pods_per_job, workload.gpus_per_pod), name)
    calls = [lambda p=p: bc.core.create_namespaced_pod(namespace, p, _preload_content=False) for p in pods]
    timeline = act_and_watch(bc.core, namespace, workload.pods, lambda: in_parallel(calls, workers), timeout)
    empty_kueue(bc, namespace)
    return sample_of(workload, "kueue", rep, timeline)


def queued_job(name: str, nodes: int, gpus: int) -> dict[str, Any]:
    """The TrainingJob of ``kwokbench.trainingjob`` labelled with the bench's LocalQueue (Kueue admits it)."""
    body = trainingjob(name, nodes, gpus)
    body["metadata"]["labels"] = {kueue_names.QUEUE_LABEL: QUEUE}
    return body


def empty_via_kueue(bc: BenchCluster, namespace: str) -> None:
    """Delete the TrainingJobs (their pods and Workloads go with them) and wait until no pod or Workload is left."""
    bc.empty(namespace)
    empty_kueue(bc, namespace)


def measure_via_kueue(bc: BenchCluster, namespace: str, workload: Workload, rep: str, workers: int, timeout: float) -> dict[str, Any]:
    """Start ``workload`` as queue-labelled TrainingJobs (Kueue admits, railtrain places inside the admission), time it to
    all pods Running (as ``kwokbench.measure``), then empty the namespace."""
    size, gpus = workload.pods_per_job, workload.gpus_per_pod
    calls = [lambda n=n: bc.custom.create_namespaced_custom_object(G, V, namespace, P, queued_job(n, size, gpus)) for n in job_names(workload, rep)]
    timeline = act_and_watch(bc.core, namespace, workload.pods, lambda: in_parallel(calls, workers), timeout)
    empty_via_kueue(bc, namespace)
    return sample_of(workload, "via-kueue", rep, timeline)


# --- placement ---------------------------------------------------------------------
def domains(bc: BenchCluster, nodes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Node name → (rack, block) from the nodes' labels."""
    out = {}
    for n in nodes:
        labels = bc.core.read_node(n).metadata.labels
        out[n] = (labels[RAILTRAIN_RACK], labels[RAILTRAIN_BLOCK])
    return out


def smallest_feasible(free: set[str], where: dict[str, tuple[str, str]], size: int) -> int:
    """The lowest level (0 rack, 1 block, 2 cluster) with one domain holding ``size`` free nodes."""
    for level in (0, 1):
        counts: dict[str, int] = {}
        for n in free:
            counts[where[n][level]] = counts.get(where[n][level], 0) + 1
        if counts and max(counts.values()) >= size:
            return level
    return 2


def spanned(nodes: Sequence[str], where: dict[str, tuple[str, str]]) -> int:
    """The lowest level (0 rack, 1 block, 2 cluster) of one domain holding every node in ``nodes``."""
    for level in (0, 1):
        if len({where[n][level] for n in nodes}) == 1:
            return level
    return 2


def placement_round(bc: BenchCluster, system: str, namespace: str, gangs: Sequence[int], taken: set[str],
                    where: dict[str, tuple[str, str]], tag: str, timeout: float) -> list[dict[str, Any]]:
    """Apply ``gangs`` (pods of 8 GPUs) one after another with ``system``; each waits for Running and stays until the end.

    Returns:
        Per gang: its size, the smallest feasible level before it, the level it spans, and whether it ran.
    """
    free, out = set(where) - taken, []
    for i, size in enumerate(gangs):
        name = f"p{tag}-{i}"
        want = smallest_feasible(free, where, size)
        if system in ("operator", "via-kueue"):
            body = (trainingjob if system == "operator" else queued_job)(name, size, GPUS_PER_NODE)
            act = lambda: bc.custom.create_namespaced_custom_object(G, V, namespace, P, body)  # noqa: E731
        else:
            pods = pod_group(bare_pods(name, namespace, size, GPUS_PER_NODE), name)
            act = lambda: in_parallel([lambda p=p: bc.core.create_namespaced_pod(namespace, p, _preload_content=False) for p in pods], 8)  # noqa: E731
        act()

        def running() -> list[str] | None:
            pods = [p for p in bc_pods(bc, namespace) if p["metadata"]["labels"].get("railtrain.dev/job-name") == name]
            ok = len(pods) == size and all(p["status"].get("phase") == "Running" for p in pods)
            return [p["spec"]["nodeName"] for p in pods] if ok else None

        try:
            mine = wait_until(running, timeout, f"gang {name} of {size} pods Running", interval=0.5)
        except TimeoutError:
            out.append({"size": size, "smallest_level": want, "placed_level": None, "ran": False})
            continue
        free -= set(mine)
        out.append({"size": size, "smallest_level": want, "placed_level": spanned(mine, where), "ran": True})
    return out


def bc_pods(bc: BenchCluster, namespace: str) -> list[dict[str, Any]]:
    """The pods of ``namespace`` as plain dicts."""
    return json.loads(bc.core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]


def fragment(bc: BenchCluster, namespace: str, nodes: Sequence[str], where: dict[str, tuple[str, str]]) -> set[str]:
    """Fill every rack but :data:`FRAGMENT_FREE` of its nodes with 8-GPU floor pods; return the nodes taken."""
    racks: dict[str, list[str]] = {}
    for n in nodes:
        racks.setdefault(where[n][0], []).append(n)
    taken = []
    for i, rack in enumerate(sorted(racks, key=lambda r: int(r.rsplit("-", 1)[1]))):
        members = racks[rack]
        taken += members[: max(0, len(members) - FRAGMENT_FREE[i % len(FRAGMENT_FREE)])]
    pods = bare_pods("filler", namespace, len(taken), GPUS_PER_NODE, taken) if taken else []
    act_and_watch(bc.core, namespace, len(pods), lambda: in_parallel([lambda p=p: bc.core.create_namespaced_pod(namespace, p, _preload_content=False) for p in pods], 8), 300)
    return set(taken)


def placement(bc: BenchCluster, spaces: dict[str, str], systems: Sequence[str], nodes: Sequence[str], gangs: Sequence[int], timeout: float) -> dict[str, Any]:
    """Both scenarios (empty, fragmented) for every system; returns per-gang rows and the share in the smallest domain."""
    where = domains(bc, nodes)
    result: dict[str, Any] = {}
    for scenario in ("empty", "fragmented"):
        taken = fragment(bc, spaces["floor"], nodes, where) if scenario == "fragmented" else set()
        for system in systems:
            rows = placement_round(bc, system, spaces[system], gangs, taken, where, f"{scenario[0]}{system[0]}", timeout)
            if system == "operator":
                bc.empty(spaces[system])
            elif system == "via-kueue":
                empty_via_kueue(bc, spaces[system])
            else:
                empty_kueue(bc, spaces[system])
            ok = [r for r in rows if r["ran"]]
            result[f"{scenario}/{system}"] = {
                "gangs": rows, "ran": len(ok),
                "smallest_domain_share": ratio(sum(r["placed_level"] == r["smallest_level"] for r in ok), len(rows)),
            }
            print(f"  placement {scenario:10} {system:8} smallest domain {fmt_pct(result[f'{scenario}/{system}']['smallest_domain_share'])}", flush=True)
        bc.empty(spaces["floor"])
    return result


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run the benchmark, print the tables and write the JSON record."""
    ap = argparse.ArgumentParser(prog="vs_kueue.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,64,256", help="Gang sizes in pods of 8 GPUs (default 8,64,256).")
    ap.add_argument("--jobs", type=int, default=100, help="Jobs applied at once in the many-jobs workload; 0 skips it (default 100).")
    ap.add_argument("--pods-per-job", type=int, default=8, help="Pods of 1 GPU per job there (default 8).")
    ap.add_argument("--placement-gangs", default="3,5,2,6,4,7,12,20", help="Gang sizes applied one after another in the placement scenarios; empty skips them.")
    ap.add_argument("--kueue", choices=("build", "cached", "skip"), default="build",
                    help="build: build Kueue unless cached (default); cached: use it only if already built, else skip its half; skip: floor and railtrain only.")
    ap.add_argument("--repeats", type=int, default=3, help="Timed repetitions (default 3).")
    ap.add_argument("--warmup", type=int, default=1, help="Untimed rounds of the smallest gang in every mode first (default 1).")
    ap.add_argument("--workers", type=int, default=8, help="Threads creating pods or TrainingJobs at once (default 8).")
    ap.add_argument("--timeout", type=float, default=600, help="Seconds one measurement may take (default 600).")
    ap.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/vs_kueue-<time>.json).")
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s})
        gangs = [int(s) for s in args.placement_gangs.split(",") if s]
    except ValueError:
        ap.error("--sizes and --placement-gangs must be comma-separated integers")
    if not sizes or min(sizes + gangs) < 1 or args.repeats < 1 or args.jobs < 0 or args.pods_per_job < 1:
        ap.error("--sizes and --placement-gangs need positive integers, --repeats >= 1, --jobs >= 0, --pods-per-job >= 1")

    root, skipped = None, ""
    if args.kueue == "build":
        root, skipped = ensure_kueue()
    elif args.kueue == "cached":
        root = cached_root()
        skipped = "" if root else "Kueue is not built yet (run bench/install-kueue.sh or --kueue build)"
    else:
        skipped = "--kueue skip"
    if skipped:
        print(f"Kueue half skipped: {skipped}", flush=True)
    modes = ["floor", "operator"] + (["kueue", "via-kueue"] if root else [])

    workloads = [Workload(str(n), 1, n, GPUS_PER_NODE) for n in sizes]
    racks = 0
    while sum(FRAGMENT_FREE[i % len(FRAGMENT_FREE)] for i in range(racks)) < sum(gangs):
        racks += 1  # enough racks that every placement gang fits on the fragmented cluster too
    node_count = max(sizes + [racks * NODES_PER_RACK])
    if args.jobs:
        workloads.append(Workload(f"{args.jobs}x{args.pods_per_job}", args.jobs, args.pods_per_job, 1))
        node_count = max(node_count, min_nodes(args.jobs, args.pods_per_job, 1, GPUS_PER_NODE))
    node_count = -(-node_count // NODES_PER_RACK) * NODES_PER_RACK
    record: dict[str, Any] = {"machine_before": machine(), "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                              "kueue": {"version": root.name if root else None, "skipped": skipped}}
    samples: list[dict[str, Any]] = []
    pid = os.getpid()
    with BenchCluster("vs-kueue") as bc:
        nodes = bc.add_nodes(node_count, GPUS_PER_NODE, nodes_per_rack=NODES_PER_RACK, racks_per_block=RACKS_PER_BLOCK)
        print(f"{bc.local.name}: Kubernetes {bc.version}, {len(nodes)} KWOK nodes x {GPUS_PER_NODE} GPUs; modes {','.join(modes)}", flush=True)
        spaces = {m: bc.namespace(m) for m in modes}
        operator = Operator(bc.local.kubeconfig, spaces["operator"], RESULTS_DIR / f"vs_kueue-operator-{pid}.log")
        kueue = LocalKueue(bc.local, root, node_count * GPUS_PER_NODE, RESULTS_DIR / f"vs_kueue-kueue-{pid}.log") if root else None
        via = OperatorProcess(bc.local.kubeconfig, RESULTS_DIR / f"vs_kueue-via-operator-{pid}.log", namespace=spaces["via-kueue"],
                              extra_args=("--lease-namespace", spaces["via-kueue"], "--topology-preset", "railtrain")) if root else None  # fmt: skip
        try:
            operator.start()
            if kueue and via:
                kueue.start()
                kueue.enrol(spaces["kueue"])
                kueue.enrol(spaces["via-kueue"], pods=False)
                via.start()
            rounds = [(f"warm{i}", [workloads[0]], True) for i in range(args.warmup)] + [(f"r{i}", workloads, False) for i in range(args.repeats)]
            for rep, todo, warm in rounds:
                for w in todo:
                    for mode in modes:
                        if mode == "via-kueue" and w.gpus_per_pod < GPUS_PER_NODE:
                            continue  # Kueue's TAS packs pods of less than a node onto one node; railtrain runs one rank per node
                        operator.check()
                        if kueue:
                            kueue.check()
                        if mode == "kueue":
                            s = measure_kueue(bc, spaces[mode], w, rep, args.workers, args.timeout)
                        elif mode == "via-kueue":
                            via.check()
                            s = measure_via_kueue(bc, spaces[mode], w, rep, args.workers, args.timeout)
                        else:
                            s = measure(bc, mode, spaces[mode], w, nodes, rep, args.workers, args.timeout)
                        print(f"  {rep:6} {w.label:>6} {mode:9} all Running in {s['all_running_s']:7.2f}s{'  (warm-up)' if warm else ''}", flush=True)
                        if not warm:
                            samples.append(s)
            if gangs:
                record["placement"] = placement(bc, spaces, [m for m in modes if m != "floor"], nodes, gangs, min(args.timeout, 120))
        except BaseException:
            print("---- operator log tail ----\n" + operator.tail(), file=sys.stderr)
            if kueue:
                print("---- Kueue log tail ----\n" + kueue.tail(), file=sys.stderr)
            if via:
                print("---- via-kueue operator log tail ----\n" + via.tail(), file=sys.stderr)
            raise
        finally:
            operator.stop()
            if via:
                via.stop()
            if kueue:
                kueue.stop()
        record["cluster"] = {"kubernetes": bc.version, "nodes": node_count, "gpus_per_node": GPUS_PER_NODE,
                             "nodes_per_rack": NODES_PER_RACK, "racks_per_block": RACKS_PER_BLOCK}
    record["machine_after"] = machine()
    record["samples"] = samples
    record["load1_median"] = median(s["load1"] for s in samples)
    record["summary"] = summarize(samples, workloads, modes)
    for row in record["summary"]:
        row["gate_wait_s_median"] = row["all_ungated_s_median"] - row["all_created_s_median"]
    if "placement" in record:
        t = Table("placement: share of gangs in the smallest feasible domain (rack, else block)", ["scenario", "system", "gangs run", "smallest domain"])
        for key, res in record["placement"].items():
            t.add(*key.split("/"), f"{res['ran']}/{len(res['gangs'])}", fmt_pct(res["smallest_domain_share"]))
        t.print()
        record["placement_table"] = t.plain()
    waits = ", ".join(f"{r['workload']}: {fmt_s(r['gate_wait_s_median'])} s" for r in record["summary"] if r["mode"] == "kueue")
    report("vs_kueue", record, f"railtrain vs stock Kueue TAS vs the floor: apply -> every pod Running ({node_count} KWOK nodes x {GPUS_PER_NODE} GPUs)",
           note="medians; 'vs floor' = median / the floor's median in the same run"
                + (f"; Kueue gate wait (all ungated - all created, includes its fixed 1 s TAS batching): {waits}" if waits else f"; Kueue skipped: {skipped}"),
           json_path=args.json)


if __name__ == "__main__":
    main()
