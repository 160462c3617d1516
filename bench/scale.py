"""One railtrain operator for 10,000 simulated GPUs: 1,250 KWOK nodes × 8 GPUs, 500 jobs of mixed sizes.

On one local control plane (etcd, kube-apiserver, kube-scheduler, KWOK):

1. the nodes, in racks of 8 and blocks of 4 racks; time to create them;
2. the floor: one pinned 8-GPU pod per node created directly, to all Running
   (what the control plane itself sustains at this size);
3. the operator (a subprocess, metrics on a local port) and ``--jobs``
   TrainingJobs of 1..128 nodes (8 GPUs per pod; many small, few large; the
   first is the largest) created evenly over ``--submit-seconds``; every
   second its RSS and CPU are read from ``/proc/<pid>`` and its ``/metrics``
   scraped (admission-pass histogram, queue length);
4. once the Running jobs, the admitted ones and the pods are unchanged for ``--settle`` s (4× that while
   a waiting job would fit in the free nodes): no double
   booking (GPUs of the pods pinned to a node ≤ its capacity), and every
   waiting job that would fit in the free nodes is counted;
5. a rank of the largest Running job killed (KWOK stage label
   ``railtrain.dev/kwok-exit``) and the time until its gang is all Running again.

Admission-pass p50/p99 are read from the histogram's bucket deltas between
scrapes, grouped by the queue length at that scrape (≤10, ≤100, >100
waiting); a quantile is the upper bound of its bucket.

    python bench/scale.py                                     # 1,250 nodes, 500 jobs
    python bench/scale.py --nodes 8 --jobs 5 --submit-seconds 2 --settle 3   # smoke size
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from harness import RESULTS_DIR, Table, fmt_s, machine, median, ratio, write_json
from kueue_local import free_port
from kwokbench import BenchCluster, Operator, bare_pods, in_parallel, trainingjob, G, V, P
from timeline import act_and_watch

from railtrain.cli.controlplane import wait_until
from railtrain.crds.labels import HOSTNAME

GPUS_PER_NODE, NODES_PER_RACK, RACKS_PER_BLOCK = 8, 8, 4
MIX = ((1, 30), (2, 20), (4, 18), (8, 14), (16, 9), (32, 5), (64, 3), (128, 1))
"""(nodes per job, weight): many small jobs, few large ones."""
BANDS = ((10, "<=10"), (100, "11-100"), (10**9, ">100"))
TICK = os.sysconf("SC_CLK_TCK")


def job_sizes(jobs: int, nodes: int, seed: int) -> list[int]:
    """``jobs`` sizes drawn from :data:`MIX` (clipped to ``nodes``); the first is the largest, for the restart."""
    rng = random.Random(seed)
    sizes = [min(nodes, rng.choices([s for s, _ in MIX], [w for _, w in MIX])[0]) for _ in range(jobs)]
    if sizes:
        sizes[0] = min(nodes, MIX[-1][0])
    return sizes


def proc_sample(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds user+system) of process ``pid`` from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    rss_kb = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:"))
    return rss_kb / 1024, cpu


def scrape(port: int) -> dict[str, Any]:
    """The admission-pass histogram (cumulative bucket counts, sum, count) and queue length from ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, Any] = {"buckets": {}, "sum": 0.0, "count": 0.0, "queue": None}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("railtrain_admission_pass") and fam.type == "histogram":
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    out["buckets"][float(s.labels["le"])] = s.value
                elif s.name.endswith("_sum"):
                    out["sum"] = s.value
                elif s.name.endswith("_count"):
                    out["count"] = s.value
        elif fam.name.startswith("railtrain_admission_queue"):
            out["queue"] = fam.samples[0].value if fam.samples else None
    return out


class Sampler(threading.Thread):
    """Every ``interval`` s: the operator's RSS and CPU from /proc and one /metrics scrape."""

    def __init__(self, pid: int, port: int, interval: float = 1.0):
        super().__init__(name="scale-sampler", daemon=True)
        self.pid, self.port, self.interval = pid, port, interval
        self.samples: list[dict[str, Any]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            s: dict[str, Any] = {"t": time.monotonic()}
            try:
                s["rss_mb"], s["cpu_s"] = proc_sample(self.pid)
            except (OSError, StopIteration):
                return
            try:
                s.update(scrape(self.port))
            except (OSError, ValueError):
                pass
            self.samples.append(s)


def bucket_quantile(buckets: dict[float, float], q: float) -> float:
    """Upper bound of the bucket holding quantile ``q`` of a cumulative histogram (NaN when empty)."""
    total = max(buckets.values(), default=0)
    if not total:
        return float("nan")
    return next(le for le in sorted(buckets) if buckets[le] >= q * total)


def pass_times(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Admission passes per queue-length band: count, mean, p50 and p99 (bucket upper bounds), from scrape deltas."""
    acc = {label: {"buckets": {}, "sum": 0.0, "count": 0.0, "max_queue": 0} for _, label in BANDS}
    scraped = [s for s in samples if "buckets" in s and s.get("queue") is not None]
    for prev, cur in zip(scraped, scraped[1:]):
        if cur["count"] <= prev["count"]:
            continue
        label = next(lbl for top, lbl in BANDS if cur["queue"] <= top)
        a = acc[label]
        for le, v in cur["buckets"].items():
            a["buckets"][le] = a["buckets"].get(le, 0) + v - prev["buckets"].get(le, 0)
        a["sum"] += cur["sum"] - prev["sum"]
        a["count"] += cur["count"] - prev["count"]
        a["max_queue"] = max(a["max_queue"], int(cur["queue"]))
    return [{"waiting": label, "passes": int(a["count"]), "max_queue": a["max_queue"], "mean_s": ratio(a["sum"], a["count"]),
             "p50_s": bucket_quantile(a["buckets"], 0.5), "p99_s": bucket_quantile(a["buckets"], 0.99)} for label, a in acc.items()]


def ready(port: int) -> bool:
    """Whether the operator's ``/readyz`` answers 200 (it has completed a first pass)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def pinned_node(pod: dict[str, Any]) -> str | None:
    """The node a pod is bound or pinned to: ``spec.nodeName``, a hostname nodeSelector, or a one-node required affinity."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    if (spec.get("nodeSelector") or {}).get(HOSTNAME):
        return spec["nodeSelector"][HOSTNAME]
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for expr in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            if expr.get("key") in ("metadata.name", HOSTNAME) and expr.get("operator") == "In" and len(expr.get("values", [])) == 1:
                return expr["values"][0]
    return None


def audit(pods: Sequence[dict[str, Any]], nodes: Sequence[str], sizes: dict[str, int]) -> dict[str, Any]:
    """Double bookings, Running jobs and waiting jobs that would fit, from one pod listing.

    Returns:
        ``overbooked`` (node → GPUs pinned beyond capacity), ``running`` (job
        names all Running), ``free_nodes`` and ``fits_waiting`` (waiting jobs
        with no more nodes than are free).
    """
    used: dict[str, int] = {}
    per_job: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            continue
        per_job.setdefault(pod["metadata"]["labels"].get("railtrain.dev/job-name", ""), []).append(pod)
        node = pinned_node(pod)
        if node:
            gpus = sum(int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"])
            used[node] = used.get(node, 0) + gpus
    running = sorted(j for j, ps in per_job.items() if j in sizes and len(ps) == sizes[j] and all(p["status"].get("phase") == "Running" for p in ps))
    free = sum(1 for n in nodes if not used.get(n))
    admitted = {j for j, ps in per_job.items() if any(pinned_node(p) for p in ps)}
    waiting = [j for j in sizes if j not in admitted]
    return {"overbooked": {n: g for n, g in used.items() if g > GPUS_PER_NODE}, "running": running, "free_nodes": free,
            "pods": sum(len(ps) for ps in per_job.values()), "admitted": len(admitted),
            "waiting": len(waiting), "fits_waiting": sorted(j for j in waiting if sizes[j] <= free)}


def list_pods(bc: BenchCluster, namespace: str) -> list[dict[str, Any]]:
    """Every pod of ``namespace`` as plain dicts."""
    return json.loads(bc.core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]


def restart(bc: BenchCluster, namespace: str, job: str, size: int, timeout: float) -> dict[str, Any]:
    """Fail one rank of ``job`` (exit code 137 via KWOK) and time until its gang is all Running again without that pod."""
    pods = [p for p in list_pods(bc, namespace) if p["metadata"]["labels"].get("railtrain.dev/job-name") == job]
    victim = pods[-1]
    t0 = time.monotonic()
    bc.core.patch_namespaced_pod(victim["metadata"]["name"], namespace, {"metadata": {"labels": {"railtrain.dev/kwok-exit": "137"}}})

    def back() -> bool:
        mine = [p for p in list_pods(bc, namespace) if p["metadata"]["labels"].get("railtrain.dev/job-name") == job and not p["metadata"].get("deletionTimestamp")]
        return len(mine) == size and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in mine} and all(p["status"].get("phase") == "Running" for p in mine)

    try:
        wait_until(back, timeout, f"{job} all Running again", interval=0.5)
        return {"job": job, "size": size, "all_running_again_s": time.monotonic() - t0}
    except TimeoutError as exc:
        return {"job": job, "size": size, "all_running_again_s": None, "error": str(exc)}


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run the benchmark, print the tables and write the JSON record."""
    ap = argparse.ArgumentParser(prog="scale.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1250, help=f"KWOK nodes of {GPUS_PER_NODE} GPUs (default 1250).")
    ap.add_argument("--jobs", type=int, default=500, help="TrainingJobs submitted (default 500).")
    ap.add_argument("--submit-seconds", type=float, default=60, help="Seconds over which the jobs are created (default 60).")
    ap.add_argument("--settle", type=float, default=30, help="Seconds the Running and admitted jobs and the pods must stay unchanged to end the run (default 30).")
    ap.add_argument("--seed", type=int, default=1, help="Seed of the job-size mix (default 1).")
    ap.add_argument("--timeout", type=float, default=1800, help="Seconds any one phase may take (default 1800).")
    ap.add_argument("--restart-timeout", type=float, default=300, help="Seconds the killed rank's gang may take to be all Running again (default 300).")
    ap.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/scale-<time>.json).")
    args = ap.parse_args(argv)
    if args.nodes < 1 or args.jobs < 1 or args.submit_seconds < 0 or args.settle <= 0:
        ap.error("--nodes and --jobs must be >= 1, --submit-seconds >= 0 and --settle > 0")
    sizes = job_sizes(args.jobs, args.nodes, args.seed)
    names = {f"s{i:03d}-n{n}": n for i, n in enumerate(sizes)}
    record: dict[str, Any] = {"machine_before": machine(), "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                              "job_sizes": sizes, "demand_nodes": sum(sizes)}
    with BenchCluster("scale") as bc:
        t = time.monotonic()
        nodes = bc.add_nodes(args.nodes, GPUS_PER_NODE, nodes_per_rack=NODES_PER_RACK, racks_per_block=RACKS_PER_BLOCK)
        record["nodes_ready_s"] = time.monotonic() - t
        print(f"{bc.local.name}: {len(nodes)} KWOK nodes x {GPUS_PER_NODE} GPUs ready in {record['nodes_ready_s']:.1f}s", flush=True)
        floor_ns, ns = bc.namespace("floor"), bc.namespace("operator")
        pods = bare_pods("floor", floor_ns, len(nodes), GPUS_PER_NODE, nodes)
        tl = act_and_watch(bc.core, floor_ns, len(pods), lambda: in_parallel([lambda p=p: bc.core.create_namespaced_pod(floor_ns, p, _preload_content=False) for p in pods], 8), args.timeout)
        record["floor"] = {"pods": len(pods), **tl.milestones(), "pods_per_s": ratio(len(pods), tl.milestones()["all_running_s"])}
        bc.empty(floor_ns)
        print(f"  floor: {len(pods)} pinned pods all Running in {record['floor']['all_running_s']:.2f}s ({record['floor']['pods_per_s']:.0f} pods/s)", flush=True)

        port = free_port()
        operator = Operator(bc.local.kubeconfig, ns, RESULTS_DIR / f"scale-operator-{os.getpid()}.log")
        operator.env["RAILTRAIN_OPERATOR_METRICS_PORT"] = str(port)
        operator.start()
        sampler = Sampler(operator.proc.pid, port)
        sampler.start()
        try:
            t = time.monotonic()
            wait_until(lambda: operator.check() or ready(port), args.timeout, "the operator's /readyz (a first pass done)", interval=0.5)
            record["operator_ready_s"] = time.monotonic() - t
            t0 = time.monotonic()
            for i, (name, n) in enumerate(names.items()):
                due = t0 + args.submit_seconds * i / max(1, len(names))
                time.sleep(max(0.0, due - time.monotonic()))
                bc.custom.create_namespaced_custom_object(G, V, ns, P, trainingjob(name, n, GPUS_PER_NODE))
            record["submitted_s"] = time.monotonic() - t0
            print(f"  {len(names)} jobs ({sum(sizes)} nodes asked of {len(nodes)}) submitted in {record['submitted_s']:.1f}s", flush=True)
            last, since, deadline, settled = None, time.monotonic(), time.monotonic() + args.timeout, False
            while not settled and time.monotonic() < deadline:
                operator.check()
                state = audit(list_pods(bc, ns), nodes, names)
                key = (tuple(state["running"]), tuple(state["fits_waiting"]), state["waiting"], state["pods"])
                if key != last:
                    last, since = key, time.monotonic()
                elif time.monotonic() - since >= args.settle * (1 if not state["fits_waiting"] else 4):
                    settled = True  # stable; while a waiting job would fit, the operator gets 4x longer
                    break
                time.sleep(1)
            record["settled"], record["settled_s"] = settled, since - t0
            if not settled:
                print(f"  NOT settled within --timeout {args.timeout:.0f}s: the state below is the last one seen", flush=True)
            record["audit"] = {**state, "running": len(state["running"])}
            print(f"  settled {record['settled_s']:.1f}s after the first job: {len(state['running'])} jobs Running, {state['waiting']} waiting, "
                  f"{state['free_nodes']} nodes free, {len(state['fits_waiting'])} waiting jobs would fit, {len(state['overbooked'])} nodes overbooked", flush=True)
            big = max((j for j in state["running"]), key=lambda j: names[j], default=None)
            record["restart"] = restart(bc, ns, big, names[big], args.restart_timeout) if big else {"error": "no job Running"}
            print(f"  restart of {big}: {record['restart']}", flush=True)
            record["audit_after_restart"] = {k: (len(v) if k == "running" else v) for k, v in audit(list_pods(bc, ns), nodes, names).items()}
        except BaseException:
            print("---- operator log tail ----\n" + operator.tail(), file=sys.stderr)
            raise
        finally:
            sampler.halt.set()
            sampler.join(timeout=10)
            operator.stop()
    s = sampler.samples
    record["operator"] = {
        "rss_mb_max": max((x["rss_mb"] for x in s), default=float("nan")),
        "rss_mb_median": median(x["rss_mb"] for x in s),
        "cpu_cores_mean": ratio(s[-1]["cpu_s"] - s[0]["cpu_s"], s[-1]["t"] - s[0]["t"]) if len(s) > 1 else float("nan"),
        "queue_max": max((x.get("queue") or 0 for x in s), default=0),
    }
    record["admission_pass"] = pass_times(s)
    record["machine_after"] = machine()
    record["load1_median"] = median([record["machine_before"]["loadavg"][0], record["machine_after"]["loadavg"][0]])
    table = Table(f"scale: {len(nodes)} KWOK nodes x {GPUS_PER_NODE} GPUs, {len(names)} jobs", ["metric", "value"])
    a, o, f = record["audit"], record["operator"], record["floor"]
    for row in (("floor: pinned pods all Running s (pods/s)", f"{fmt_s(f['all_running_s'])} ({f['pods_per_s']:.0f})"),
                ("jobs Running / waiting at settle", f"{a['running']} / {a['waiting']}"),
                ("waiting jobs that would fit in free nodes", f"{len(a['fits_waiting'])} ({a['free_nodes']} nodes free)"),
                ("nodes double-booked", str(len(a["overbooked"]))),
                ("operator RSS max / median MB", f"{o['rss_mb_max']:.0f} / {o['rss_mb_median']:.0f}"),
                ("operator CPU cores (mean)", f"{o['cpu_cores_mean']:.2f}"),
                (f"restart of a {record['restart'].get('size')}-node gang to all Running s", fmt_s(record["restart"].get("all_running_again_s") or float("nan")))):
        table.add(*row)
    for p in record["admission_pass"]:
        table.add(f"admission pass, {p['waiting']} waiting: n / mean / p50 / p99 s", f"{p['passes']} / {fmt_s(p['mean_s'])} / {fmt_s(p['p50_s'])} / {fmt_s(p['p99_s'])}")
    table.print()
    record["table"] = table.plain()
    print(f"JSON: {write_json('scale', record, args.json)}")


if __name__ == "__main__":
    main()
