"""100 TrainingJobs × 8 pods applied at once: time until all 800 pods are Running, and pods/s.

Measured three ways on one cluster in the same run (see ``kwokbench``):
``floor`` (the same 800 pods created with ``nodeName`` set), ``scheduler``
(the same pods through kube-scheduler alone) and ``operator`` (100
TrainingJobs created at once by the same thread pool, through the railtrain
operator).

Cluster shape: 128 nodes × 8 GPUs (16 racks of 8, 4 blocks), every pod asks
1 GPU, so 800 of the 1,024 GPUs end up used. railtrain puts the pods of one
gang on distinct nodes, so a shape that merely has 800 GPUs may not fit:
100 nodes × 8 GPUs would strand the last jobs once fewer than 8 nodes have a
free GPU. The script refuses a node count for which some placement order
could leave fewer than ``--pods-per-job`` nodes with a free GPU.

    python bench/many_jobs.py                                           # 100 x 8, 3 repeats
    python bench/many_jobs.py --jobs 2 --pods-per-job 2 --nodes 4 --repeats 1   # smoke size
"""

from __future__ import annotations

import argparse

from kwokbench import Workload, add_common_args, report, run_matrix

GPUS_PER_NODE = 8


def min_nodes(jobs: int, pods_per_job: int, gpus_per_pod: int, gpus_per_node: int) -> int:
    """Fewest nodes on which every job fits whatever nodes the earlier jobs took.

    With ``N`` nodes and the other jobs placed, fewer than ``pods_per_job``
    nodes with ``gpus_per_pod`` free would mean at most
    ``(pods_per_job - 1) * gpus_per_node + N * (gpus_per_pod - 1)`` free GPUs;
    the smallest ``N`` for which the free GPUs exceed that always fits.
    """
    placed = (jobs - 1) * pods_per_job * gpus_per_pod
    per_node = gpus_per_node - gpus_per_pod + 1
    return max(pods_per_job, (placed + (pods_per_job - 1) * gpus_per_node) // per_node + 1)


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run the benchmark, print the table and write the JSON record."""
    parser = argparse.ArgumentParser(prog="many_jobs.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100, help="TrainingJobs applied at once (default 100).")
    parser.add_argument("--pods-per-job", type=int, default=8, help="Pods (nodes) per job (default 8).")
    parser.add_argument("--gpus-per-pod", type=int, default=1, help="GPUs each pod asks (default 1).")
    parser.add_argument("--nodes", type=int, default=128, help=f"KWOK nodes of {GPUS_PER_NODE} GPUs (default 128).")
    add_common_args(parser)
    args = parser.parse_args(argv)
    if min(args.jobs, args.pods_per_job, args.gpus_per_pod) < 1 or args.gpus_per_pod > GPUS_PER_NODE:
        parser.error(f"--jobs and --pods-per-job must be >= 1 and --gpus-per-pod in 1..{GPUS_PER_NODE}")
    need = min_nodes(args.jobs, args.pods_per_job, args.gpus_per_pod, GPUS_PER_NODE)
    if args.nodes < need:
        parser.error(f"--nodes {args.nodes} may not fit {args.jobs} gangs of {args.pods_per_job} pods on distinct nodes; use >= {need}")
    workload = Workload(f"{args.jobs}x{args.pods_per_job}", jobs=args.jobs, pods_per_job=args.pods_per_job, gpus_per_pod=args.gpus_per_pod)
    warm = Workload("warm", jobs=min(args.jobs, 4), pods_per_job=args.pods_per_job, gpus_per_pod=args.gpus_per_pod)
    record = run_matrix("many_jobs", args, [workload], node_count=args.nodes, gpus_per_node=GPUS_PER_NODE,
                        node_shape={"nodes_per_rack": 8, "racks_per_block": 4}, warmup=warm)
    report(
        "many_jobs", record,
        f"many jobs: {args.jobs} jobs x {args.pods_per_job} pods x {args.gpus_per_pod} GPU applied at once "
        f"({args.nodes} KWOK nodes x {GPUS_PER_NODE} GPUs)",
        note="medians of the repeats; 'median job Running' = median over jobs of when a job's last pod was Running", json_path=args.json,
    )


if __name__ == "__main__":
    main()
