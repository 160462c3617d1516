"""All-reduce bus bandwidth with a fabric profile's variables on and off (docs/fabric.md).

Bus bandwidth is the figure nccl-tests reports (its ``doc/PERFORMANCE.md``):
``algbw = bytes / seconds`` and, for all-reduce, ``busbw = algbw × 2(n−1)/n``
for ``n`` ranks, comparable with the hardware's link speed whatever ``n`` is.
Each size is timed over ``--iters`` all-reduces after ``--warmup`` untimed
ones (CUDA-synchronised), the slowest rank's time counted. The two settings
alternate ``--repeats`` times and the table shows medians and their ratio.

On one machine the GPUs talk over NVLink or PCIe, where the profile's network
variables change nothing but bootstrap: expect a ratio near 1 there (a
control). The interesting run is across nodes: launch one process per GPU
with torchrun on each node, once with the profile's variables exported and
once without (``--torchrun`` measures the setting it was started with):

    python bench/gpu_check.py --allreduce --fabric-profile infiniband          # this machine's GPUs, on vs off
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:29500 bench/allreduce.py --torchrun
    python bench/allreduce.py --device cpu --gpus 2 --sizes 4096 --iters 2 --warmup 1 --repeats 1   # dry run (gloo)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

DEFAULT_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
"""Message sizes in bytes: 1 MiB to 1 GiB."""


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """All-reduce bus bandwidth in bytes/s: ``nbytes / seconds × 2(world−1)/world`` (nccl-tests' definition)."""
    return nbytes / seconds * 2 * (world - 1) / world


def time_allreduce(sizes: Sequence[int], iters: int, warmup: int, device: str) -> list[float]:
    """Seconds per all-reduce of each size in the current process group, the slowest rank's (every rank returns it).

    Args:
        sizes: message sizes in bytes (float32 elements, rounded down).
        iters, warmup: timed and untimed all-reduces per size.
        device: ``cuda`` (the local rank's GPU, ``LOCAL_RANK``) or ``cpu``.
    """
    import torch
    import torch.distributed as dist

    dev = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}") if device == "cuda" else torch.device("cpu")
    out = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
        for _ in range(warmup):
            dist.all_reduce(x)
        if device == "cuda":
            torch.cuda.synchronize(dev)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        if device == "cuda":
            torch.cuda.synchronize(dev)
        took = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=dev)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        out.append(float(took.item()))
    return out


def _worker(rank: int, world: int, port: int, device: str, sizes: Sequence[int], iters: int, warmup: int, env: Mapping[str, str | None], out: str) -> None:
    """One rank of a single-machine run: apply ``env`` (None unsets), join the group, time, rank 0 writes ``out``."""
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import torch.distributed as dist

    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    try:
        seconds = time_allreduce(sizes, iters, warmup, device)
        if rank == 0:
            Path(out).write_text(json.dumps(seconds))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(world: int, device: str, sizes: Sequence[int], iters: int, warmup: int, env: Mapping[str, str | None]) -> list[float]:
    """Seconds per all-reduce of each size across ``world`` local processes (fresh processes, so NCCL reads ``env``)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "seconds.json")
        mp.spawn(_worker, args=(world, _free_port(), device, list(sizes), iters, warmup, dict(env), out), nprocs=world, join=True)
        return json.loads(Path(out).read_text())


def profile_env(name: str, hcas: str | None = None) -> dict[str, str]:
    """The variables a rank gets under fabric profile ``name`` on a node whose HCA list is ``hcas`` (None: not set)."""
    from railtrain.crds import fabric

    profile = fabric.resolve_profile(name, {})
    env = dict(profile.env)
    for node_value in profile.per_node:
        value = fabric.node_value(hcas, node_value.prefix)
        if value is not None:
            env[node_value.env] = value
    return env


def compare(profile: str, world: int, device: str, sizes: Sequence[int], iters: int, warmup: int, repeats: int, hcas: str | None = None) -> dict[str, Any]:
    """Bus bandwidth per size with the profile's variables off and on, alternating ``repeats`` times.

    Returns:
        ``{"profile", "env", "world", "sizes": [{"bytes", "busbw_off", "busbw_on", "ratio", "runs_off", "runs_on"}]}``
        (bandwidths in bytes/s, medians; ratio = on / off).
    """
    on = profile_env(profile, hcas)
    off: dict[str, str | None] = {k: None for k in on}
    runs: dict[str, list[list[float]]] = {"off": [], "on": []}
    for _ in range(repeats):
        for label, env in (("off", off), ("on", on)):
            runs[label].append(measure(world, device, sizes, iters, warmup, env))
    rows = []
    for i, nbytes in enumerate(sizes):
        bw = {label: [bus_bandwidth(nbytes, r[i], world) for r in runs[label]] for label in runs}
        med = {label: statistics.median(v) for label, v in bw.items()}
        rows.append({"bytes": nbytes, "busbw_off": med["off"], "busbw_on": med["on"], "ratio": med["on"] / med["off"], "runs_off": bw["off"], "runs_on": bw["on"]})
    return {"profile": profile, "env": on, "world": world, "device": device, "sizes": rows}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags of the stand-alone script (errors exit 2)."""
    p = argparse.ArgumentParser(prog="allreduce.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--fabric-profile", default="railtrain", help="Profile whose variables are compared (default railtrain).")
    p.add_argument("--hcas", default=None, help="This node's HCA list, as the railtrain.dev/hcas node annotation would give it.")
    p.add_argument("--gpus", type=int, default=0, help="Local ranks (default: every visible GPU; 2 with --device cpu).")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cuda (NCCL; default) or cpu (gloo, a dry run).")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="Comma-separated message sizes in bytes.")
    p.add_argument("--iters", type=int, default=20, help="Timed all-reduces per size (default 20).")
    p.add_argument("--warmup", type=int, default=5, help="Untimed all-reduces per size first (default 5).")
    p.add_argument("--repeats", type=int, default=3, help="Alternations of off and on (default 3).")
    p.add_argument("--torchrun", action="store_true", help="Started by torchrun: measure the current environment across the whole group.")
    p.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/allreduce-<time>.json).")
    args = p.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes: give byte counts separated by commas, got {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 4 or args.iters < 1 or args.warmup < 0 or args.repeats < 1 or args.gpus < 0:
        p.error("--sizes must be >= 4 bytes, --iters and --repeats >= 1, --warmup and --gpus >= 0")
    return args


def world_size(args: argparse.Namespace) -> int:
    """Local ranks to spawn: ``--gpus``, else every visible GPU (2 on CPU)."""
    if args.gpus:
        return args.gpus
    if args.device == "cpu":
        return 2
    import torch

    return torch.cuda.device_count()


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (or one ``--torchrun`` measurement) and print a table; 1 with fewer than 2 ranks."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import Table, machine, write_json

    args = parse_args(argv)
    if args.torchrun:
        import torch.distributed as dist

        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        seconds = time_allreduce(args.sizes, args.iters, args.warmup, args.device)
        world, rank = dist.get_world_size(), dist.get_rank()
        dist.destroy_process_group()
        if rank == 0:
            for nbytes, s in zip(args.sizes, seconds):
                print(f"{nbytes:>12} B  {bus_bandwidth(nbytes, s, world) / 1e9:8.2f} GB/s busbw  ({world} ranks)")
        return 0
    world = world_size(args)
    if world < 2:
        print(f"allreduce: needs at least 2 ranks, this machine has {world} GPU(s); pass --device cpu for a dry run", file=sys.stderr)
        return 1
    before = machine()
    r = compare(args.fabric_profile, world, args.device, args.sizes, args.iters, args.warmup, args.repeats, args.hcas)
    table = Table(
        f"all-reduce bus bandwidth, {world} ranks ({'NCCL' if args.device == 'cuda' else 'gloo'}), profile {args.fabric_profile} off vs on",
        ["bytes", "busbw off (GB/s)", "busbw on (GB/s)", "on / off"],
        note=f"medians of {args.repeats} alternating runs of {args.iters} all-reduces; on = {', '.join(f'{k}={v}' for k, v in r['env'].items()) or 'nothing'}",
    )
    for row in r["sizes"]:
        table.add(str(row["bytes"]), f"{row['busbw_off'] / 1e9:.2f}", f"{row['busbw_on'] / 1e9:.2f}", f"{row['ratio']:.2f}x")
    table.print()
    path = write_json("allreduce", {"machine": before, "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "result": r}, args.json)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
