"""The trainer sets its CPU threads at start from the CPUs it gets (issue 25, item 7; crds/threads.py).

Input: the tiny example as 1 node × 1 process on a busy machine. Before, a single process kept torch's
default (the machine's cores) and OpenMP's default spinning wait, and several processes got 1 thread
whatever the user's OMP_NUM_THREADS said; now the count is the process's CPUs ÷ the processes sharing
them, the user's OMP_NUM_THREADS wins, and torchrun's OMP_NUM_THREADS=1 does not pass for the user's.
"""

from __future__ import annotations

import math

import pytest
import torch

from railtrain.crds import threads
from railtrain.trainer.config import parse_args
from railtrain.trainer.parallel import DistInfo
from railtrain.trainer.train import set_threads, threads_line


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _info(world: int, local_world: int, rank: int = 0) -> DistInfo:
    return DistInfo(rank=rank, world_size=world, local_rank=0, device=torch.device("cpu"), distributed=world > 1, local_world_size=local_world)


def test_a_local_gang_shares_the_machine_and_torchruns_one_thread_is_not_the_users():
    cpus = threads.process_cpus()
    environ = {threads.ENV_THREADS: "auto", threads.ENV_CPU_SHARERS: "1", "OMP_NUM_THREADS": "1", threads.ENV_OMP_WAIT_POLICY: "PASSIVE"}
    choice = set_threads(parse_args(["--data", "x"]), _info(2, 1), environ)
    assert torch.get_num_threads() == choice.threads == max(1, math.floor(cpus))
    assert "wait policy PASSIVE" in threads_line(choice, environ)


def test_the_users_omp_num_threads_wins_over_several_processes_per_node():
    """Old main set 1 thread whenever the world had several processes, ignoring the user's OMP_NUM_THREADS=2."""
    environ = {threads.ENV_THREADS: "user", "OMP_NUM_THREADS": "2"}
    set_threads(parse_args(["--data", "x"]), _info(4, 4, rank=1), environ)
    assert torch.get_num_threads() == 2
