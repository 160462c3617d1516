"""Apply → every pod Running, for one gang of 8, 64 and 256 pods on KWOK nodes.

Each gang size is started three ways on the same cluster, in the same run
(see ``kwokbench``): ``floor`` (the same pods created with ``nodeName`` set:
no operator, no scheduler), ``scheduler`` (the same pods through
kube-scheduler alone, no gang) and ``operator`` (one TrainingJob with
``nodes=N``, 8 GPUs per pod, through the railtrain operator). The cluster has
as many 8-GPU nodes as the largest gang, so every pod takes a whole node.

    python bench/gang_startup.py                       # 8, 64, 256 pods; 3 repeats
    python bench/gang_startup.py --sizes 4 --repeats 1 # the smoke test's size
"""

from __future__ import annotations

import argparse

from kwokbench import Workload, add_common_args, report, run_matrix

GPUS_PER_NODE = 8


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run the benchmark, print the table and write the JSON record."""
    parser = argparse.ArgumentParser(prog="gang_startup.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8,64,256", help="Comma-separated gang sizes in pods (default 8,64,256).")
    add_common_args(parser)
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s})
    if not sizes or sizes[0] < 1:
        parser.error("--sizes must list positive integers")
    workloads = [Workload(str(n), jobs=1, pods_per_job=n, gpus_per_pod=GPUS_PER_NODE) for n in sizes]
    record = run_matrix("gang_startup", args, workloads, node_count=sizes[-1], gpus_per_node=GPUS_PER_NODE, node_shape={"nodes_per_rack": 8, "racks_per_block": 4})
    report(
        "gang_startup", record,
        f"gang start-up: apply -> every pod Running ({sizes[-1]} KWOK nodes x {GPUS_PER_NODE} GPUs, 1 pod per node)",
        note="medians of the repeats; 'vs floor' = median / the floor's median in the same run", json_path=args.json,
    )


if __name__ == "__main__":
    main()
