"""What one admission pass costs with a LIST per pass (``Kube``) and with the watch-fed caches (``CachedKube``).

On one local control plane (etcd, kube-apiserver, KWOK): ``--nodes`` KWOK nodes
of 8 GPUs, ``--pods-per-node`` foreign pods bound to each (1 GPU each: they
fill the cluster's pod count, as other tenants' pods do), and ``--waiting``
TrainingJobs that never fit (one pod of 16 GPUs on nodes of 8), so that
every pass has a queue and refuses it (one rank each: a refused job's
``_decide`` also GETs each of its ranks by name, a per-job cost left out here). Then, interleaved, ``--repeats`` rounds
of ``--passes`` passes through each client, in-process
(:meth:`railtrain.operator.reconciler.Reconciler.admission_pass`); every REST request of
the client is counted on its way out. Reported per client: median seconds per
pass, requests per pass, and cluster-wide LISTs per pass (pods, nodes,
namespaces, TrainingJobs of all namespaces); and how much this process's RSS
grew while the caches made their first LIST (their memory, roughly).

    python bench/pass_cost.py                                          # 200 nodes, 2 pods each, 10 waiting jobs
    python bench/pass_cost.py --nodes 4 --pods-per-node 1 --waiting 2 --passes 2 --repeats 1   # smoke size
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness import Table, fmt_s, machine, median, revision, write_json
from kwokbench import BenchCluster, in_parallel, trainingjob, G, V, P

from railtrain.cli.controlplane import wait_until
from railtrain.operator.reconciler import Reconciler
from railtrain.operator.kube.cached import CachedKube
from railtrain.operator.kube.verbs import Kube

CLUSTER_WIDE = ("/api/v1/pods", "/api/v1/nodes", "/api/v1/namespaces", f"/apis/{G}/{V}/{P}")


def count_requests(kube: Kube) -> Counter:
    """Count ``kube``'s REST requests (WATCHes left out): keys ``"all"``, ``"cluster_lists"`` (cluster-wide LISTs) and ``"METHOD /path"``."""
    seen: Counter = Counter()
    request = kube.api.rest_client.request

    def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        parts = urlsplit(url)
        if "watch=" not in parts.query:
            seen["all"] += 1
            seen[f"{method} {parts.path}"] += 1
            if method == "GET" and parts.path in CLUSTER_WIDE:
                seen["cluster_lists"] += 1
        return request(method, url, *args, **kwargs)

    kube.api.rest_client.request = counted
    return seen


def foreign_pod(name: str, node: str) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {"requests": gpu, "limits": gpu}}]}}


def rss_mb() -> float:
    """This process's resident set size in MB (``VmRSS`` of ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200, help="KWOK nodes of 8 GPUs (default 200).")
    ap.add_argument("--pods-per-node", type=int, default=2, help="Foreign 1-GPU pods bound to each node (default 2).")
    ap.add_argument("--waiting", type=int, default=10, help="TrainingJobs that never fit, in every pass's queue (default 10).")
    ap.add_argument("--passes", type=int, default=10, help="Passes per client per round (default 10).")
    ap.add_argument("--repeats", type=int, default=3, help="Rounds, the two clients interleaved (default 3).")
    ap.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/pass_cost-<time>.json).")
    args = ap.parse_args(argv)
    if min(args.nodes, args.waiting, args.passes, args.repeats) < 1 or args.pods_per_node < 0:
        ap.error("--nodes, --waiting, --passes and --repeats must be at least 1 and --pods-per-node at least 0")
    before = machine()
    with BenchCluster("passcost") as bc:
        nodes = bc.add_nodes(args.nodes, 8)
        ns = bc.namespace("jobs")
        pods = [foreign_pod(f"tenant-{i}-{j}", n) for i, n in enumerate(nodes) for j in range(args.pods_per_node)]
        in_parallel([lambda p=p: bc.core.create_namespaced_pod(ns, p, _preload_content=False) for p in pods], 16)
        names = [f"waiting-{i}" for i in range(args.waiting)]
        for name in names:
            bc.custom.create_namespaced_custom_object(G, V, ns, P, trainingjob(name, 1, 16))
        plain = Kube(bc.local.api_client())
        rss_before = rss_mb()
        cached = CachedKube(bc.local.api_client())
        cached.start()
        wait_until(cached.synced, 120, "the caches' first LIST")
        wait_until(lambda: len(cached.active.items()) >= len(pods) and len(cached.jobs.items()) >= len(names), 120, "the caches to hold every pod and job")
        cache_mb = rss_mb() - rss_before
        held = {name: len(store) for name, store in (("jobs", cached.jobs), ("pods", cached.pods), ("active", cached.active), ("nodes", cached.nodes), ("namespaces", cached.namespaces))}
        for name in names:  # one reconcile each: status Pending, so that every pass queues them
            Reconciler(plain).reconcile_job(ns, name, admit=False)
        counters = {"list": count_requests(plain), "cache": count_requests(cached)}
        clients = {"list": plain, "cache": cached}
        reconcilers = {mode: Reconciler(kube) for mode, kube in clients.items()}
        samples: list[dict[str, Any]] = []
        for rep in range(args.repeats):
            for mode, kube in clients.items():
                reconcilers[mode].admission_pass()  # warm-up: a refusal's first status write
                start = dict(counters[mode])
                for _ in range(args.passes):
                    t0 = time.perf_counter()
                    decided = reconcilers[mode].admission_pass()
                    samples.append({"mode": mode, "repeat": rep, "seconds": time.perf_counter() - t0, "decided": len(decided)})
                done = counters[mode]
                samples[-1]["requests"] = (done["all"] - start.get("all", 0)) / args.passes
                samples[-1]["cluster_lists"] = (done["cluster_lists"] - start.get("cluster_lists", 0)) / args.passes
                samples[-1]["by_path"] = {k: (v - start.get(k, 0)) / args.passes for k, v in done.items() if " " in k and v > start.get(k, 0)}
        cached.stop()
    summary = []
    for mode in clients:
        mine = [s for s in samples if s["mode"] == mode]
        summary.append({
            "mode": mode, "pass_s_median": median(s["seconds"] for s in mine),
            "requests_per_pass": median(s["requests"] for s in mine if "requests" in s),
            "cluster_lists_per_pass": median(s["cluster_lists"] for s in mine if "cluster_lists" in s),
        })
    table = Table(f"Admission pass: {args.nodes} nodes, {len(pods)} foreign pods, {args.waiting} waiting jobs ({args.passes} passes x {args.repeats})",
                  ["client", "pass (median s)", "requests / pass", "cluster-wide LISTs / pass"])
    for row in summary:
        table.add(row["mode"], fmt_s(row["pass_s_median"]), f"{row['requests_per_pass']:.1f}", f"{row['cluster_lists_per_pass']:.1f}")
    table.print()
    print(f"the caches' RSS after their first LIST: {cache_mb:.1f} MB for {held}")
    load = os.getloadavg()[0]
    print(f"1-minute load average at the end: {load:.2f} on {before['cpus']} CPUs")
    record = {"args": vars(args) | {"json": str(args.json) if args.json else None}, "revision": revision(), "machine_before": before, "load1_end": load,
              "cache_rss_mb": cache_mb, "cached_objects": held, "samples": samples, "summary": summary, "table": table.plain()}
    print(f"JSON: {write_json('pass_cost', record, args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
