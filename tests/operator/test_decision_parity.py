"""One failure decision: the operator (pod status) and `railtrain run --local` (message files) decide the same failure
sets the same way, in the same sentence (table-driven over both sides)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from railtrain.cli.local_recovery import local_failures
from railtrain.crds import contract, recovery
from railtrain.crds.validation import parse_manifest
from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find

from .builders import fail, gang, job_obj, node

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
NODES = ["local-0", "local-1"]


def msg(kind, reason="Finding", nodes=("local-1",), ranks=(1,)):
    return contract.format_termination_message(kind, reason, "what was seen", nodes=list(nodes), ranks=list(ranks))


# (messages per node rank, exit status of the first failing node, its rank, status counters, runPolicy)
CASES = {
    "hang-over-peer": ([msg("retryable", "RuntimeError", ()), msg("hang", "NoProgress")], 1, 0, {}, {}),
    "user-error-wins": ([msg("user-error", "BadFlag", ()), msg("straggler", "SlowRank")], 1, 1, {}, {}),
    "claims-checked": ([None, msg("hardware-suspect", "RerunMismatch", ("local-1", "control-plane"))], 1, 1, {}, {}),
    "exit-2-no-verdict": ([None, None], 2, 1, {}, {}),
    "crash-no-verdict": ([None, None], 3, 0, {}, {}),
    "first-to-fail-blamed": ([msg("retryable", "RuntimeError", ()), msg("retryable", "RuntimeError", ())], 1, 1, {}, {}),
    "backoff-spent": ([None, None], 3, 0, {"jobRestarts": 3}, {}),
    "infra-bound": ([None, msg("straggler", "SlowRank")], 1, 1, {"infrastructureRestarts": 2}, {"maxInfrastructureRestarts": 2}),
    "infra-backoff": ([None, msg("straggler", "SlowRank")], 1, 1, {"infrastructureRestarts": 2}, {"infrastructureBackoffSeconds": 5}),
    "policy-fail": ([None, msg("hang", "NoProgress")], 1, 1, {}, {"failurePolicy": {"rules": [{"verdict": "hang", "action": "Fail"}]}}),
}


def operator_side(messages, code, first, status, run_policy):
    running = {
        "phase": "Running", "admittedNodes": 2, "startTime": "2026-11-29T11:00:00Z",
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": "2026-11-29T11:00:00Z"}],
    }  # fmt: skip
    obj = job_obj(nodes=2, status=running | status, runPolicy=run_policy)
    pods = gang(obj, phase="Running", gated=False, nodes=NODES)
    for rank, text in enumerate(messages):
        if text is None and rank != first:
            continue  # a peer the runner stopped
        fail(pods[rank], code=code if rank == first else 1, message=text or "")
        term = pods[rank]["status"]["containerStatuses"][0]["state"]["terminated"]
        term["finishedAt"] = "2026-11-29T11:59:0" + ("4Z" if rank == first else "5Z")
    p = planner.plan(obj, pods, True, NOW, nodes=[node(n) for n in NODES])
    st = p.status
    c = find(st["conditions"], "Failed") if st["phase"] == "Failed" else find(st["conditions"], "Scheduled")
    action = recovery.FAIL if st["phase"] == "Failed" else (recovery.RESTART_JOB if st.get("jobRestarts", 0) > status.get("jobRestarts", 0) else recovery.RESTART_INFRASTRUCTURE)
    return action, c["reason"], c["message"], sorted(q[0] for q in p.quarantine)


def local_side(messages, code, first, status, run_policy):
    job = parse_manifest(job_obj(nodes=2, runPolicy=run_policy) | {"metadata": {"name": "llm"}})
    counters = recovery.Counters.from_status(status)
    d = recovery.decide(local_failures(messages, code, first), job.spec.run_policy, counters, NOW)
    return d.action, d.reason, d.message, sorted(d.quarantine)


@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_and_local_run_decide_alike_in_the_same_words(case):
    messages, code, first, status, run_policy = CASES[case]
    ours = operator_side(messages, code, first, status, run_policy)
    theirs = local_side(messages, code, first, status, run_policy)
    assert ours == theirs
    if case == "claims-checked":
        assert ours[3] == ["local-1"]
    if case == "infra-backoff":
        assert ours[2].endswith("next gang after 10 s)")
