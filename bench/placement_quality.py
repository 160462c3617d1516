"""Placement quality on a simulated 1,024-GPU rail-optimized cluster: railtrain against kube-scheduler alone.

A pure simulation (no cluster): 128 nodes × 8 GPUs in 16 racks of 8 and 4
blocks of 4 racks, a seeded random job trace with Poisson arrivals and
log-normal durations (``placesim``), replayed once through railtrain's own
placement code and once through a model of kube-scheduler's default profile
(``policies``). Both see the same jobs, as the same pods. Reported, as the
median over seeds (and the range):

* smallest feasible domain: share of multi-pod jobs placed inside one domain
  of the tightest level (node, rack, block, cluster) that could have held
  them with the GPUs free when they were placed;
* utilisation at first refusal: share of GPUs bound to pods the first time a
  job (kube-scheduler: a pod) had to wait; higher means less fragmentation;
* ring distance: mean over multi-pod jobs of the mean topology distance
  between consecutive ranks r and r+1 (mod N) — same node 0, same rack 1,
  same block 2, else 3 — with ranks as the scheduler left them;
* and, for context: GPU utilisation by started jobs over the arrival window,
  GPUs held by pods of jobs that have not started, jobs never started, waits.

    python bench/placement_quality.py                         # loads 0.7 and 0.95, 5 seeds x 1000 jobs each
    python bench/placement_quality.py --seeds 1 --jobs 60 --loads 0.9   # the smoke test's size
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from harness import Table, fmt_pct, machine, median, write_json
from placesim import LEVELS, Result, Shape, Simulator, build_nodes, make_trace
from policies import KubeScheduler, Railtrain


def metrics(result: Result) -> dict[str, float]:
    """The figures of one simulated run (see the module docstring)."""
    started = [j for j in result.jobs if j.start is not None]
    multi = [j for j in started if j.spec.pods > 1]
    waits = sorted(j.start - j.spec.arrival for j in started)
    big = [j.start - j.spec.arrival for j in started if j.spec.pods >= 16]
    capacity_hours = result.gpus * result.window_hours
    mean = lambda xs: statistics.fmean(xs) if xs else float("nan")  # noqa: E731
    return {
        "jobs": len(result.jobs),
        "jobs_never_started": len(result.jobs) - len(started),
        "smallest_domain_share": mean([float(j.placed_level <= j.feasible_level) for j in multi]),
        "util_at_first_refusal": result.first_refusal_util,
        "bound_at_first_refusal": result.first_refusal_bound,
        "util_at_refusals": mean(result.refusal_util),
        "ring_distance_mean": mean([j.ring_distance for j in multi]),
        "one_rack_share": mean([float(j.placed_level <= 1) for j in multi if j.spec.pods <= 8]),
        "busy_util": result.busy_gpu_hours / capacity_hours,
        "held_idle_share": result.held_gpu_hours / capacity_hours,
        "wait_mean_h": mean(waits),
        "wait_p95_h": waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else float("nan"),
        "wait_mean_h_16plus": mean(big),
    }


ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("smallest_domain_share", "multi-pod jobs in the smallest feasible domain", fmt_pct),
    ("util_at_first_refusal", "GPU utilisation (started jobs) at the first refusal", fmt_pct),
    ("bound_at_first_refusal", "GPUs bound to any pod at the first refusal", fmt_pct),
    ("util_at_refusals", "GPU utilisation (started jobs) at refusals, mean", fmt_pct),
    ("ring_distance_mean", "mean ring-neighbour distance (0 node .. 3 cluster)", lambda v: f"{v:.2f}"),
    ("one_rack_share", "jobs of 2-8 pods inside one rack", fmt_pct),
    ("busy_util", "GPU utilisation by started jobs (arrival window)", fmt_pct),
    ("held_idle_share", "GPUs held by pods of jobs not started", fmt_pct),
    ("jobs_never_started", "jobs never started (partial gangs deadlocked)", lambda v: f"{v:.0f}"),
    ("wait_mean_h", "mean wait, hours", lambda v: f"{v:.2f}"),
    ("wait_p95_h", "p95 wait, hours", lambda v: f"{v:.2f}"),
    ("wait_mean_h_16plus", "mean wait of jobs of 16+ pods, hours", lambda v: f"{v:.2f}"),
)


def run_seed(seed: int, load: float, args: argparse.Namespace, shape: Shape) -> dict[str, dict[str, float]]:
    """Simulate one trace under both policies; return policy → metrics."""
    nodes = build_nodes(shape, random.Random(seed), shuffled_names=not args.ordered_names)
    trace = make_trace(seed, args.jobs, load, shape)
    out = {}
    for policy in (Railtrain(nodes, shape.gpus_per_node), KubeScheduler(nodes, shape.gpus_per_node, seed)):
        out[policy.name] = metrics(Simulator(shape, nodes, trace, policy).run())
    return out


def main(argv: list[str] | None = None) -> None:
    """Parse flags, simulate every load and seed, print the table and write the JSON record."""
    parser = argparse.ArgumentParser(prog="placement_quality.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="Number of traces per load (seeds seed..seed+seeds-1; default 5).")
    parser.add_argument("--seed", type=int, default=0, help="First seed (default 0).")
    parser.add_argument("--jobs", type=int, default=1000, help="Jobs per trace (default 1000).")
    parser.add_argument("--loads", default="0.7,0.95", help="Comma-separated offered loads, GPU-hours asked per hour / GPUs (default 0.7,0.95).")
    parser.add_argument("--nodes", type=int, default=128, help="Nodes (default 128).")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8).")
    parser.add_argument("--nodes-per-rack", type=int, default=8, help="Nodes per rack (default 8).")
    parser.add_argument("--racks-per-block", type=int, default=4, help="Racks per block (default 4).")
    parser.add_argument("--ordered-names", action="store_true", help="Name nodes in topology order (node-000, ...) instead of random tokens.")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/placement_quality-<time>.json).")
    args = parser.parse_args(argv)
    try:
        loads = [float(x) for x in args.loads.split(",") if x]
    except ValueError:
        parser.error("--loads must be comma-separated numbers")
    if args.seeds < 1 or args.jobs < 1 or not loads or min(loads) <= 0:
        parser.error("--seeds and --jobs must be >= 1 and --loads positive")
    shape = Shape(args.nodes, args.gpus_per_node, args.nodes_per_rack, args.racks_per_block)
    started = time.perf_counter()
    seeds = range(args.seed, args.seed + args.seeds)
    per_seed = {str(load): {str(seed): run_seed(seed, load, args, shape) for seed in seeds} for load in loads}
    summary: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    columns = []
    for load, runs in per_seed.items():
        summary[load] = {}
        for policy in next(iter(runs.values())):
            columns.append((load, policy))
            summary[load][policy] = {}
            for key, _, _ in ROWS:
                vals = [m[policy][key] for m in runs.values()]
                summary[load][policy][key] = {"median": median(vals), "min": min(vals), "max": max(vals)}
    table = Table(
        f"placement quality: {shape.describe()}; {args.seeds} seeds x {args.jobs} jobs per load",
        ["metric", *(f"{policy} @ load {load}" for load, policy in columns)],
        note="median over seeds [min-max]; the domain, ring and rack rows count multi-pod jobs only",
    )
    for key, label, fmt in ROWS:
        cells = []
        for load, policy in columns:
            v = summary[load][policy][key]
            cells.append(fmt(v["median"]) if args.seeds == 1 else f"{fmt(v['median'])} [{fmt(v['min'])}-{fmt(v['max'])}]")
        table.add(label, *cells)
    table.print()
    record: dict[str, Any] = {
        "machine": machine(),
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "cluster": {"describe": shape.describe(), "levels": LEVELS},
        "elapsed_s": round(time.perf_counter() - started, 2),
        "per_seed": per_seed,
        "summary": summary,
        "table": table.plain(),
    }
    print(f"JSON: {write_json('placement_quality', record, args.json)}")


if __name__ == "__main__":
    main()
