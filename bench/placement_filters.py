"""What honouring the pod template costs an admission pass: node filters and the all-resource ledger.

A pure measurement (no cluster): one admission pass
(:func:`railtrain.operator.scheduling.queue.schedule`) of ``--jobs`` waiting gangs of
``--pods`` nodes × 8 GPUs on ``--nodes`` nodes (8 GPUs, 64 CPUs, 1 TiB, one
``rdma/ib`` each; half labelled ``gpu.product=H100``, a quarter tainted),
timed three ways, interleaved in every repeat:

* ``no filter``: :func:`railtrain.operator.scheduling.nodefit.restrict` replaced by the
  identity, i.e. placement by GPUs alone, as before ``spec.template`` (the baseline);
* ``gpus only``: the gangs' pods carry only the accelerator toleration every
  rendered pod has (no template);
* ``template``: each pod has a nodeSelector on the product label, a
  toleration of the taint, and requests 16 CPUs, 128 GiB and one ``rdma/ib``.

Reported: the median pass time of each, and its ratio to the baseline.

    python bench/placement_filters.py                                  # 1024 nodes, 32 jobs x 16 pods, 15 repeats
    python bench/placement_filters.py --nodes 64 --jobs 4 --pods 4 --repeats 2   # the smoke test's size
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

from harness import Table, fmt_x, machine, median, ratio, write_json

from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK
from railtrain.operator.scheduling import queue
from railtrain.operator.scheduling import placement
from railtrain.operator.scheduling.snapshot import ClusterSnapshot, snapshot
from railtrain.operator.scheduling.nodefit import PodNeeds
from railtrain.operator.scheduling.placement import GangRequest, Placement

GPU = "nvidia.com/gpu"
TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


def nodes(count: int) -> list[dict[str, Any]]:
    """``count`` Node dicts in racks of 16 and blocks of 4 racks; half H100-labelled, every fourth tainted."""
    out = []
    for i in range(count):
        labels = {HOSTNAME: f"n{i}", RAILTRAIN_RACK: f"r{i // 16}", RAILTRAIN_BLOCK: f"b{i // 64}",
                  "gpu.product": "H100" if i % 2 == 0 else "A100"}
        out.append({
            "metadata": {"name": f"n{i}", "labels": labels},
            "spec": {"taints": [TAINT] if i % 4 == 0 else []},
            "status": {"allocatable": {GPU: "8", "cpu": "64", "memory": "1Ti", "rdma/ib": "1", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    return out


def requests(jobs: int, pods: int, needs: PodNeeds) -> list[GangRequest]:
    """``jobs`` gangs of ``pods`` whole-node pods, all with ``needs``."""
    return [GangRequest(f"ns/j{j:03d}", pods, 8, procs_per_node=8, created=f"2026-01-01T00:00:{j % 60:02d}Z", needs=needs) for j in range(jobs)]


def timed(run: Callable[[], list[queue.Decision]]) -> tuple[float, int]:
    """Seconds one pass took and how many gangs it placed."""
    start = time.perf_counter()
    decisions = run()
    return time.perf_counter() - start, sum(isinstance(d.result, Placement) for d in decisions)


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run the benchmark, print the table and write the JSON record."""
    parser = argparse.ArgumentParser(prog="placement_filters.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024, help="Nodes of 8 GPUs (default 1024).")
    parser.add_argument("--jobs", type=int, default=32, help="Waiting gangs in the pass (default 32).")
    parser.add_argument("--pods", type=int, default=16, help="Pods (nodes) per gang (default 16).")
    parser.add_argument("--repeats", type=int, default=15, help="Interleaved repeats (default 15).")
    parser.add_argument("--json", default=None, help="Where to write the JSON record (default bench/results/).")
    args = parser.parse_args(argv)
    if min(args.nodes, args.jobs, args.pods, args.repeats) < 1:
        parser.error("--nodes, --jobs, --pods and --repeats must be >= 1")
    snap: ClusterSnapshot = snapshot(nodes(args.nodes), [], GPU)
    implicit = ({"key": GPU, "operator": "Exists", "effect": "NoSchedule"},)
    template = PodNeeds({"cpu": 16.0, "memory": 128.0 * 2**30, "rdma/ib": 1.0}, {"gpu.product": "H100"}, (), (*implicit, {**TAINT, "operator": "Equal"}))
    real_restrict = placement.restrict
    modes: dict[str, Callable[[], list[queue.Decision]]] = {
        "no filter": lambda: queue.schedule(requests(args.jobs, args.pods, PodNeeds()), snap),
        "gpus only": lambda: queue.schedule(requests(args.jobs, args.pods, PodNeeds(tolerations=implicit)), snap),
        "template": lambda: queue.schedule(requests(args.jobs, args.pods, template), snap),
    }
    before = machine()
    samples: dict[str, list[float]] = {m: [] for m in modes}
    placed: dict[str, int] = {}
    for _ in range(args.repeats):
        for mode, run in modes.items():
            placement.restrict = (lambda cluster, needs, gpu: cluster) if mode == "no filter" else real_restrict
            try:
                seconds, placed[mode] = timed(run)
            finally:
                placement.restrict = real_restrict
            samples[mode].append(seconds)
    base = median(samples["no filter"])
    table = Table(
        f"placement filters: one admission pass of {args.jobs} gangs x {args.pods} nodes on {args.nodes} nodes ({args.repeats} interleaved repeats)",
        ["mode", "gangs placed", "pass median ms", "per gang ms", "vs no filter"],
        note="no filter = placement by GPUs alone (restrict replaced by the identity); template = nodeSelector + toleration + cpu/memory/rdma requests",
    )
    summary = []
    for mode, xs in samples.items():
        m = median(xs)
        table.add(mode, placed[mode], f"{1e3 * m:.1f}", f"{1e3 * m / args.jobs:.2f}", fmt_x(ratio(m, base)))
        summary.append({"mode": mode, "placed": placed[mode], "pass_s_median": m, "ratio_to_no_filter": ratio(m, base)})
    table.print()
    after = machine()
    print(f"1-minute load average before/after: {before['loadavg'][:1]} / {after['loadavg'][:1]} on {before['cpus']} CPUs")
    record = {"params": vars(args), "machine_before": before, "machine_after": after, "samples_s": samples, "summary": summary, "table": table.plain()}
    print(f"JSON: {write_json('placement_filters', record, args.json)}")


if __name__ == "__main__":
    main()
