"""The one failure decision (pure, table-driven): blame, claims, quarantine bounds, restart bounds and backoff."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from railtrain.crds import contract, recovery
from railtrain.crds.api import RunPolicy
from railtrain.crds.failure_policy import FailurePolicy, FailurePolicyRule

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
GANG = {0: "a", 1: "b"}


def verdict(kind, rank=1, nodes=("a",), **more):
    return recovery.Failure(rank=rank, code=1, verdict=kind, reason="Finding", message="seen", reported=True, node=GANG[rank], nodes=tuple(nodes), **more)


def decide(*failures, policy=None, counters=None, existing=None):
    gang = recovery.GangFailure(tuple(failures), GANG, existing)
    return recovery.decide(gang, policy or RunPolicy(), counters or recovery.Counters(), NOW)


@pytest.mark.parametrize("age_minutes,bound,exceeded", [(30, 2, True), (61, 2, False), (30, 3, False), (5, 0, True)])
def test_the_jobs_quarantine_window_is_one_sliding_hour(age_minutes, bound, exceeded):
    t = (NOW - timedelta(minutes=age_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    counters = recovery.Counters(quarantines=tuple({"node": n, "verdict": "hang", "time": t} for n in ("x", "y")))
    rules = [FailurePolicyRule(verdict="hardware-suspect", action="RestartIgnoringBackoff", quarantine_after=1)]
    d = decide(verdict("hardware-suspect"), policy=RunPolicy(failure_policy=FailurePolicy(rules=rules, max_quarantines_per_hour=bound)), counters=counters)
    assert (d.reason == recovery.REASON_QUARANTINE_LIMIT) == exceeded and d.quarantine == (() if exceeded else ("a",))


def test_already_quarantined_nodes_are_not_quarantined_again():
    gang = recovery.GangFailure((verdict("hardware-suspect", nodes=("a", "b")),), GANG | {2: "c"})  # c: the verdict does not name every node
    d = recovery.decide(gang, RunPolicy(), recovery.Counters(tainted=frozenset({"a"})), NOW)
    assert d.quarantine == ("b",) and d.avoid == ("a", "b")


@pytest.mark.parametrize("kind", ["hardware-suspect", "straggler"])
def test_a_verdict_naming_every_node_of_the_gang_quarantines_none(kind):
    """Issue 25 item 5: two replicas disagree and nothing tells which is wrong; an old trainer names both nodes."""
    policy = RunPolicy(failure_policy=FailurePolicy(rules=[FailurePolicyRule(verdict=kind, action="RestartIgnoringBackoff", quarantine_after=1, avoid_nodes=True)]))
    counters = recovery.Counters(suspects=({"node": "a", "verdict": kind, "count": 5, "ranks": [0, 1]}, {"node": "b", "verdict": kind, "count": 5, "ranks": [0, 1]}))
    d = decide(verdict(kind, nodes=("a", "b")), policy=policy, counters=counters)
    assert d.action == recovery.RESTART_INFRASTRUCTURE and d.quarantine == () and d.avoid == () and d.counters.quarantines == ()
    assert "names every node of the gang (a, b), which tells none of them apart: none quarantined" in d.message
    assert {s["node"]: s["count"] for s in d.counters.suspects} == {"a": 6, "b": 6}  # still counted
    one = decide(verdict(kind, nodes=("b",)), policy=policy, counters=counters)  # evidence pointing at one node still acts
    assert one.quarantine == ("b",)


@pytest.mark.parametrize(
    "claimed,existing,acted,ignored",
    [
        (("a",), None, ("a",), ()),
        (("a", "control-plane"), None, ("a",), ("control-plane",)),  # not a node this gang ran on
        (("a", "b"), frozenset({"b"}), ("b",), ("a",)),  # a ran the gang but no longer exists: no budget spent on it
        (("", "elsewhere"), None, (), ("elsewhere",)),
    ],
)
def test_a_verdict_acts_only_on_nodes_the_gang_ran_on_that_exist(claimed, existing, acted, ignored):
    d = decide(verdict("hardware-suspect", nodes=claimed), existing=existing)
    assert d.quarantine == acted and d.ignored == ignored
    assert [q["node"] for q in d.counters.quarantines] == list(acted)
    assert [s["node"] for s in d.counters.suspects] == list(acted)


def test_the_cluster_bound_comes_first_and_the_node_is_only_avoided():
    counters = recovery.Counters(cluster_quarantines=3, cluster_limit=3)
    d = decide(verdict("hardware-suspect"), counters=counters)
    assert d.action == recovery.RESTART_INFRASTRUCTURE and d.quarantine == () and d.budget_spent == ("a",) and d.avoid == ("a",)
    assert "the cluster's bound of 3 quarantines per hour is reached" in d.message


def test_a_jobs_setting_can_only_lower_the_cluster_bound():
    job_allows = RunPolicy(failure_policy=FailurePolicy(max_quarantines_per_hour=100))
    gang = recovery.GangFailure((verdict("hardware-suspect", nodes=("a", "b")),), GANG | {2: "c"})  # c: the verdict does not name every node
    d = recovery.decide(gang, job_allows, recovery.Counters(cluster_quarantines=0, cluster_limit=1), NOW)
    assert d.quarantine == ("a",) and d.budget_spent == ("b",)


@pytest.mark.parametrize(
    "failures,want",
    [
        ((verdict("retryable", 0), verdict("hang", 1)), ("hang", 1)),  # the most specific verdict
        ((verdict("straggler", 0), verdict("user-error", 1)), ("user-error", 1)),
        ((verdict("retryable", 0, finished="2026-11-29T11:00:09Z"), verdict("retryable", 1, finished="2026-11-29T11:00:04Z")), ("retryable", 1)),
        ((verdict("retryable", 0, finished="2026-11-29T11:00:04Z"), verdict("retryable", 1, signalled=True, finished="2026-11-29T11:00:05Z")), ("retryable", 1)),
        ((verdict("retryable", 0), verdict("retryable", 1)), ("retryable", 0)),
        ((verdict("user-error", 0), recovery.Failure(rank=1, code=1, verdict="retryable", reason="Preempting", message="m", node="b", cause="node", pod="p")), ("retryable", 1)),
    ],
)
def test_blame_order(failures, want):
    d = decide(*failures)
    assert (d.verdict, d.blamed.rank) == want


def test_infrastructure_backoff_doubles_to_its_cap():
    assert [recovery.infrastructure_backoff(n, 10) for n in range(1, 8)] == [0, 10, 20, 40, 80, 160, 300]
    assert recovery.infrastructure_backoff(5, 0) == 0 and recovery.infrastructure_backoff(3, 600) == 600


def test_a_node_that_fails_the_jobs_pods_twice_is_avoided():
    c = recovery.Counters()
    for times in (1, 2):
        d = recovery.restart_infrastructure(RunPolicy(), c, "RankEvicted", "evicted", node="a")
        c = d.counters
        assert ("a" in d.avoid) == (times == 2)


def test_separation_of_rank_and_node_for_hang_and_straggler():
    """Rank 0 named at every attempt, rotated over nodes a and b: neither node is ever quarantined, the ranks keep rotating."""
    rule = FailurePolicyRule(verdict="straggler", action="RestartIgnoringBackoff", quarantine_after=2)
    policy = RunPolicy(failure_policy=FailurePolicy(rules=[rule]), max_infrastructure_restarts=100)
    c = recovery.Counters()
    for attempt in range(6):
        node = "ab"[attempt % 2]
        gang = recovery.GangFailure((recovery.Failure(rank=0, code=1, verdict="straggler", reason="SlowRank", message="slow", reported=True, node=node, nodes=(node,)),), {0: node, 1: "ba"[attempt % 2]})
        d = recovery.decide(gang, policy, c, NOW)
        c = d.counters
        assert d.quarantine == () and c.rank_shift == attempt + 1
    # the fault stays with node a while the ranks rotate: quarantined at the second naming with another rank
    c = recovery.Counters()
    for rank in (0, 1):
        gang = recovery.GangFailure((recovery.Failure(rank=rank, code=1, verdict="straggler", reason="SlowRank", message="slow", reported=True, node="a", nodes=("a",)),), {rank: "a", 1 - rank: "b"})
        d = recovery.decide(gang, policy, c, NOW)
        c = d.counters
    assert d.quarantine == ("a",)


def test_decide_needs_a_failure():
    with pytest.raises(ValueError):
        recovery.decide(recovery.GangFailure(()), RunPolicy(), recovery.Counters(), NOW)


def test_unreported_exit_code_2_is_a_user_error():
    assert recovery.unreported(rank=0, code=contract.EXIT_USER_ERROR).verdict == contract.VERDICT_USER_ERROR
    assert recovery.unreported(rank=0, code=137, reason="OOMKilled").detail() == "rank 0 exited with code 137: OOMKilled"
