"""`railtrain run --local` with replica groups whose layout inside each group is tensor, pipeline or context parallel
(issue 31): 2 groups of one node × 2 processes, group 1 killed and healed from group 0 rank by rank.

A module of its own (the helpers are tests/cli/test_local_replica_groups.py's) so that the suite's workers run it beside
that module rather than after it (each module stays on one pytest-xdist worker).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torchft")

from railtrain.crds.faults import KillGroupFault  # noqa: E402
from tests.cli.test_local_replica_groups import replacement_steps, run_until_together, runner, together, trainer_job  # noqa: E402


@pytest.mark.parametrize("inner", [{"tensor": 2}, {"pipeline": 2}, {"context": 2}], ids=["tensor", "pipeline", "context"])
def test_tensor_pipeline_or_context_parallel_inside_the_groups_a_killed_group_heals_rank_by_rank_from_its_peer(tmp_path, inner):
    """Issue 31, tensor, pipeline or context parallelism inside a replica group: 2 groups of one node × 2 processes
    (tensor 2: each rank holds half of every sharded weight; pipeline 2: each rank one stage; context 2: each rank half
    of every sequence, the model replicated). Rank r of every group holds the
    same part, so the cross-group gradient average, a heal and the fingerprints carry rank r's part. Group 1 is killed
    at step 4; its replacement heals from group 0 (its first step is past group 0's step at its relaunch) and both step
    together again. On the old code such a layout was refused before training (spec.faultTolerance: ... set
    spec.parallelism.tensor, pipeline and context to 1)."""
    job, faults = trainer_job(tmp_path, steps=100000, inner=inner, minReplicas=1)
    run = runner(tmp_path, job, faults, KillGroupFault(group=1, step=4))
    code, record = run_until_together(run)
    g0, g1 = record["groups"]
    assert code == 130, record
    assert g1["replacements"] == 1 and g0["replacements"] == 0 and g1["healed"] >= 1, record
    assert len(together(run)) >= 3, f"the replacement never stepped with the survivor: {record}"
    steps = [n for _, n in replacement_steps(run)]
    survivor_at_relaunch = max(n for t, n in g0["step_times"] if t <= g1["launched_at"][1])
    assert steps and steps[0] > survivor_at_relaunch, record
