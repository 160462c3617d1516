"""The hang watchdog's decision on real heartbeats in a real c10d store (HashStore), with an explicit clock."""

from __future__ import annotations

from collections import deque

import torch.distributed as dist

from railtrain.crds import contract
from railtrain.trainer.health.watchdog import Progress, Watchdog

SETTINGS = contract.HealthSettings(hang_floor_s=10.0)


def beat(store, rank: int, step: int, phase: str, t: float, node: str = "") -> None:
    store.set(f"{contract.HEARTBEAT_KEY_PREFIX}{rank}", contract.format_heartbeat(contract.Heartbeat(rank, step, phase, t, node or f"n{rank}")))


def make(store, rank: int = 0, world: int = 3, step_times=()) -> Watchdog:
    progress = Progress()
    progress.mark(5, "collective")
    return Watchdog(store, rank, world, f"n{rank}", progress, deque(step_times), lambda: SETTINGS, on_hang=lambda v: None)


def test_no_verdict_until_every_rank_beats_and_the_deadline_passes():
    store = dist.HashStore()
    dog = make(store, step_times=[1.0, 1.0, 1.0])
    assert dog.poll(100.0) is None  # ranks 1 and 2 have not beaten yet
    beat(store, 1, 5, "backward", 1000.0)
    beat(store, 2, 5, "forward", 999.0)
    assert dog.poll(101.0) is None  # deadline max(3 x 1 s, 0.9 x 10 s) = 9 s: nobody is that late
    assert dog.poll(109.0) is None


def test_names_the_rank_furthest_behind_and_shares_the_verdict():
    store = dist.HashStore()
    dog = make(store)
    beat(store, 1, 5, "backward", 1000.0)
    beat(store, 2, 5, "forward", 1001.0)  # behind, though its clock says later
    dog.poll(0.0)
    verdict = dog.poll(9.5)
    assert verdict is not None and verdict["ranks"] == [2] and verdict["nodes"] == ["n2"] and verdict["step"] == 5
    assert verdict["evidence"]["stalled_ranks"][0] == 2 and verdict["evidence"]["deadline_s"] == 9.0
    other = make(store, rank=1)  # another rank's watchdog reads the same verdict from the store
    assert other.poll(0.0) == verdict


def test_a_rank_that_moves_on_is_not_stalled_and_done_ranks_are_ignored():
    store = dist.HashStore()
    dog = make(store, world=2)
    beat(store, 1, 5, "forward", 1000.0)
    dog.poll(0.0)
    beat(store, 1, 6, "forward", 1002.0)  # progress
    dog.progress.mark(6, "done")
    assert dog.poll(9.5) is None  # rank 1 changed at 9.5 from the watchdog's view; rank 0 is done
    assert dog.poll(18.0) is None
    verdict = dog.poll(19.0)
    assert verdict is not None and verdict["ranks"] == [1]
