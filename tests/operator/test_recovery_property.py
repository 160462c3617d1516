"""A property over generated failure histories, run through the operator's pure reconcile plan attempt after attempt:
restarts of any cause are bounded (the job reaches Failed, or its counters stay within backoffLimit and
maxInfrastructureRestarts), restarts of either kind back off exponentially from the second on, and no node outside the gang's own pods is
ever tainted, whatever the verdicts claim."""

from __future__ import annotations

import copy

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railtrain.crds import contract, recovery
from railtrain.operator.scheduling import quarantine
from railtrain.operator.job import planner
from railtrain.operator.job.plansettings import PlanSettings

from .builders import fail, gang, job_obj, node

START = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
CLUSTER = ["n0", "n1", "n2", "n3", "n4", "n5"]
FOREIGN = ["control-plane", "tenant-node", "no-such-node"]
EVENTS = ("verdict", "pressure", "limits", "refused", "vanished", "lost")

event = st.tuples(
    st.sampled_from(EVENTS),
    st.sampled_from(contract.VERDICTS),
    st.integers(0, 2),  # the failing rank
    st.lists(st.sampled_from(CLUSTER + FOREIGN), max_size=3),  # the nodes the verdict claims
)
policy = st.fixed_dictionaries({
    "backoffLimit": st.integers(0, 3), "maxInfrastructureRestarts": st.integers(0, 4), "infrastructureBackoffSeconds": st.sampled_from([0, 1, 10]),
    "restartBackoffSeconds": st.sampled_from([0, 1, 10]),
    "failurePolicy": st.fixed_dictionaries({"maxQuarantinesPerHour": st.integers(0, 3), "rules": st.sampled_from([
        [], [{"verdict": "straggler", "action": "RestartIgnoringBackoff", "quarantineAfter": 1}],
        [{"verdict": "retryable", "action": "RestartIgnoringBackoff"}, {"verdict": "hang", "action": "RestartIgnoringBackoff", "quarantineAfter": 1}],
    ])}),
})  # fmt: skip


def place(nodes, status, size):
    """A stand-in for the admission pass: the first eligible nodes, not avoided, not quarantined, rotated by rankShift."""
    usable = [n["metadata"]["name"] for n in nodes if quarantine.quarantined_by(n) is None and n["metadata"]["name"] not in (status.get("avoidNodes") or [])]
    if len(usable) < size:
        return None
    chosen = usable[:size]
    shift = int(status.get("rankShift") or 0) % size
    return [chosen[(r + shift) % size] for r in range(size)]


def strike(kind, verdict, rank, claimed, pods, ran):
    """Make the event happen to the gang's pods; returns the pods as observed and the Node list change."""
    pod = pods[rank]
    if kind == "verdict":
        fail(pod, code=2 if verdict == contract.VERDICT_USER_ERROR else 1, message=contract.format_termination_message(verdict, "Finding", "seen", nodes=claimed, ranks=[rank]))
    elif kind in ("pressure", "limits", "refused"):
        reason = "OutOfnvidia.com/gpu" if kind == "refused" else "Evicted"
        pod["status"] = {"phase": "Failed", "reason": reason, "message": "m"}
        if kind == "pressure":
            pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]
    elif kind == "vanished":
        return [p for p in pods if p is not pod], None
    return pods, (ran[rank] if kind == "lost" else None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_policy=policy, history=st.lists(event, min_size=1, max_size=14), size=st.integers(2, 3))
def test_restarts_are_bounded_back_off_and_taint_only_the_gangs_own_nodes(run_policy, history, size):
    nodes = [node(n) for n in CLUSTER]
    status = {"phase": "Running", "restarts": 0}
    now, before = START, {"infrastructureRestarts": 0, "jobRestarts": 0}
    for kind, verdict, rank, claimed in history:
        ran = place(nodes, status, size)
        if ran is None:
            break  # no capacity left: the job would wait, which restarts nothing
        obj = job_obj(nodes=size, runPolicy=run_policy, status=status | {
            "admittedNodes": size, "conditions": [{"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": "2026-11-29T11:00:00Z"}],
        })  # fmt: skip
        pods = gang(obj, restarts=status["restarts"], phase="Running", gated=False, nodes=ran)
        pods, lost = strike(kind, verdict, min(rank, size - 1), claimed, pods, ran)
        observed = [n for n in nodes if n["metadata"]["name"] != lost]
        seen = copy.deepcopy(pods)
        p = planner.plan(obj, pods, True, now, nodes=observed, settings=PlanSettings(quarantine_limit=4))
        assert pods == seen  # read-only: the operator hands the plan the pods cache's own dicts
        st_ = p.status
        assert {q[0] for q in p.quarantine} <= set(ran), (kind, claimed, ran, p.quarantine)
        for name, verdict_, _ in p.quarantine:
            target = next(n for n in nodes if n["metadata"]["name"] == name)
            target["spec"]["taints"] = quarantine.taints_with(target, verdict_)
            target["metadata"]["annotations"] = {quarantine.ANNOTATION_AT: now.strftime("%Y-%m-%dT%H:%M:%SZ")}
        assert st_.get("jobRestarts", 0) <= run_policy["backoffLimit"]
        assert st_.get("infrastructureRestarts", 0) <= run_policy["maxInfrastructureRestarts"]
        for counter, base in (("infrastructureRestarts", "infrastructureBackoffSeconds"), ("jobRestarts", "restartBackoffSeconds")):
            spent = st_.get(counter, 0)
            if spent > before[counter] and st_["phase"] == "Restarting":
                wait = recovery.infrastructure_backoff(spent, run_policy[base])
                after = st_.get("requeueAfter")
                got = 0 if after is None else (datetime.fromisoformat(after.replace("Z", "+00:00")) - now).total_seconds()
                assert got == wait and (spent < 2 or run_policy[base] == 0 or wait > 0), (counter, spent, got)
            before[counter] = spent
        if st_["phase"] in ("Failed", "Succeeded"):
            return
        status = {k: v for k, v in st_.items() if k not in ("conditions", "placement", "admittedNodes")} | {"phase": "Running"}
        now += timedelta(seconds=600)
    # a history that did not end the job kept every counter within its bound (asserted at each step)
