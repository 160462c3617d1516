"""The restart path (pure, crds/inplace.py): each verdict kind's path under the default failure policy, the escalation
rules (a node out, the second in-place failure in a row), one budget spent by both paths, the ledger's arithmetic,
and status.goodput's in-place causes."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from railtrain.crds import contract, goodput, inplace, reasons, recovery
from railtrain.crds.api import RunPolicy

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
GANG = {0: "a", 1: "b"}


def evidence(verdict: str, nodes=("b",), reason="Finding", cause="") -> recovery.GangFailure:
    f = recovery.Failure(rank=1, code=1, verdict=verdict, reason=reason, message="seen", reported=True, node="b", nodes=tuple(nodes), cause=cause)
    return recovery.GangFailure((f,), GANG, frozenset(GANG.values()))


@pytest.mark.parametrize(
    "verdict,nodes,path,kind",
    [
        (contract.VERDICT_RETRYABLE, (), inplace.PATH_IN_PLACE, "job"),  # a crash
        (contract.VERDICT_HANG, ("b",), inplace.PATH_IN_PLACE, "job"),  # named once: not following a node yet
        (contract.VERDICT_STRAGGLER, ("b",), inplace.PATH_GANG, "infrastructure"),  # its default rule avoids the node
        (contract.VERDICT_HARDWARE_SUSPECT, ("b",), inplace.PATH_GANG, "infrastructure"),  # quarantined at once
        (contract.VERDICT_HARDWARE_SUSPECT, ("a", "b"), inplace.PATH_IN_PLACE, "infrastructure"),  # names every node: tied to none
        (contract.VERDICT_USER_ERROR, (), inplace.PATH_NONE, None),
    ],
)
def test_each_verdict_kinds_path(verdict, nodes, path, kind):
    d = inplace.decide_path(evidence(verdict, nodes), RunPolicy(), recovery.Counters(), NOW, streak=0)
    assert d.path == path
    if kind is None:
        assert d.action == recovery.FAIL
        return
    assert (d.counters.job_restarts, d.counters.infrastructure_restarts) == ((1, 0) if kind == "job" else (0, 1))
    assert (inplace.IN_PLACE_WORDS in d.message) == (path == inplace.PATH_IN_PLACE)


def test_data_fault_whose_rule_restarts_goes_in_place_and_a_straggler_not_avoided_too():
    policy = RunPolicy.model_validate({"failurePolicy": {"rules": [
        {"verdict": "user-error", "action": "Restart"}, {"verdict": "straggler", "action": "RestartIgnoringBackoff", "avoidNodes": False}]}})
    data = inplace.decide_path(evidence(contract.VERDICT_USER_ERROR, (), reason=contract.REASON_DATA_ANOMALY), policy, recovery.Counters(), NOW, 0)
    slow = inplace.decide_path(evidence(contract.VERDICT_STRAGGLER, ("b",)), policy, recovery.Counters(), NOW, 0)
    assert (data.path, data.action) == (inplace.PATH_IN_PLACE, recovery.RESTART_JOB)
    assert (slow.path, slow.action) == (inplace.PATH_IN_PLACE, recovery.RESTART_INFRASTRUCTURE)


def test_the_kubelets_doing_and_restarts_without_a_verdict_take_the_gang_path():
    evicted = inplace.decide_path(evidence(contract.VERDICT_RETRYABLE, (), cause=recovery.CAUSE_NODE), RunPolicy(), recovery.Counters(), NOW, 0)
    lost = recovery.restart_infrastructure(RunPolicy(), recovery.Counters(), reasons.NODE_LOST, "node b lost", node="b")
    assert evicted.path == inplace.PATH_GANG
    assert inplace.restart_path(lost, recovery.Counters(), 0)[0] == inplace.PATH_GANG


def test_a_hang_named_by_a_second_rank_on_the_node_quarantines_it_and_goes_gang():
    before = recovery.Counters(suspects=({"node": "b", "verdict": "hang", "count": 1, "ranks": [0]},))
    d = inplace.decide_path(evidence(contract.VERDICT_HANG, ("b",)), RunPolicy(), before, NOW, 0)
    assert d.quarantine == ("b",) and d.path == inplace.PATH_GANG


def test_second_in_place_failure_in_a_row_escalates_and_says_so():
    first = inplace.decide_path(evidence(contract.VERDICT_RETRYABLE, ()), RunPolicy(), recovery.Counters(), NOW, streak=0)
    second = inplace.decide_path(evidence(contract.VERDICT_RETRYABLE, ()), RunPolicy(), first.counters, NOW, streak=1)
    assert first.path == inplace.PATH_IN_PLACE
    assert second.path == inplace.PATH_GANG and "escalated" in second.message and inplace.GANG_WORDS in second.message
    assert second.counters.job_restarts == 2  # both spent the one budget
    gone = inplace.decide_path(evidence(contract.VERDICT_RETRYABLE, ()), RunPolicy(), recovery.Counters(), NOW, streak=None)
    assert gone.path == inplace.PATH_GANG  # the pod is gone: the operator's own restart


def test_budget_exhausted_by_in_place_restarts_alone_fails_with_the_reason():
    policy, ledger, counters = RunPolicy(backoffLimit=2), inplace.Ledger(restarts=0), recovery.Counters()
    for _ in range(2):
        d = inplace.decide_path(evidence(contract.VERDICT_RETRYABLE, ()), policy, counters, NOW, streak=0)
        assert d.path == inplace.PATH_IN_PLACE
        counters, ledger = d.counters, ledger.after(d)
    last = inplace.decide_path(evidence(contract.VERDICT_RETRYABLE, ()), policy, counters, NOW, streak=0)
    assert (last.action, last.reason, last.path) == (recovery.FAIL, reasons.BACKOFF_LIMIT_EXCEEDED, inplace.PATH_NONE)
    assert "backoffLimit=2" in last.message
    assert (ledger.attempt, ledger.job, ledger.infrastructure, dict(ledger.causes)) == (2, 2, 0, {"retryable": 2})
    # the operator, from the ledger alone, reaches the same counters and the same end
    spent = inplace.spend(recovery.Counters(), inplace.uncounted(ledger, None))
    assert recovery.decide(evidence(contract.VERDICT_RETRYABLE, ()), policy, spent, NOW).reason == reasons.BACKOFF_LIMIT_EXCEEDED


def test_ledger_travels_in_the_termination_message_and_is_counted_once():
    ledger = inplace.Ledger(restarts=3, attempt=2, job=1, infrastructure=1, causes={"retryable": 1, "hang": 1}, streak=1)
    verdict = contract.format_termination_message(contract.VERDICT_HANG, "NoProgress", "rank 1 stopped", step=9)
    text = inplace.with_ledger(verdict, ledger)
    assert contract.parse_termination_message(text)["reason"] == "NoProgress"  # the verdict still reads
    assert inplace.ledger_in_message(text) == ledger
    assert inplace.ledger_in_message(inplace.with_ledger("a log tail", ledger)) == ledger
    counted = inplace.counted_record(replace_attempt(ledger, 1, job=1, causes={"retryable": 1}))
    delta = inplace.uncounted(ledger, counted)
    assert (delta.attempt, delta.job, delta.infrastructure, dict(delta.causes)) == (1, 0, 1, {"hang": 1})
    assert inplace.uncounted(ledger, inplace.counted_record(ledger)).attempt == 0
    assert inplace.uncounted(ledger, {"restarts": 2, "attempt": 5}) == ledger  # another gang's record
    assert inplace.Ledger.from_json({"attempt": -1}) is None and inplace.Ledger.from_json({"causes": {"x": "1"}}) is None


def replace_attempt(ledger, attempt, **fields):
    from dataclasses import replace

    return replace(ledger, attempt=attempt, infrastructure=0, **fields)


def test_goodput_accounts_in_place_restarts_by_cause():
    t0 = NOW
    at = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    attempts = [
        goodput.Attempt(released=at(0), first_step=1, first_step_at=at(10), last_step=5, last_step_at=at(50), ended=at(52), end_reason="Restarting", in_place="retryable"),
        goodput.Attempt(released=at(52), first_step=6, first_step_at=at(55), last_step=9, last_step_at=at(80), ended=at(90), end_reason="Restarting"),
        goodput.Attempt(released=at(95), first_step=10, first_step_at=at(100), last_step=12, last_step_at=at(110)),
    ]
    g = goodput.breakdown(t0, attempts, at(110))
    assert g.lost_seconds["restart_in_place_retryable"] == pytest.approx(5.0)
    assert g.lost_seconds["restart_job"] == pytest.approx(20.0)
    assert goodput.total(g) == pytest.approx(g.wall_seconds)


def test_a_coordinator_answer_cut_short_is_retried_like_no_answer():
    """Found in a fresh-clone run under load (tests/cli/test_local_inplace.py's killed trainer rank): node rank 1's
    supervisor, waiting for the coordinator's decision, got a response whose connection closed after its headers
    (``http.client.IncompleteRead``, not an ``OSError``) and died of it; its node failed and the in-place restart
    became a gang restart. Any answer cut short is now "did not answer, try again". Here a real HTTP server cuts its
    first answer after the headers and answers the second properly."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from railtrain.crds import supervisor as sv

    served = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            served.append(self.path)
            data = json.dumps({"attempt": 0, "decisions": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if len(served) > 1:
                self.wfile.write(data)
            self.close_connection = True

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {contract.ENV_RDZV_ADDR: "127.0.0.1", sv.ENV_SUPERVISOR_PORT: str(server.server_address[1]), contract.ENV_NODE_RANK: "1"}
        state = sv.Supervisor(["true"], env)._state(time.monotonic() + 10)
        assert state == {"attempt": 0, "decisions": {}} and len(served) == 2  # the cut answer was asked again
    finally:
        server.shutdown()
        server.server_close()
