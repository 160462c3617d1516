"""Which modules the straggler check times: whole replicated models, sharded ones block by block (one real gloo rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from railtrain.trainer.health.timing import timed_modules
from railtrain.trainer.model import Attention, FeedForward, ModelConfig, Transformer

BLOCKS = (Attention, FeedForward)


def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_seq_len=16))


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_plain_model_is_timed_as_a_whole_with_one_pair_of_hooks() -> None:
    plain = model()
    assert timed_modules(plain, BLOCKS) == [plain]


def test_a_ddp_model_is_timed_inside_its_wrapper_so_the_buffer_broadcast_stays_outside(one_rank: None) -> None:
    inner = model()
    wrapped = DistributedDataParallel(inner)
    assert timed_modules(wrapped, BLOCKS) == [inner]


def test_an_fsdp_model_is_timed_block_by_block_so_the_all_gathers_stay_outside(one_rank: None) -> None:
    sharded = model()
    for block in sharded.layers.values():
        fully_shard(block)
    fully_shard(sharded)
    timed = timed_modules(sharded, BLOCKS)
    assert len(timed) == 4 and all(isinstance(m, BLOCKS) for m in timed)  # 2 layers x (attention, MLP)
