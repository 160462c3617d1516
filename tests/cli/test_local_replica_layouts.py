"""`railtrain run --local` with replica groups whose layout inside each group is tensor, pipeline or context parallel
(issue 31): 2 groups of one node × 2 processes, group 1 killed and healed from group 0 rank by rank.

A module of its own (the helpers are tests/cli/test_local_replica_groups.py's) so that the suite's workers run it beside
that module rather than after it (each module stays on one pytest-xdist worker).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torchft")

from tests.cli.test_local_replica_groups import group_1_killed_heals_and_steps_with_group_0  # noqa: E402


@pytest.mark.parametrize("inner", [{"tensor": 2}, {"pipeline": 2}, {"context": 2}], ids=["tensor", "pipeline", "context"])
def test_tensor_pipeline_or_context_parallel_inside_the_groups_a_killed_group_heals_rank_by_rank_from_its_peer(tmp_path, inner):
    """Issue 31, tensor, pipeline or context parallelism inside a replica group: 2 groups of one node × 2 processes
    (tensor 2: each rank holds half of every sharded weight; pipeline 2: each rank one stage; context 2: each rank half
    of every sequence, the model replicated). Rank r of every group holds the
    same part, so the cross-group gradient average, a heal and the fingerprints carry rank r's part. Group 1 is killed
    at step 4; its replacement heals from group 0 (its first step is past group 0's step at its relaunch) and both step
    together again. On the old code such a layout was refused before training (spec.faultTolerance: ... set
    spec.parallelism.tensor, pipeline and context to 1)."""
    group_1_killed_heals_and_steps_with_group_0(tmp_path, inner=inner)
