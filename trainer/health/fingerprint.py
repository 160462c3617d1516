"""Bitwise fingerprints of parameters and the known-answer test (local compute, no collectives).

A fingerprint hashes the *bits* of a tensor, not its float value: two exact integer sums over
the raw words (all words, and the first half of them) change under any single flipped bit (by
``±2**k``, never 0 modulo ``2**64``), even the lowest mantissa bit that a float sum rounds away. This is the idea of Megatron-LM's
parameter-hash check across data-parallel replicas (``check_param_hashes_across_dp_replicas``,
a SHA-256 per parameter), with a hash that runs on the device in two reductions instead of
copying every parameter to the host.

The known-answer test (KAT) is a fixed, seeded workload (a matmul and one block of the model's
own kind) whose output bytes must be identical on every rank of the same device kind and on
re-runs; NVIDIA resiliency-ext and the SDC literature (Dixit et al. 2021, "Silent Data
Corruptions at Scale"; Hochschild et al. 2021, "Cores that don't count") use such tests
because a faulty unit can compute wrong answers while training continues.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import nn

from railtrain.trainer.model import ModelConfig, TransformerBlock, rotary_table

MASK63 = (1 << 63) - 1
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The bytes this rank holds of ``t``: a DTensor's local shard, else ``t`` itself (detached)."""
    t = t.detach()
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _words(t: torch.Tensor) -> torch.Tensor:
    flat = t.contiguous().view(-1)
    return flat.view(_INT_OF_SIZE[flat.element_size()])


def tensor_hashes(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """Two exact int64 sums per tensor over its raw words (integers of the element's width):
    ``sum(w)`` and the sum of the first half of ``w``.

    Args:
        tensors: any dtype, any device (all on one device); DTensors count by their local shard.

    Returns:
        An int64 tensor of shape ``(2 * len(tensors),)`` on the tensors' device (no host sync).
    """
    parts = []
    for t in tensors:
        w = _words(local_tensor(t))
        parts.append(torch.stack((w.sum(dtype=torch.int64), w[: w.numel() // 2].sum(dtype=torch.int64))))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


def fold(values: Iterable[int]) -> int:
    """Fold integers into one non-negative 63-bit fingerprint (order matters; FNV-style multiply-xor)."""
    h = 1469598103934665603
    for v in values:
        h = ((h ^ (v & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h & MASK63


def model_fingerprint(model: nn.Module) -> int:
    """Fingerprint of every parameter this rank holds (local shards), in ``named_parameters`` order.

    Returns:
        A non-negative int below ``2**63``; equal on two ranks iff (up to hash collisions) they hold
        the same bytes. One device-to-host copy of ``2 x parameters`` int64s.
    """
    return fold(tensor_hashes([p for _, p in model.named_parameters()]).tolist())


KAT_CONFIG = ModelConfig(dim=64, n_layers=1, n_heads=4, hidden_dim=128, max_seq_len=32)


def known_answer(device: torch.device, seed: int = 1234, dtype: torch.dtype = torch.float32, corrupt: Callable[[torch.Tensor], None] | None = None) -> int:
    """Run the known-answer workload and fingerprint its output bytes.

    The workload: a seeded ``(128, 128) @ (128, 128)`` matmul, then one :class:`TransformerBlock`
    (attention with rotary embeddings, SwiGLU, RMSNorm: the model's own block kind) with seeded
    weights, forward and backward, on a seeded ``(2, 32, 64)`` input. Everything is created from a
    private generator, so the global RNG is untouched.

    Args:
        device: where to run.
        seed: the generator's seed (every rank must use the same).
        dtype: compute dtype of the block.
        corrupt: fault injection: called on the output tensor before it is fingerprinted.

    Returns:
        A 63-bit fingerprint of the matmul result, the block's output and its input gradient.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(128, 128, generator=gen).to(device)
    b = torch.randn(128, 128, generator=gen).to(device)
    prod = a @ b
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        block = TransformerBlock(KAT_CONFIG).to(device=device, dtype=dtype)
    rope = rotary_table(KAT_CONFIG.head_dim, KAT_CONFIG.max_seq_len, KAT_CONFIG.rope_theta, device=device)
    x = torch.randn(2, 32, KAT_CONFIG.dim, generator=gen).to(device=device, dtype=dtype).requires_grad_(True)
    out = block(x, rope)
    out.square().mean().backward()
    assert x.grad is not None
    result = torch.cat([prod.reshape(-1), out.detach().float().reshape(-1), x.grad.float().reshape(-1)])
    if corrupt is not None:
        corrupt(result)
    return fold(tensor_hashes([result]).tolist())


def flip_bit(t: torch.Tensor, index: int, bit: int) -> None:
    """Flip bit ``bit`` of element ``index`` (flattened, modulo the size) of ``t``'s local bytes, in place.

    Raises:
        ValueError: ``bit`` is outside the element's width.
    """
    local = local_tensor(t)
    words = local.view(-1).view(_INT_OF_SIZE[local.element_size()])
    width = local.element_size() * 8
    if not 0 <= bit < width:
        raise ValueError(f"bit must be in [0, {width}) for {local.dtype}, got {bit}")
    i = index % words.numel()
    mask = torch.tensor(1 << bit if bit < width - 1 else -(1 << bit), dtype=words.dtype, device=words.device)
    with torch.no_grad():
        words[i] ^= mask
