"""Model shapes: :class:`ModelConfig` and the named :data:`PRESETS`, without torch.

:mod:`railtrain.trainer.model` builds the modules from these (and re-exports
them); ``railtrain run --local`` reads a preset's parameter count here before
it starts any process, without paying for importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

VOCAB_SIZE = 256
"""Byte-level vocabulary: one token per byte value."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a :class:`Transformer`.

    Attributes:
        dim: width of the residual stream.
        n_layers: number of transformer blocks.
        n_heads: attention heads; must divide ``dim``.
        hidden_dim: inner width of the SwiGLU MLP.
        max_seq_len: longest sequence the rotary table covers, in tokens.
        vocab_size: number of token ids (256 for bytes).
        norm_eps: epsilon of every RMSNorm.
        rope_theta: base of the rotary frequencies.
    """

    dim: int
    n_layers: int
    n_heads: int
    hidden_dim: int
    max_seq_len: int = 2048
    vocab_size: int = VOCAB_SIZE
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError(f"model dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if (self.dim // self.n_heads) % 2:
            raise ValueError(f"head dim {self.dim // self.n_heads} must be even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        """Width of one attention head: ``dim // n_heads``."""
        return self.dim // self.n_heads

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token (forward + backward) at sequence length ``seq_len``.

        ``6 * N + 12 * n_layers * dim * seq_len``: 2 FLOPs per multiply-add and
        weight, times 3 for forward plus backward, over the ``N`` parameters
        that take part in matrix products (all but the embedding table, a
        lookup), plus the attention scores and the weighted sum of values
        (``QK^T`` and ``AV``, each ``2 * seq * dim`` per token and layer
        forward, times 3). This is the count of Kaplan et al. 2020 (section
        2.1) and of the PaLM paper's MFU (Chowdhery et al. 2022, appendix B);
        the causal mask's skipped half is not subtracted, and activation
        recomputation is not counted (model FLOPs, not hardware FLOPs).
        """
        n_matmul = self.num_params() - self.vocab_size * self.dim
        return 6 * n_matmul + 12 * self.n_layers * self.dim * seq_len

    def num_params(self) -> int:
        """Exact parameter count of the model this config builds (no instantiation)."""
        attn = 4 * self.dim * self.dim
        mlp = 3 * self.dim * self.hidden_dim
        norms = 2 * self.dim
        embed_and_head = 2 * self.vocab_size * self.dim + self.dim  # + final norm
        return self.n_layers * (attn + mlp + norms) + embed_and_head


PRESETS: dict[str, ModelConfig] = {
    # ~1.8M parameters: a couple of hundred steps in about a minute on 2 CPU cores.
    "tiny": ModelConfig(dim=192, n_layers=4, n_heads=6, hidden_dim=512, max_seq_len=1024),
    # ~10.7M parameters: CPU-trainable, slowly.
    "small": ModelConfig(dim=384, n_layers=6, n_heads=6, hidden_dim=1024, max_seq_len=2048),
    # ~310M parameters: one GPU.
    "300m": ModelConfig(dim=1024, n_layers=24, n_heads=16, hidden_dim=2816, max_seq_len=2048),
    # ~1.23B parameters: FSDP across GPUs.
    "1b": ModelConfig(dim=2048, n_layers=24, n_heads=16, hidden_dim=5632, max_seq_len=2048),
}
