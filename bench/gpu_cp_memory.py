"""The GPU check's context-parallel case: activation memory per rank at long sequences, context 1 against context N.

Run by ``bench/gpu_check.py --cp-memory`` under torchrun, one process per GPU
(``torchrun --nproc-per-node 8 bench/gpu_check.py --cp-memory``). For each
sequence length of ``--cp-seq-lens`` (default 8,192, 32,768 and 131,072
tokens) and one sequence per step, every rank measures one forward and
backward of the preset (its ``max_seq_len`` raised to the length), in bf16
autocast over float32 weights, twice:

* context 1: the whole sequence on this GPU alone (no communication);
* context N (N = the processes launched, when above 1): this rank's two chunks,
  ring attention over all N ranks (NCCL ``isend``/``irecv``).

The figure is the peak of ``torch.cuda.max_memory_allocated`` over the pass
minus what was allocated before it (weights, gradients: the activations and
the temporaries); a length that does not fit is reported as such (CUDA out of
memory), which is the point of the case. With ``--device cpu`` it is a dry run
on gloo, measuring the peak RSS the pass adds (see ``bench/cp_memory.py``).
Nothing about speed is measured or claimed here; no figure exists until it has
run on a GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MiB = 1 << 20


def measure(preset: str, seq_len: int, device_type: str, ring: Any, cp: int, cp_rank: int) -> dict[str, Any]:
    """One forward and backward of ``preset`` at ``seq_len`` tokens with context ``cp``; the memory it added.

    Returns:
        ``{"seq_len", "context", "local_tokens", "added_bytes"}``; ``added_bytes`` is ``None``
        when the pass ran out of device memory (then ``"error"`` holds the sentence).
    """
    import torch

    from cp_memory import release_free_memory, rss_bytes
    from railtrain.trainer.context_parallel import shard_sequence
    from railtrain.trainer.model import PRESETS, Transformer, lm_loss

    out: dict[str, Any] = {"seq_len": seq_len, "context": cp, "local_tokens": seq_len // cp, "added_bytes": None}
    device = torch.device(device_type, torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    model = None
    try:
        torch.manual_seed(0)
        with torch.device(device):
            model = Transformer(dataclasses.replace(PRESETS[preset], max_seq_len=seq_len))
        if cp > 1:
            model.use_context_parallel(ring, seq_len)
        tokens = torch.randint(0, 256, (1, seq_len + 1), generator=torch.Generator().manual_seed(1)).to(device)
        inputs, targets = (shard_sequence(t, cp, cp_rank) for t in (tokens[:, :-1], tokens[:, 1:]))
        for p in model.parameters():
            p.grad = torch.zeros_like(p)  # gradients count as state, not as the pass's memory
        if device_type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            release_free_memory()
            before = rss_bytes("VmRSS")
            open("/proc/self/clear_refs", "w").write("5")
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=device_type == "cuda"):
            loss = lm_loss(model(inputs), targets)
        loss.backward()
        if device_type == "cuda":
            torch.cuda.synchronize()
            out["added_bytes"] = torch.cuda.max_memory_allocated() - before
        else:
            out["added_bytes"] = rss_bytes("VmHWM") - before
    except torch.OutOfMemoryError as err:
        out["error"] = f"CUDA out of memory: {str(err).splitlines()[0]}"
    finally:
        del model
        if device_type == "cuda":
            torch.cuda.empty_cache()
    return out


def run(preset: str, seq_lens: list[int], device_type: str) -> list[dict[str, Any]]:
    """Every rank's measurements for every length, context 1 and (when launched with several processes) context N.

    Must be called on every rank (it joins the process group when torchrun launched it).
    Returns rank 0's view: one dict per (length, context) with ``added_bytes`` of every rank.
    """
    import torch.distributed as dist

    from railtrain.trainer.context_parallel import Ring
    from railtrain.trainer.parallel import init_distributed, shutdown_distributed

    info = init_distributed(device_type)
    n = info.world_size
    ring = Ring.of(dist.group.WORLD) if info.distributed and n > 1 else None
    rows = []
    for seq in seq_lens:
        for cp in sorted({1, n}):
            if seq % (2 * cp):
                continue
            mine = measure(preset, seq, device_type, ring, cp, info.rank if cp > 1 else 0)
            everyone: list[Any] = [mine]
            if info.distributed:
                everyone = [None] * n
                dist.all_gather_object(everyone, mine)
            rows.append({**{k: mine[k] for k in ("seq_len", "context", "local_tokens")},
                         "added_bytes": [e["added_bytes"] for e in everyone], "errors": sorted({e["error"] for e in everyone if "error" in e})})  # fmt: skip
    shutdown_distributed()
    return rows if info.rank == 0 else []


def table_rows(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """``(tokens, context, tokens per rank, largest rank's MiB or "out of memory", vs context 1)`` per row."""
    base = {r["seq_len"]: r for r in rows if r["context"] == 1}
    out = []
    for r in rows:
        peak = None if None in r["added_bytes"] else max(r["added_bytes"])
        ref = base.get(r["seq_len"])
        ref_peak = None if ref is None or None in ref["added_bytes"] else max(ref["added_bytes"])
        ratio = f"{peak / ref_peak:.2f}x" if peak is not None and ref_peak else "-"
        out.append((f"{r['seq_len']:,}", str(r["context"]), f"{r['local_tokens']:,}", "out of memory" if peak is None else f"{peak / MiB:,.0f}", ratio))
    return out
