"""Which modules the straggler check times: the built-in blocks one by one, a user's model as a whole inside DDP."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from railtrain.trainer.health.timing import timed_modules
from railtrain.trainer.model import Attention, FeedForward, ModelConfig, Transformer

BLOCKS = (Attention, FeedForward)


def builtin() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_seq_len=16))


class Users(nn.Module):
    """A user's own model with a buffer (which DDP broadcasts from rank 0 at every forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x * self.scale)


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_builtin_models_attention_and_mlp_blocks_are_timed_one_by_one() -> None:
    timed = timed_modules(builtin(), BLOCKS)
    assert [type(m) for m in timed] == [Attention, FeedForward] * 2


def test_a_users_own_model_is_timed_as_a_whole() -> None:
    model = Users()
    assert timed_modules(model, BLOCKS) == [model]


def test_a_users_ddp_model_is_timed_inside_its_wrapper_so_the_buffer_broadcast_is_not_compute(one_rank: None) -> None:
    inner = Users()
    assert timed_modules(DistributedDataParallel(inner), BLOCKS) == [inner]


def test_an_fsdp_sharded_builtin_model_is_timed_inside_its_units(one_rank: None) -> None:
    sharded = builtin()
    for block in sharded.layers.values():
        fully_shard(block)
    fully_shard(sharded)
    assert [type(m) for m in timed_modules(sharded, BLOCKS)] == [Attention, FeedForward] * 2
