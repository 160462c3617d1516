"""`railtrain run --local` with replica groups: a group whose first launch fails on its own, before the kill.

The runner's rule (:meth:`ReplicaGroupRun._kill_due`): a launch that failed on its own before the kill does not use
the kill up; the runner replaces it, and the kill fires in a later launch. Nothing tested that rule, and the test
helpers read a group's second launch as the kill's replacement. Stop 47 first took this for the cause of stop 46's
CI failure (``max() arg is an empty sequence``); the cause was another (a survivor that healed in and had logged no
step when the kill fired: tests/cli/test_local_replica_kill_due.py), but the helpers were wrong for this case too.
Here group 1's first launch runs a program that exits with status 3 at once: the runner must record that end
(``ends``), replace the group, fire the kill in the next launch and replace it once more; the helpers must find the
kill's replacement by time, not by its launch's index.

A module of its own so that the suite's workers run it beside the other replica-group modules.
"""

from __future__ import annotations

import dataclasses
import io
import sys

import pytest

pytest.importorskip("torchft")

from railtrain.cli import local as local_run  # noqa: E402
from railtrain.cli import local_replica  # noqa: E402
from railtrain.crds.faults import KillGroupFault  # noqa: E402
from tests.cli.test_local_replica_groups import relaunched, replaced_for_the_kill, replacement_steps, run_until_together, together, trainer_job  # noqa: E402

FAILS_AT_ONCE = (sys.executable, "-c", "raise SystemExit(3)")
"""What group 1's first launch runs instead of the trainer: a container that exits with status 3 before training."""


def test_a_group_that_failed_on_its_own_before_the_kill_is_replaced_and_the_kill_fires_in_its_next_launch(tmp_path):
    job, faults = trainer_job(tmp_path, steps=100000, minReplicas=1)
    failed: list[int] = []
    screen = io.StringIO()

    def gang(nodes, group, on_line, log_dir):
        if group == 1 and not failed:
            failed.append(1)
            nodes = [dataclasses.replace(n, argv=FAILS_AT_ONCE) for n in nodes]
        return local_run.LocalGang(nodes, workdir=tmp_path, grace=2, out=screen, on_line=on_line,
                                   log_dir=log_dir, label=f"group {group} ")  # fmt: skip

    messages = tmp_path / "messages"
    messages.mkdir()
    run = local_replica.ReplicaGroupRun(job, tmp_path, local_run.new_local_uid(), faults, KillGroupFault(group=1, step=4), gang,
                                        lambda s: None, messages, tmp_path / "logs")  # fmt: skip
    code, record = run_until_together(run)
    g0, g1 = record["groups"]
    assert code == 130, record
    # the first launch's own end is on record, before the kill; then one replacement for it and one for the kill
    assert [(c, t < record["kills"][0]) for t, c, _ in g1["ends"]][:1] == [(3, True)], record
    assert g1["replacements"] == 2 and replaced_for_the_kill(run) == 1 and g0["replacements"] == 0, record
    # group 1's second launch started before group 0 logged any step: the old helpers, reading it as the kill's
    # replacement, took the max of no steps
    assert not [n for t, n in run.groups[0].step_times if t <= run.groups[1].launched_at[1]], record
    assert len(together(run)) >= 3, f"the kill's replacement never stepped with the survivor: {record}"
    # the kill's replacement healed from group 0: its first step is past group 0's step when it was launched
    survivor_at_relaunch = max(n for t, n in run.groups[0].step_times if t <= relaunched(run))
    assert min(n for _, n in replacement_steps(run)) > survivor_at_relaunch and g1["healed"] >= 1, record
