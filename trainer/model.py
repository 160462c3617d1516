"""A decoder-only transformer language model and its size presets.

Architecture (the LLaMA recipe, see Touvron et al. 2023, "LLaMA: Open and
Efficient Foundation Language Models"): pre-norm RMSNorm, causal multi-head
self-attention through ``F.scaled_dot_product_attention`` with rotary position
embeddings (Su et al. 2021, "RoFormer"), a SwiGLU MLP (Shazeer 2020, "GLU
Variants Improve Transformer") and an untied output head. The vocabulary is the
256 byte values (no tokenizer needed), or a token file's declared vocabulary
(``ModelConfig.vocab_size``; docs/data.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from railtrain.trainer.context_parallel import Ring, ring_attention, shard_positions
from railtrain.trainer.presets import PRESETS, VOCAB_SIZE, ModelConfig  # noqa: F401  (re-exported: the shapes live in a torch-free module)


def rotary_table(head_dim: int, max_seq_len: int, theta: float, device: torch.device | None = None) -> torch.Tensor:
    """Cosines and sines of the rotary angles.

    Returns:
        float32 tensor of shape ``(max_seq_len, head_dim // 2, 2)`` holding
        ``(cos, sin)`` of ``position * theta ** (-2i / head_dim)`` (RoFormer eq. 15).
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, device=device, dtype=torch.float32), inv_freq)
    return torch.stack((angles.cos(), angles.sin()), dim=-1)


def apply_rotary(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive pairs of channels of ``x`` by the angles in ``table``.

    Args:
        x: ``(batch, heads, seq, head_dim)``.
        table: ``(seq, head_dim // 2, 2)`` from :func:`rotary_table`, sliced to ``seq``.

    Returns:
        A tensor shaped and typed like ``x``.
    """
    pairs = x.float().unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    cos, sin = table[..., 0], table[..., 1]
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    """Causal multi-head self-attention with rotary positions and no biases.

    Attributes:
        ring: the context-parallel group when the sequence is split across
            ranks (:func:`railtrain.trainer.context_parallel.ring_attention`
            then joins the ranks' keys and values); ``None`` otherwise.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ring: Ring | None = None
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.dim, config.dim, bias=False)
        self.wk = nn.Linear(config.dim, config.dim, bias=False)
        self.wv = nn.Linear(config.dim, config.dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """Map ``(batch, seq, dim)`` to ``(batch, seq, dim)``; ``rope`` is ``(>= seq, head_dim//2, 2)``.

        The number of heads is read off the projections' output width, so
        under tensor parallelism (``wq``/``wk``/``wv`` column-sharded) each
        rank computes its own ``n_heads / tp`` heads.
        """
        bsz, seq, _ = x.shape
        q, k, v = (w(x).view(bsz, seq, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = apply_rotary(q, rope[:seq]), apply_rotary(k, rope[:seq])
        if self.ring is not None:
            out = ring_attention(q, k, v, self.ring)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU MLP: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden_dim, bias=False)
        self.w2 = nn.Linear(config.hidden_dim, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(..., dim)`` to ``(..., dim)``."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """One pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    Attributes:
        checkpoint_activations: when true, keep only the block's input for
            backward and recompute the rest (``torch.utils.checkpoint``,
            non-reentrant; Chen et al. 2016, "Training Deep Nets with Sublinear
            Memory Cost"). Done inside ``forward`` rather than with a wrapper
            module, so parameter names (and checkpoints) do not change.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.checkpoint_activations = False
        self.attention_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """Map ``(batch, seq, dim)`` to ``(batch, seq, dim)``."""
        if self.checkpoint_activations and torch.is_grad_enabled():
            return checkpoint(self._forward, x, rope, use_reentrant=False)
        return self._forward(x, rope)

    def _forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """The language model: token ids in, next-token logits out.

    ``layers`` maps ``"0"``, ``"1"``, ... to :class:`TransformerBlock` (the
    unit FSDP2 shards and activation checkpointing recomputes). It is an
    ``nn.ModuleDict`` rather than a list so a pipeline stage can drop the blocks
    it does not own and keep the others' names (``layers.7.attention.wq.weight``
    on every stage and in every checkpoint). A stage may also lack
    ``tok_embeddings`` (input is then the previous stage's hidden state) or
    ``norm``/``output`` (the hidden state is returned); see
    :mod:`railtrain.trainer.pipeline`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(config) for i in range(config.n_layers)})
        self.norm: nn.RMSNorm | None = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.output: nn.Linear | None = nn.Linear(config.dim, config.vocab_size, bias=False)
        # Derived from the config, so kept out of the state dict (persistent=False).
        self.register_buffer("rope", torch.empty(config.max_seq_len, config.head_dim // 2, 2), persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """(Re)initialise every parameter and the rotary table, drawing from torch's global RNG.

        Linear and embedding weights ~ N(0, 0.02); residual output projections
        (``wo``, ``w2``) are scaled by ``1/sqrt(2 * n_layers)`` as in GPT-2
        (Radford et al. 2019, section 2.3); norms start at 1.
        """
        std = 0.02
        residual_std = std / math.sqrt(2 * self.config.n_layers)
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight, std=std)
        for block in self.layers.values():
            for lin in (block.attention.wq, block.attention.wk, block.attention.wv, block.feed_forward.w1, block.feed_forward.w3):
                nn.init.normal_(lin.weight, std=std)
            nn.init.normal_(block.attention.wo.weight, std=residual_std)
            nn.init.normal_(block.feed_forward.w2.weight, std=residual_std)
            block.attention_norm.reset_parameters()
            block.ffn_norm.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.output is not None:
            nn.init.normal_(self.output.weight, std=std)
        c = self.config
        self.rope.copy_(rotary_table(c.head_dim, c.max_seq_len, c.rope_theta, device=self.rope.device))

    def use_context_parallel(self, ring: Ring, seq_len: int) -> None:
        """Run on ``seq_len / ring.size`` tokens of every sequence: this rank's chunks (context parallel).

        The rotary table becomes the one of the rank's global token positions
        (:func:`railtrain.trainer.context_parallel.shard_positions`), and every
        attention layer runs ring attention over ``ring``. Parameters and their
        names are unchanged (the table is not in the state dict).

        Raises:
            ValueError: ``seq_len`` exceeds ``max_seq_len`` or is not a multiple of ``2 * ring.size``.
        """
        if seq_len > self.config.max_seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds the model's max_seq_len {self.config.max_seq_len}")
        positions = shard_positions(seq_len, ring.size, ring.rank).to(self.rope.device)
        self.rope = self.rope[positions].contiguous()
        for block in self.layers.values():
            block.attention.ring = ring

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits.

        Args:
            tokens: int64 ``(batch, seq)`` with ``seq <= config.max_seq_len``
                (on a pipeline stage without ``tok_embeddings``: the previous
                stage's float ``(batch, seq, dim)`` output).

        Returns:
            ``(batch, seq, vocab_size)`` logits; position ``t`` predicts token
            ``t + 1`` (on a stage without ``output``: its hidden state).

        Raises:
            ValueError: ``seq`` exceeds ``config.max_seq_len``.
        """
        h = tokens
        if self.tok_embeddings is not None:
            if tokens.shape[1] > self.config.max_seq_len:
                raise ValueError(f"sequence length {tokens.shape[1]} exceeds the model's max_seq_len {self.config.max_seq_len}")
            h = self.tok_embeddings(tokens)
        for block in self.layers.values():
            h = block(h, self.rope)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of ``(batch, seq, vocab)`` logits against ``(batch, seq)`` targets."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))
