"""Context parallel: each rank of a ``cp`` group holds part of every sequence, and ring attention joins them.

Layout (load balancing for causal attention): a sequence of ``S`` tokens is cut
into ``2N`` equal chunks for ``N`` context-parallel ranks, and rank ``i`` holds
chunks ``i`` and ``2N-1-i``, one early and one late, side by side
(:func:`shard_positions`). Under a causal mask a late chunk attends to far more
keys than an early one, so every rank gets the same amount of attention work.
Everything but attention works token by token, so the model runs unchanged on
the rank's ``S/N`` tokens; the rotary table is the one of their global positions.

Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers
for Near-Infinite Context"): the ranks form a ring; each keeps its queries and
passes its key/value block to the next rank ``N-1`` times, so after ``N`` steps
every query has met every key block. With the layout above, at ring step ``s``
rank ``i`` holds the keys of rank ``j = i - s (mod N)``:

* ``s = 0``: its own block: ordinary causal attention over its two chunks;
* ``j < i``: every local query sees the first (early) key chunk in full and
  none of the second;
* ``j > i``: the second (late) local query chunk sees both key chunks in full;
  the first sees none.

So each step after the first is one unmasked half-size attention. Partial
results are merged with the log-sum-exp rule (Milakov & Gimelshein 2018,
"Online normalizer calculation for softmax"): ``lse = logaddexp(lse_a, lse_b)``
and ``out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b``. The backward
pass goes round the ring again, carrying each key/value block together with
the gradient accumulated for it, and computes each block's gradients from the
final output and log-sum-exp (the flash-attention backward rule; Dao 2023).

Why our own: ``torch.distributed.tensor.experimental.context_parallel``
refuses CPU attention (no sharding rule for the CPU flash kernel), so the
tests here could not run it. This module uses only ``isend``/``irecv`` on the
``cp`` group, which gloo and NCCL both provide, and the fused attention kernels
that return the log-sum-exp: ``_scaled_dot_product_flash_attention_for_cpu``
on CPU, ``_scaled_dot_product_efficient_attention`` on CUDA (that path has not
run on a GPU yet: ``bench/gpu_check.py`` holds the cases that will show it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


def shard_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Global positions of the tokens context-parallel rank ``cp_rank`` of ``cp`` holds, in its order.

    Args:
        seq_len: tokens per sequence ``S``; a multiple of ``2 * cp``.
        cp: context-parallel degree ``N``.
        cp_rank: ``i`` in ``[0, N)``.

    Returns:
        int64 ``(S / N,)``: chunk ``i`` then chunk ``2N-1-i`` of the ``2N`` chunks.

    Raises:
        ValueError: ``seq_len`` is not a multiple of ``2 * cp``, or ``cp_rank`` is out of range.
    """
    if seq_len % (2 * cp):
        raise ValueError(f"--seq-len {seq_len} must be a multiple of 2 x the context-parallel degree {cp} (each rank holds two chunks)")
    if not 0 <= cp_rank < cp:
        raise ValueError(f"context-parallel rank {cp_rank} is outside [0, {cp})")
    c = seq_len // (2 * cp)
    first, second = cp_rank * c, (2 * cp - 1 - cp_rank) * c
    return torch.cat([torch.arange(first, first + c), torch.arange(second, second + c)])


def shard_sequence(x: torch.Tensor, cp: int, cp_rank: int, dim: int = 1) -> torch.Tensor:
    """The part of ``x`` along ``dim`` (the sequence) that ``cp_rank`` holds (see :func:`shard_positions`)."""
    if cp == 1:
        return x
    return x.index_select(dim, shard_positions(x.shape[dim], cp, cp_rank).to(x.device))


@dataclass(frozen=True)
class Ring:
    """A context-parallel group seen from one rank.

    Attributes:
        group: the ``cp`` process group.
        size: ``N``, ranks in the ring.
        rank: this rank's index ``i`` in the group (which chunks it holds).
        next_rank: global rank of ``i + 1 (mod N)``, where blocks are sent.
        prev_rank: global rank of ``i - 1 (mod N)``, where blocks come from.
    """

    group: dist.ProcessGroup
    size: int
    rank: int
    next_rank: int
    prev_rank: int

    @classmethod
    def of(cls, group: dist.ProcessGroup) -> "Ring":
        """The ring of ``group`` (e.g. ``mesh["cp"].get_group()``) from this rank."""
        ranks = dist.get_process_group_ranks(group)
        i = dist.get_rank(group)
        n = len(ranks)
        return cls(group, n, i, ranks[(i + 1) % n], ranks[(i - 1) % n])

    def shift(self, tensor: torch.Tensor) -> tuple[torch.Tensor, list]:
        """Start sending ``tensor`` to the next rank and receiving the previous rank's into a new buffer.

        Returns:
            ``(buffer, works)``: the buffer holds the previous rank's tensor once every work in ``works`` is waited on.
        """
        recv = torch.empty_like(tensor)
        works = [dist.isend(tensor, self.next_rank, group=self.group), dist.irecv(recv, self.prev_rank, group=self.group)]
        return recv, [*works, tensor]  # the sent tensor stays referenced until the works are waited on


def _wait(works: list) -> None:
    for w in works:
        if isinstance(w, dist.Work):
            w.wait()


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused attention of one block: ``(out, lse)``; ``out`` like ``q``, ``lse`` float32 ``(batch, heads, q_len)``."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out, lse.float()
    out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
    return out, lse[..., : q.shape[2]].float()  # the CUDA kernel pads lse's last dimension


def _attend_backward(
    dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of one block, given the *final* ``out`` and ``lse`` of these queries over all blocks."""
    dout, q, k, v, out, lse = (t.contiguous() for t in (dout, q, k, v, out, lse))
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, causal)
    # No bias: None becomes an undefined tensor (an empty one would be taken for a bias). Dropout is 0, so the
    # kernel never reads the philox seed and offset. The forward's log-sum-exp is padded to a multiple of 32.
    pad = (-q.shape[2]) % 32
    lse_padded = torch.nn.functional.pad(lse, (0, pad)) if pad else lse
    seed = torch.zeros((), dtype=torch.int64, device=q.device)
    dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        dout, q, k, v, None, out, lse_padded.contiguous(), seed, seed, 0.0, [True, True, True, False], causal
    )
    return dq, dk, dv


def _merge(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-sum-exp rule: two partial softmax-attention results over disjoint keys → the result over both (float32)."""
    new = torch.logaddexp(lse, block_lse)
    merged = out * torch.exp(lse - new).unsqueeze(-1) + block_out.float() * torch.exp(block_lse - new).unsqueeze(-1)
    return merged, new


class _RingAttention(torch.autograd.Function):
    """Causal ring attention over a :class:`Ring`, on ``(batch, heads, S/N, head_dim)`` tensors laid out by :func:`shard_positions`."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring) -> torch.Tensor:  # type: ignore[override]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        half = q.shape[2] // 2
        kv = torch.stack([k, v])
        out, lse = None, None
        for step in range(ring.size):
            if step < ring.size - 1:
                incoming, works = ring.shift(kv)
            j = (ring.rank - step) % ring.size
            if step == 0:
                o, l = _attend(q, kv[0], kv[1], causal=True)
                out, lse = o.float(), l
            elif j < ring.rank:  # all queries see the block's early chunk
                o, l = _attend(q, kv[0, :, :, :half], kv[1, :, :, :half], causal=False)
                out, lse = _merge(out, lse, o, l)
            else:  # the late query chunk sees both of the block's chunks
                o, l = _attend(q[:, :, half:], kv[0], kv[1], causal=False)
                o2, l2 = _merge(out[:, :, half:], lse[:, :, half:], o, l)
                out = torch.cat([out[:, :, :half], o2], dim=2)
                lse = torch.cat([lse[:, :, :half], l2], dim=2)
            if step < ring.size - 1:
                _wait(works)
                kv = incoming
        result = out.to(q.dtype)
        ctx.ring = ring
        ctx.save_for_backward(q, k, v, result, lse)
        return result

    @staticmethod
    def backward(ctx, dout: torch.Tensor):  # type: ignore[override]
        ring: Ring = ctx.ring
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout.contiguous()
        half = q.shape[2] // 2
        kv = torch.stack([k, v])
        dq = torch.zeros_like(q, dtype=torch.float32)
        dkv = torch.zeros_like(kv, dtype=torch.float32)  # the gradient of the block this rank holds, accumulated round the ring
        dkv_works: list = []
        for step in range(ring.size):
            if step < ring.size - 1:
                incoming, works = ring.shift(kv)
            j = (ring.rank - step) % ring.size
            block = torch.zeros_like(kv, dtype=torch.float32)
            if step == 0:
                gq, gk, gv = _attend_backward(dout, q, kv[0], kv[1], out, lse, causal=True)
                dq += gq
                block[0], block[1] = gk, gv
            elif j < ring.rank:
                gq, gk, gv = _attend_backward(dout, q, kv[0, :, :, :half], kv[1, :, :, :half], out, lse, causal=False)
                dq += gq
                block[0, :, :, :half], block[1, :, :, :half] = gk, gv
            else:
                late = slice(half, None)
                gq, gk, gv = _attend_backward(dout[:, :, late], q[:, :, late], kv[0], kv[1], out[:, :, late], lse[:, :, late], causal=False)
                dq[:, :, late] += gq
                block[0], block[1] = gk, gv
            _wait(dkv_works)  # the accumulator of this block, from the previous rank
            dkv = dkv + block
            dkv, dkv_works = ring.shift(dkv)  # to the next rank, which holds this block next
            if step < ring.size - 1:
                _wait(works)
                kv = incoming
        _wait(dkv_works)  # after N shifts each block's gradient is back at its owner
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring) -> torch.Tensor:
    """Causal attention of this rank's queries over the whole sequence held by ``ring``.

    Args:
        q, k, v: ``(batch, heads, S/N, head_dim)``, the rank's tokens in :func:`shard_positions` order
            (rotary positions already applied with the global positions).
        ring: the context-parallel group.

    Returns:
        ``(batch, heads, S/N, head_dim)``, equal (up to float rounding) to the rank's rows of
        ``scaled_dot_product_attention(..., is_causal=True)`` over the full sequence.
    """
    if ring.size == 1:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return _RingAttention.apply(q, k, v, ring)
