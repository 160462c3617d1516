"""When `run --local --fault-kill-group` fires: only once every other group has logged a step in its current launch.

Two runs failed with ``max() arg is an empty sequence`` (stop 46's CI run, the context case of
tests/cli/test_local_replica_layouts.py; a stop 47 fresh-clone run, the FSDP case of
tests/cli/test_local_replica_groups.py, whose logs show why): group 0 started late, joined by
healing from group 1 (its log: ``replica group 0: healed from a peer at step 11``), and the kill fired on group 1's
next step line, before group 0 had logged a step of its own. The runner counted the heal as "group 0 trains". These
tests feed the runner's line handler the lines of that run, in that order, with no processes: on the old code the
first one fails (the kill fired on group 1's step-12 line).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torchft")

from railtrain.cli import local_replica  # noqa: E402
from railtrain.crds.faults import KillGroupFault  # noqa: E402
from tests.cli.test_local_replica_groups import trainer_job  # noqa: E402


def launched_run(tmp_path: Path, kills: list[str]) -> local_replica.ReplicaGroupRun:
    """A 2-group run (minReplicas 1) with a kill of group 1 at step 4, both groups marked launched now, group 1's gang a
    stand-in whose ``kill`` appends to ``kills`` (the processes are not the subject here: the decision is)."""
    job, faults = trainer_job(tmp_path, steps=100, minReplicas=1)
    messages = tmp_path / "messages"
    messages.mkdir()
    run = local_replica.ReplicaGroupRun(job, tmp_path, "uid", faults, KillGroupFault(group=1, step=4), lambda *a: None, lambda s: None,
                                        messages, tmp_path / "logs")  # fmt: skip
    for state in run.groups:
        state.launches = 1
        state.launched_at.append(time.monotonic())
    run._gangs[1] = SimpleNamespace(kill=lambda: kills.append("group 1"))  # type: ignore[assignment]
    return run


def step(run: local_replica.ReplicaGroupRun, group: int, n: int) -> None:
    """Group ``group``'s rank 0 logs step ``n``, as :func:`railtrain.trainer.train.format_step` writes it."""
    run._line(group, 0, f"step={n} loss=3.8190 grad_norm=2.6661 lr=1.80e-03 tokens_per_s=72.6")


def test_a_group_that_healed_in_counts_as_training_only_after_its_first_step_line(tmp_path):
    kills: list[str] = []
    run = launched_run(tmp_path, kills)
    for n in range(1, 12):  # group 1 trains alone (minReplicas 1); group 0 is not up: no kill
        step(run, 1, n)
    assert kills == []
    run._line(0, 0, "replica group 0: healed from a peer at step 11 (quorum 2 of 2 groups)")
    step(run, 1, 12)
    assert kills == [] and run.killed is None, "the kill fired while group 0 had healed but logged no step"
    step(run, 0, 12)
    step(run, 1, 13)
    assert kills == ["group 1"] and run.killed is not None
    survivor = [n for t, n in run.groups[0].step_times if t <= run.killed]
    assert survivor == [12]  # what the tests read as "group 0's step before the relaunch"


def test_a_step_line_of_an_earlier_launch_does_not_count(tmp_path):
    """The new rule's other half (the old code held it too, through ``joined``): a replaced group trains again only
    once its new launch logged a step."""
    kills: list[str] = []
    run = launched_run(tmp_path, kills)
    step(run, 0, 5)  # group 0's first launch stepped, then it was replaced (its new launch has logged nothing)
    run.groups[0].launches, run.groups[0].joined = 2, False  # as ReplicaGroupRun._launch marks a new launch
    run.groups[0].launched_at.append(time.monotonic())
    step(run, 1, 6)
    assert kills == []
    step(run, 0, 6)
    step(run, 1, 7)
    assert kills == ["group 1"]
