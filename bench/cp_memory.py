"""Activation memory per rank under context parallelism (ring attention), against context 1 in the same run.

For each context degree ``N`` of ``--contexts`` one torchrun launch of ``N``
processes (CPU, gloo, one thread each) builds the ``tiny`` preset's shape with
``max_seq_len = --seq-len``, sets it to this rank's chunks
(``apply_context_parallel``) and wraps it as the trainer does (``apply_data_parallel``:
FSDP2 sharded over the ``cp`` ranks when ``N > 1``; DDP over them before issue 25,
when docs/bench-cp-memory.json was recorded), runs one warm-up
forward and backward (gradients, buckets, thread pools exist from then on),
then ``--repeats`` measured forward-and-backward passes of ``--batch-size``
random sequences of ``--seq-len`` tokens. Each measurement:

* **peak RSS**: the process's resident set just before the forward (after
  ``gc.collect`` and ``malloc_trim``), then its peak (``VmHWM`` of
  ``/proc/self/status``, reset by writing 5 to ``/proc/self/clear_refs``) over
  the forward and backward; the difference is the memory the step added:
  activations, the gradients' transients, attention's temporaries.
  ``MALLOC_MMAP_THRESHOLD_`` is fixed at 128 KiB so glibc gives large tensors
  their own mappings and returns them when freed (otherwise freed activations
  stay resident and the next step's peak hides in them).
* **saved for backward**: the bytes of the distinct storages autograd keeps
  for backward during the forward (``saved_tensors_hooks``): the activations
  proper, exact and noise-free.

The table shows per degree the median over repeats of the largest rank's
figure and its ratio to context 1's. Nothing here is a GPU figure
(``bench/gpu_check.py --cp-memory`` is).

    python bench/cp_memory.py                                       # 4,096 tokens, contexts 1 2 4
    python bench/cp_memory.py --seq-len 64 --contexts 1,2 --repeats 1 --batch-size 1   # the smoke test's size
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import Table, fmt_x, machine, median, ratio, write_json

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence (a multiple of 2 x every context degree)")
    p.add_argument("--batch-size", type=int, default=2, help="sequences per step (every rank holds its chunks of each)")
    p.add_argument("--contexts", default="1,2,4", help="context-parallel degrees, comma-separated; the first is the baseline")
    p.add_argument("--repeats", type=int, default=3, help="measured forward+backward passes per degree")
    p.add_argument("--json", type=Path, default=None, help="where to write the JSON record (default bench/results/cp_memory-<time>.json)")
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)  # internal: run one degree under torchrun
    args = p.parse_args(argv)
    args.context_list = [int(c) for c in args.contexts.split(",")]
    bad = [c for c in args.context_list if c < 1 or args.seq_len % (2 * c)]
    if bad:
        p.error(f"--contexts {bad[0]}: each degree must be >= 1 and 2 x it must divide --seq-len {args.seq_len}")
    return args


# --- worker: one context degree, run under torchrun ---------------------------------


def rss_bytes(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def release_free_memory() -> None:
    """Collect garbage and hand glibc's free pages back to the system, so RSS counts live memory."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from railtrain.crds.parallel import Degrees
    from railtrain.trainer.context_parallel import shard_sequence
    from railtrain.trainer.model import PRESETS, Transformer, lm_loss
    from railtrain.trainer.parallel import ParallelDims, apply_context_parallel, apply_data_parallel, build_mesh, init_distributed
    from railtrain.crds.process import leave_process

    torch.set_num_threads(1)
    info = init_distributed("cpu")
    n = info.world_size
    dims = ParallelDims(Degrees(context=n), n, n)
    mesh = build_mesh(dims, "cpu")
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(PRESETS["tiny"], max_seq_len=args.seq_len))
    apply_context_parallel(model, dims, mesh, args.seq_len)
    model = apply_data_parallel(model, dims, mesh, info.device, bf16=False)
    gen = torch.Generator().manual_seed(1)
    windows = torch.randint(0, 256, (args.batch_size, args.seq_len + 1), generator=gen)
    inputs = shard_sequence(windows[:, :-1], n, dims.cp_rank(info.rank))
    targets = shard_sequence(windows[:, 1:], n, dims.cp_rank(info.rank))

    def step() -> None:
        lm_loss(model(inputs), targets).backward()

    step()  # warm-up: gradients and communication buffers exist from here on
    peaks = []
    for _ in range(args.repeats):
        release_free_memory()
        dist.barrier()
        before = rss_bytes("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        step()
        peaks.append(rss_bytes("VmHWM") - before)
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        # The weights themselves (or a view of one, e.g. a transposed matrix) are not activations. Told apart here,
        # while they exist: under FSDP2 a block's gathered weights are freed again after its backward.
        if not isinstance(t._base if t._base is not None else t, torch.nn.Parameter):
            s = t.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = lm_loss(model(inputs), targets)
    loss.backward()
    saved_acts = sum(storages.values())
    mine = {"rank": info.rank, "local_tokens": int(inputs.numel()), "peak_rss_bytes": peaks, "saved_bytes": saved_acts}
    everyone: list[Any] = [None] * n
    dist.all_gather_object(everyone, mine)
    if info.rank == 0:
        args.worker.write_text(json.dumps(everyone))
    dist.destroy_process_group()
    leave_process(0)


# --- driver --------------------------------------------------------------------------


def run_degree(args: argparse.Namespace, n: int) -> list[dict[str, Any]]:
    """Launch ``n`` processes for context degree ``n``; return every rank's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ranks.json"
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), str(Path(__file__).resolve()),
               "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size), "--repeats", str(args.repeats), "--worker", str(out)]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            sys.exit(f"cp_memory: context {n} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        worker(args)  # never returns: the worker leaves through railtrain.crds.process.leave_process
    before = machine()
    results = {n: run_degree(args, n) for n in args.context_list}
    base = args.context_list[0]

    def peak(n: int) -> float:  # the largest rank's median peak, bytes
        return max(median(r["peak_rss_bytes"]) for r in results[n])

    def saved(n: int) -> float:
        return max(r["saved_bytes"] for r in results[n])

    table = Table(
        f"Activation memory per rank, tiny preset, {args.batch_size} x {args.seq_len} tokens, CPU/gloo (median of {args.repeats}, largest rank)",
        ["context", "tokens per rank", "peak RSS added (MiB)", "vs context " + str(base), "saved for backward (MiB)", "vs context " + str(base)],
    )
    summary = {}
    for n in args.context_list:
        tokens = results[n][0]["local_tokens"]
        summary[n] = {"peak_rss_mib": peak(n) / MiB, "peak_ratio": ratio(peak(n), peak(base)), "saved_mib": saved(n) / MiB, "saved_ratio": ratio(saved(n), saved(base))}
        table.add(n, tokens, f"{peak(n) / MiB:.1f}", fmt_x(summary[n]["peak_ratio"]), f"{saved(n) / MiB:.1f}", fmt_x(summary[n]["saved_ratio"]))
    table.print()
    record = {
        "parameters": {"seq_len": args.seq_len, "batch_size": args.batch_size, "contexts": args.context_list, "repeats": args.repeats, "preset": "tiny"},
        "machine_before": before, "machine_after": machine(), "ranks": {str(n): results[n] for n in args.context_list},
        "summary": {str(n): s for n, s in summary.items()}, "table": table.plain(),
    }  # fmt: skip
    path = write_json("cp_memory", record, args.json)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
