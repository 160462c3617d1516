"""Checkpoint tiers: write throughput against the raw disk, training-loop blocking (async vs sync), restore time.

One torchrun launch of ``--nproc`` processes (gloo), each standing for a node
(its own memory-tier and local-tier directory, so the memory tier really
sends a copy to its neighbour), trains a transformer sized so that model plus
AdamW state is at least ``--min-state-mib`` (FSDP2, one shard per process),
and measures with the real :class:`railtrain.trainer.checkpoint.Checkpointer`:

* **write**: a synchronous save to one tier at a time (staging, serialization,
  checksum, writing, peer copy, manifests, retention), as aggregate MB/s over all
  processes, next to the raw bandwidth of the same directory measured in the
  same run right after each save (the "paired" ratio is the median of these
  per-save ratios, which a shared machine's load swings disturb less): every process writes the same number of bytes with plain
  ``write`` + ``fsync`` (tmpfs: no device behind it), and, for disk
  directories, ``dd oflag=direct`` (no page cache).
* **blocked**: seconds ``save()`` holds the training loop with all tiers due,
  ``--no-checkpoint-async`` vs async, and how much slower the steps that run
  while the background write goes on are than steps without a save.
* **restore**: ``load_latest`` from one tier at a time (verification of every
  checksum included) with the disk tiers' files evicted from the page cache
  (``posix_fadvise DONTNEED``), and the memory tier once more after deleting
  one node's shards (restored from its neighbour's copy).

Medians over ``--repeats``. Run from the repository root::

    python bench/checkpoint_tiers.py                          # 2 processes, >= 256 MiB of state, dirs under /dev/shm and /tmp
    python bench/checkpoint_tiers.py --local-dir /mnt/nvme/x --persistent-dir /mnt/shared/x
    python bench/checkpoint_tiers.py --min-state-mib 16 --repeats 1 --steps 1   # the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import Table, fmt_s, fmt_x, machine, median, ratio, write_json

REPO = Path(__file__).resolve().parents[1]
TIERS = ("memory", "local", "persistent")


# --- worker (under torchrun) --------------------------------------------------------------


def _evict(root: Path) -> None:
    """Drop ``root``'s files from the page cache, so a restore reads the device."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _raw_write(directory: Path, nbytes: int) -> float:
    """Seconds to write ``nbytes`` with write + fsync into ``directory`` (the file is removed after)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = os.urandom(1 << 20) * (nbytes // (1 << 20) + 1)
    path = directory / f"raw-{uuid.uuid4().hex}"
    start = time.perf_counter()
    with open(path, "wb") as fh:
        fh.write(memoryview(data)[:nbytes])
        fh.flush()
        os.fsync(fh.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


def _dd_direct(directory: Path, nbytes: int) -> float:
    """Seconds of ``dd oflag=direct`` writing ``nbytes`` into ``directory``; NaN where O_DIRECT is refused (tmpfs)."""
    path = directory / f"dd-{uuid.uuid4().hex}"
    count = max(1, nbytes // (4 << 20))
    start = time.perf_counter()
    proc = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=4M", f"count={count}", "oflag=direct", "conv=fsync"], capture_output=True)
    seconds = time.perf_counter() - start
    path.unlink(missing_ok=True)
    return seconds * nbytes / (count * (4 << 20)) if proc.returncode == 0 else float("nan")


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from railtrain.trainer.checkpoint import Checkpointer, TierConfig
    from railtrain.trainer.model import ModelConfig, Transformer

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(dim=args.dim, n_layers=args.layers, n_heads=max(1, args.dim // 64), hidden_dim=int(args.dim * 8 / 3) // 64 * 64 or 64, max_seq_len=args.seq_len)
    torch.manual_seed(0)
    model = Transformer(cfg)
    for block in model.layers.values() if hasattr(model.layers, "values") else model.layers:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, cfg.vocab_size, (args.batch_size, args.seq_len))

    def step() -> None:
        model(batch).float().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    state_bytes = sum(t.numel() * t.element_size() for t in model.parameters()) * 3  # weights + 2 AdamW moments, whole model
    dirs = {"memory": Path(args.memory_dir) / f"node-{rank}", "local": Path(args.local_dir) / f"node-{rank}", "persistent": Path(args.persistent_dir)}

    def checkpointer(names: tuple[str, ...], async_save: bool) -> Checkpointer:
        tiers = [TierConfig(n, str(dirs[n]), 1, 1) for n in names]
        return Checkpointer(tiers, rank=rank, world_size=world, local_world_size=1, distributed=True, layout="bench", async_save=async_save)

    def timed(fn: Any) -> float:
        dist.barrier()
        start = time.perf_counter()
        fn()
        dist.barrier()
        return time.perf_counter() - start

    samples: dict[str, list[float]] = {}

    def record(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    def total(value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())

    shard_bytes = 0
    for repeat in range(args.repeats):
        step_id = 10 * (repeat + 1)
        for name in TIERS:  # write: one tier at a time, synchronous, after a warm-up save (staging buffers exist)
            ck = checkpointer((name,), async_save=False)
            ck.save(step_id, model, optimizer, {"step": step_id}, last_step=10**9)
            seconds = timed(lambda: ck.save(step_id + 1, model, optimizer, {"step": step_id + 1}, last_step=10**9))
            files = [p for p in (dirs[name] / f"step-{step_id + 1}").iterdir() if not p.name.endswith(".json")]
            mine = [p for p in files if p.name in (f"rank-{rank}.pt", f"peer-{(rank - 1) % world}.pt") or (name == "persistent" and rank == 0)]
            if name != "persistent":
                shard_bytes = (dirs[name] / f"step-{step_id + 1}" / f"rank-{rank}.pt").stat().st_size
            record(f"write_s/{name}", seconds)
            record(f"write_bytes/{name}", total(sum(p.stat().st_size for p in mine)))
            record(f"state_bytes/{name}", total(shard_bytes))
            ck.close()
            raw = timed(lambda: _raw_write(dirs[name], shard_bytes))
            record(f"raw_s/{name}", raw)
            record(f"raw_bytes/{name}", float(shard_bytes * world))
            if name != "memory":
                dd = torch.tensor([_dd_direct(dirs[name], shard_bytes)])
                dist.all_reduce(dd, op=dist.ReduceOp.MAX)
                record(f"dd_s/{name}", float(dd.item()))
        for name in TIERS:  # restore: one tier at a time, cold page cache for disks
            if name != "memory":
                _evict(dirs[name])
            ck = checkpointer((name,), async_save=False)
            record(f"restore_s/{name}", timed(lambda: ck.load_latest(model, optimizer, {"step": 0})))
            ck.close()
        for path in (dirs["memory"] / f"step-{step_id + 1}").glob("rank-*"):  # node 1 loses its RAM
            if rank == 1:
                path.unlink()
        ck = checkpointer(("memory",), async_save=False)
        record("restore_s/memory (peer copy)", timed(lambda: ck.load_latest(model, optimizer, {"step": 0})))
        ck.close()
        # blocked: all tiers due; steps during the background write vs steps alone
        base = timed(lambda: [step() for _ in range(args.steps)])
        record("steps_s/none", base)
        for mode in ("sync", "async"):
            ck = checkpointer(TIERS, async_save=mode == "async")
            ck.save(step_id + 2, model, optimizer, {"step": step_id + 2}, last_step=10**9)  # warm-up
            ck.wait()
            dist.barrier()
            blocked = ck.save(step_id + 3, model, optimizer, {"step": step_id + 3}, last_step=10**9)
            during = timed(lambda: [step() for _ in range(args.steps)])
            waited = timed(ck.wait)
            b = torch.tensor([blocked])
            dist.all_reduce(b, op=dist.ReduceOp.MAX)
            record(f"blocked_s/{mode}", float(b.item()))
            record(f"steps_s/{mode}", during)
            record(f"wait_after_s/{mode}", waited)
            ck.close()
    if rank == 0:
        Path(args.out).write_text(json.dumps({"samples": samples, "state_bytes": state_bytes, "shard_bytes": shard_bytes, "world_size": world, "params": cfg.num_params()}))
    dist.destroy_process_group()


# --- driver ----------------------------------------------------------------------------


def size_model(min_state_mib: int) -> tuple[int, int]:
    """``(dim, layers)`` of a model whose weights + AdamW moments reach ``min_state_mib``."""
    for dim, layers in ((128, 2), (256, 2), (384, 2), (512, 2), (512, 4), (768, 4), (1024, 4), (1024, 8), (1536, 8)):
        params = layers * (4 * dim * dim + 3 * dim * (int(dim * 8 / 3) // 64 * 64)) + 2 * 256 * dim
        if params * 12 >= min_state_mib << 20:
            return dim, layers
    return 2048, 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2, help="processes, each standing for one node")
    parser.add_argument("--min-state-mib", type=int, default=256, help="smallest model + optimizer state to checkpoint, MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="training steps timed with and without a save in flight")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--memory-dir", default="", help="memory tier root (default: a fresh directory under /dev/shm)")
    parser.add_argument("--local-dir", default="", help="local tier root (default: a fresh directory under the temp dir)")
    parser.add_argument("--persistent-dir", default="", help="persistent tier (default: a fresh directory under the temp dir)")
    parser.add_argument("--json", default="", help="where to write the JSON record (default: bench/results/checkpoint_tiers-<time>.json)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    scratch = Path(tempfile.mkdtemp(prefix="railtrain-bench-"))
    shm = Path(tempfile.mkdtemp(prefix="railtrain-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    args.memory_dir = args.memory_dir or str(shm)
    args.local_dir = args.local_dir or str(scratch / "local")
    args.persistent_dir = args.persistent_dir or str(scratch / "persistent")
    args.dim, args.layers = size_model(args.min_state_mib)
    out = scratch / "result.json"
    before = machine()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc), __file__, "--worker", "--out", str(out)]
    for key in ("repeats", "steps", "batch_size", "seq_len", "threads", "memory_dir", "local_dir", "persistent_dir", "dim", "layers"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "bench"), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            sys.exit(f"worker failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        result = json.loads(out.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    summary = summarize(result)
    for table in tables(summary, result, args):
        table.print()
    path = write_json(
        "checkpoint_tiers",
        {"parameters": {k: v for k, v in vars(args).items() if k not in ("worker", "out")}, "machine_before": before, "machine_after": machine(), **result, "summary": summary},
        Path(args.json) if args.json else None,
    )
    print(f"wrote {path}")


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Medians and derived rates (MB/s = 1e6 bytes per second, aggregate over processes)."""
    s = {k: median(v) for k, v in result["samples"].items()}
    out: dict[str, Any] = {"write": {}, "restore": {}, "blocked": {}}
    for tier in TIERS:
        write_mbs = s[f"write_bytes/{tier}"] / s[f"write_s/{tier}"] / 1e6
        state_mbs = s[f"state_bytes/{tier}"] / s[f"write_s/{tier}"] / 1e6
        raw_mbs = s[f"raw_bytes/{tier}"] / s[f"raw_s/{tier}"] / 1e6
        dd = s.get(f"dd_s/{tier}", float("nan"))
        dd_mbs = s[f"raw_bytes/{tier}"] / result["world_size"] / dd / 1e6 if dd == dd else float("nan")
        raw = result["samples"]
        paired = [ratio(wb / ws, rb / rs) for wb, ws, rb, rs in zip(raw[f"write_bytes/{tier}"], raw[f"write_s/{tier}"], raw[f"raw_bytes/{tier}"], raw[f"raw_s/{tier}"])]
        out["write"][tier] = {
            "seconds": s[f"write_s/{tier}"], "bytes_written": s[f"write_bytes/{tier}"], "state_bytes": s[f"state_bytes/{tier}"],
            "written_mb_s": write_mbs, "state_mb_s": state_mbs, "raw_mb_s": raw_mbs, "dd_direct_mb_s_one_process": dd_mbs, "of_raw": ratio(write_mbs, raw_mbs),
            "of_raw_paired": median(paired), "of_raw_each": paired,
        }  # fmt: skip
    for key in [k for k in s if k.startswith("restore_s/")]:
        tier = key.split("/", 1)[1]
        out["restore"][tier] = {"seconds": s[key], "mb_s": result["state_bytes"] / s[key] / 1e6}
    base = s["steps_s/none"]
    for mode in ("sync", "async"):
        out["blocked"][mode] = {"blocked_s": s[f"blocked_s/{mode}"], "steps_s": s[f"steps_s/{mode}"], "steps_slowdown": ratio(s[f"steps_s/{mode}"], base), "wait_after_s": s[f"wait_after_s/{mode}"]}
    out["blocked"]["steps_s_without_save"] = base
    return out


def tables(summary: dict[str, Any], result: dict[str, Any], args: argparse.Namespace) -> list[Table]:
    mib = result["state_bytes"] / 2**20
    note = f"{result['world_size']} processes (one per simulated node), {result['params'] / 1e6:.1f}M parameters, {mib:.0f} MiB of weights + AdamW state; medians of {args.repeats}"
    write = Table(
        "Checkpoint write (synchronous save of one tier; MB/s over all processes)",
        ["tier", "save s", "state MB/s", "written MB/s", "raw write+fsync MB/s", "written/raw", "paired written/raw", "dd direct MB/s (1 proc)"],
        note=note + "; the memory tier writes each shard twice (own + the neighbour's copy); paired: the median over repeats of each save's rate over the raw write measured right after it (steadier on a shared machine)",
    )
    for tier, w in summary["write"].items():
        dd = w["dd_direct_mb_s_one_process"]
        write.add(tier, fmt_s(w["seconds"]), f"{w['state_mb_s']:.0f}", f"{w['written_mb_s']:.0f}", f"{w['raw_mb_s']:.0f}", fmt_x(w["of_raw"]), fmt_x(w["of_raw_paired"]), "-" if dd != dd else f"{dd:.0f}")
    blocked = Table("Training loop blocked by a save of all three tiers", ["mode", "save() blocks s", f"{args.steps} steps during write s", "vs no save", "wait after s"], note=f"{args.steps} steps without a save: {summary['blocked']['steps_s_without_save']:.2f} s")
    for mode in ("sync", "async"):
        b = summary["blocked"][mode]
        blocked.add(mode, f"{b['blocked_s']:.3f}", fmt_s(b["steps_s"]), fmt_x(b["steps_slowdown"]), fmt_s(b["wait_after_s"]))
    restore = Table(f"Restore ({mib:.0f} MiB state, checksums verified, disk tiers from a cold page cache)", ["tier", "seconds", "MB/s"])
    for tier, r in summary["restore"].items():
        restore.add(tier, fmt_s(r["seconds"]), f"{r['mb_s']:.0f}")
    return [write, blocked, restore]


if __name__ == "__main__":
    main()
