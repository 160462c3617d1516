"""The third recovery path (pure): a failure inside one replica group decided with the group's own budget
(crds/inplace.py: decide_group_path; docs/operator.md, "Replica groups")."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from railtrain.crds import contract, inplace, reasons, recovery
from railtrain.crds.api import RunPolicy

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
POLICY = RunPolicy()  # backoffLimit 3, maxInfrastructureRestarts 10
JOB_WIDE = recovery.Counters(job_restarts=1, infrastructure_restarts=2)


def failure(verdict=contract.VERDICT_RETRYABLE, rank=2, node="n2", cause="", nodes=()):
    return recovery.Failure(rank=rank, code=1, verdict=verdict, reason="Boom", message="it broke", reported=True, node=node, cause=cause, nodes=tuple(nodes))


def decide(failures=None, spent=(0, 0), down=frozenset({1}), lost=frozenset(), groups=2, min_replicas=1, counters=JOB_WIDE):
    evidence = recovery.GangFailure(tuple(failures), {2: "n2", 3: "n3"}, frozenset({"n0", "n1", "n2", "n3"})) if failures else None
    return inplace.decide_group_path(
        evidence, "pod ft-2 (rank 2) was deleted while the other replica groups ran", POLICY, counters, NOW,
        group=1, spent=spent, groups=groups, down=set(down), lost=set(lost), min_replicas=min_replicas,
    )


def test_a_retryable_failure_replaces_the_group_alone_and_spends_only_the_groups_budget():
    gd = decide([failure()])
    assert gd.path == inplace.PATH_GROUP and gd.decision.reason == reasons.REPLICA_GROUP_REPLACED
    assert (gd.job_restarts, gd.infrastructure_restarts) == (1, 0)  # the group's own count
    assert (gd.decision.counters.job_restarts, gd.decision.counters.infrastructure_restarts) == (1, 2)  # job-wide unchanged
    assert "replacing replica group 1 alone (the group's job restarts 1/3" in gd.decision.message


def test_a_vanished_pod_is_an_infrastructure_replacement_of_its_group():
    gd = decide(None, spent=(0, 4))
    assert gd.path == inplace.PATH_GROUP and (gd.job_restarts, gd.infrastructure_restarts) == (0, 5)
    assert gd.decision.message.startswith("pod ft-2 (rank 2) was deleted") and "replacing replica group 1 alone" in gd.decision.message


def test_the_group_budget_is_the_groups_own():
    """Group 1 spent 2 of 3 job restarts; the job-wide counter (1) is not what bounds it."""
    assert decide([failure()], spent=(2, 0)).path == inplace.PATH_GROUP
    spent = decide([failure()], spent=(3, 0), counters=recovery.Counters())
    assert spent.path == inplace.PATH_GROUP_LOST and spent.decision.reason == reasons.REPLICA_GROUP_LOST


@pytest.mark.parametrize("groups,min_replicas,lost,path,reason", [
    (3, 2, set(), inplace.PATH_GROUP_LOST, reasons.REPLICA_GROUP_LOST),   # 2 groups kept ≥ 2
    (3, 2, {0}, inplace.PATH_NONE, reasons.QUORUM_LOST),                  # 1 kept < 2
    (2, 1, set(), inplace.PATH_GROUP_LOST, reasons.REPLICA_GROUP_LOST),   # 1 kept ≥ 1
    (2, 2, set(), inplace.PATH_NONE, reasons.QUORUM_LOST),                # 1 kept < 2
])
def test_a_group_past_its_budget_is_given_up_unless_the_quorum_cannot_be_kept(groups, min_replicas, lost, path, reason):
    gd = decide([failure()], spent=(3, 0), groups=groups, min_replicas=min_replicas, lost=lost)
    assert (gd.path, gd.decision.reason) == (path, reason)
    if path == inplace.PATH_NONE:
        assert gd.decision.action == recovery.FAIL and "fewer than spec.faultTolerance.minReplicas" in gd.decision.message


def test_a_user_error_fails_the_job_whatever_the_groups():
    gd = decide([failure(contract.VERDICT_USER_ERROR)])
    assert gd.path == inplace.PATH_NONE and gd.decision.reason == reasons.USER_ERROR


@pytest.mark.parametrize("fail,why", [
    (failure(cause=recovery.CAUSE_NODE), "n2"),  # the kubelet ended the pod for its node's sake
    (failure(contract.VERDICT_HARDWARE_SUSPECT, nodes=("n2",)), "n2"),  # quarantined
    (failure(contract.VERDICT_STRAGGLER, nodes=("n2",)), "n2"),  # newly avoided
])
def test_a_node_that_must_be_left_moves_the_group_elsewhere(fail, why):
    gd = decide([fail])
    assert gd.path == inplace.PATH_GROUP and gd.elsewhere and why in gd.why
    assert "replacing replica group 1 alone on other nodes (node(s) n2 must be left)" in gd.decision.message


def test_a_lost_node_moves_its_group_and_counts_the_node():
    gd = inplace.decide_group_path(None, "node n3: the Node was deleted", POLICY, JOB_WIDE, NOW, group=1, spent=(0, 0), groups=2,
                                   down={1}, lost=set(), min_replicas=1, reason=reasons.NODE_LOST, node="n3")
    assert gd.path == inplace.PATH_GROUP and gd.elsewhere and gd.infrastructure_restarts == 1
    assert gd.decision.counters.node_failures == ({"node": "n3", "count": 1},) and gd.decision.counters.infrastructure_restarts == 2
    assert not decide(None).elsewhere  # a vanished pod comes back on its own node


def test_every_group_down_takes_the_gang_path():
    assert decide([failure()], down={0, 1}).path == inplace.PATH_GANG
    assert decide([failure()], down={1}, lost={0}).path == inplace.PATH_GANG


def test_a_group_that_reports_quorum_lost_fails_the_job():
    lost = recovery.Failure(rank=2, code=1, verdict=contract.VERDICT_RETRYABLE, reason="QuorumLost", message="no quorum of 2 groups in 300 s", reported=True, node="n2")
    gd = decide([lost])
    assert gd.path == inplace.PATH_NONE and gd.decision.reason == reasons.QUORUM_LOST and gd.decision.action == recovery.FAIL
    assert "cannot bring the missing ones back" in gd.decision.message
    assert decide([lost], down={0, 1}).path == inplace.PATH_NONE  # before the every-group-down gang path
