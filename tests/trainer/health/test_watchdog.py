"""The hang watchdog's decision on real heartbeats in a real c10d store (HashStore), with an explicit clock."""

from __future__ import annotations

from collections import deque

import torch.distributed as dist

from railtrain.crds import contract
from railtrain.trainer.health.watchdog import Progress, StartDeadline, Watchdog
from tests.polling import wait_for

SETTINGS = contract.HealthSettings(hang_floor_s=10.0)


def beat(store, rank: int, step: int, phase: str, t: float, node: str = "") -> None:
    store.set(f"{contract.HEARTBEAT_KEY_PREFIX}{rank}", contract.format_heartbeat(contract.Heartbeat(rank, step, phase, t, node or f"n{rank}")))


def make(store, rank: int = 0, world: int = 3, step_times=(1.0, 1.0, 1.0)) -> Watchdog:
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


def test_the_first_steps_get_the_warm_up_allowance_then_three_step_times():
    """Issue 25 item 6: with a small floor, step 1's forward is not judged hung (compile, lazy set-up); after
    warm-up a stalled rank is found once it has made no progress for max(3 x median step, 0.9 x floor)."""
    settings = contract.HealthSettings(hang_floor_s=1.0)
    store, times = dist.HashStore(), deque()
    progress = Progress()
    progress.mark(1, "forward")
    dog = Watchdog(store, 0, 2, "n0", progress, times, lambda: settings, on_hang=lambda v: None)
    beat(store, 1, 1, "backward", 1000.0)
    assert dog.poll(0.0) is None
    assert dog.poll(30.0) is None  # 30 s in step 1: warming up (hang_warmup_s), not hung
    assert dog.poll(settings.hang_warmup_s + 1.0) is not None  # but not forever
    store = dist.HashStore()
    times.extend([2.0, 2.0])  # warmed up: 2 s steps
    dog = Watchdog(store, 0, 2, "n0", progress, times, lambda: settings, on_hang=lambda v: None)
    progress.mark(3, "forward")
    beat(store, 1, 3, "collective", 1000.0)
    assert dog.poll(0.0) is None
    assert dog.poll(5.9) is None  # within 3 x 2 s
    verdict = dog.poll(6.1)
    assert verdict is not None and verdict["evidence"]["deadline_s"] == 6.0 and verdict["evidence"]["warming_up"] is False


def test_a_checkpoint_save_gets_the_warm_up_allowance():
    settings = contract.HealthSettings(hang_floor_s=1.0, hang_warmup_s=20.0)
    store = dist.HashStore()
    progress = Progress()
    progress.mark(9, "checkpoint")
    dog = Watchdog(store, 0, 2, "n0", progress, deque([0.5] * 5), lambda: settings, on_hang=lambda v: None)
    beat(store, 1, 9, "checkpoint", 1000.0)
    dog.poll(0.0)
    assert dog.poll(19.0) is None and dog.poll(20.5) is not None


def test_the_start_deadline_fires_unless_cancelled():
    """A gang that never reaches its first step: the start deadline's verdict is a hang naming no node."""
    fired = []
    StartDeadline(0.2, 3, "n3", on_expire=fired.append).start()
    cancelled = StartDeadline(0.2, 4, "n4", on_expire=fired.append).start()
    cancelled.cancel()
    wait_for(lambda: fired, timeout=10.0, what="the start deadline", interval=0.02)
    cancelled._thread.join(timeout=10.0)  # its deadline passed too: the thread ended without firing
    assert not cancelled._thread.is_alive() and len(fired) == 1
    v = fired[0]
    assert (v["reason"], v["nodes"], v["ranks"], v["evidence"]["phase"]) == (contract.REASON_NO_PROGRESS, [], [], "init")
    assert "never reached its first step" in v["message"]


def test_a_phase_with_an_allowance_is_not_hung_before_it_and_is_after():
    """A replica group's ``quorum`` phase waits for other groups up to its own timeout (issue 31): the loop marks it
    with that allowance, and the watchdog gives it that long instead of max(3 x step, 0.9 x floor). On the old code the
    group waiting for its peers was declared hung (NoProgress) after the floor."""
    store = dist.HashStore()
    dog = make(store, world=2)  # warmed up: 1 s steps, deadline 9 s
    dog.progress.mark(6, "quorum", at_least_s=120.0)
    beat(store, 1, 6, "quorum", 1000.0)
    assert dog.poll(0.0) is None
    assert dog.poll(60.0) is None  # both ranks wait for the quorum: within its 120 s
    verdict = dog.poll(121.0)
    assert verdict is not None and verdict["evidence"]["phase"] == "quorum" and verdict["evidence"]["deadline_s"] == 120.0
    dog.progress.mark(7, "forward")  # the allowance is the quorum's alone
    assert dog.deadline("forward", [1.0, 1.0, 1.0], warming=False) == 9.0 and dog.deadline("quorum", [1.0], warming=False) == 120.0
