"""The gang's in-place coordinator (crds/coordinator.py) over real HTTP: it alone numbers the attempts (a supervisor
that asks again gets the current one), drops a report of any other attempt, decides once per attempt, and a rank
that never reports makes the restart a gang restart."""

from __future__ import annotations

import json
import urllib.request

from railtrain.crds import contract, inplace, recovery
from railtrain.crds.api import RunPolicy
from railtrain.crds.coordinator import Coordinator, serve


def call(port, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data), timeout=5) as r:
        return json.loads(r.read())


def report(attempt, rank, code, stopped=False, message=None):
    return {"attempt": attempt, "rank": rank, "code": code, "stopped": stopped, "message": message, "finished": 1.0 + rank, "node": f"n{rank}"}


def test_attempts_are_numbered_by_the_coordinator_and_stale_reports_are_dropped():
    c = Coordinator(2, RunPolicy(), recovery.Counters(), inplace.Ledger(restarts=4))
    server = serve(c, 0, host="127.0.0.1")
    port = server.server_address[1]
    try:
        assert call(port, "/state?rank=1")["attempt"] == 0
        assert call(port, "/report", report(0, 1, 3))["accepted"]
        assert call(port, "/state")["failed"] and c.step() is None  # rank 0 has not reported: wait (within the settle time)
        assert call(port, "/report", report(0, 0, 1, stopped=True))["accepted"]
        d = c.step()
        assert (d["path"], d["rank"], d["next"]) == (inplace.PATH_IN_PLACE, 1, 1)
        assert "restarting in place (job restarts 1/3" in d["message"]
        state = call(port, "/state?rank=1")  # a supervisor that asks again (a fast rejoin) gets attempt 1, never 0
        assert (state["attempt"], state["failed"], state["ledger"]["job"], state["ledger"]["restarts"]) == (1, False, 1, 4)
        assert not call(port, "/report", report(0, 1, 3))["accepted"]  # attempt 0's late report is not read in attempt 1
        assert c.step() is None
        for rank in (0, 1):
            call(port, "/report", report(1, rank, 0))
        assert c.step()["path"] == "done" and call(port, "/ledger")["final"]
    finally:
        server.shutdown()


def test_second_failure_in_a_row_escalates_and_a_silent_rank_means_the_gang():
    verdict = contract.format_termination_message(contract.VERDICT_HANG, "NoProgress", "rank 1 stopped", nodes=["n1"], ranks=[1])
    c = Coordinator(2, RunPolicy(), recovery.Counters(), inplace.Ledger(), settle_seconds=0.0)
    c.report(report(0, 1, 1, message=verdict))
    c.report(report(0, 0, 1, stopped=True))
    assert c.step()["path"] == inplace.PATH_IN_PLACE
    c.report(report(1, 1, 1, message=verdict))
    c.report(report(1, 0, 1, stopped=True))
    d = c.step()
    assert (d["path"], d["verdict"]) == (inplace.PATH_GANG, "hang") and "escalated" in d["message"] and c.final
    silent = Coordinator(3, RunPolicy(), recovery.Counters(), inplace.Ledger(), settle_seconds=0.0)
    silent.report(report(0, 1, 3))
    d = silent.step(now=1e12)
    assert (d["path"], d["missing"]) == (inplace.PATH_GANG, [0, 2])


def test_an_attempt_that_trained_before_it_failed_restarts_in_place_again_and_a_quick_second_failure_escalates():
    """Found by the kind goodput drill: after one in-place restart every later failure of the gang escalated to a gang
    restart, even the third fault 10 minutes later (the streak never started over). An attempt opened in place that
    ran :data:`inplace.TRAINED_SECONDS` before it failed has trained: its failure restarts in place again; one that
    fails again soon after its restart still escalates; a successor coordinator keeps the attempt's age. Fails on the
    old main (the second decision escalated)."""
    verdict = contract.format_termination_message(contract.VERDICT_HANG, "NoProgress", "rank 1 stopped", nodes=["n1"], ranks=[1])
    c = Coordinator(2, RunPolicy(), recovery.Counters(), inplace.Ledger(), settle_seconds=0.0)

    def fail(attempt, t):
        for r in (0, 1):
            c.state(r, node=f"n{r}", now=t)
        c.report(report(attempt, 1, 1, message=verdict))
        c.report(report(attempt, 0, 1, stopped=True))
        return c.step(now=t)

    assert fail(0, 1.0)["path"] == inplace.PATH_IN_PLACE
    later = 200.0  # past inplace.TRAINED_SECONDS (120 s)
    d = fail(1, later)
    assert (d["path"], d["next"]) == (inplace.PATH_IN_PLACE, 2) and not c.final, d  # it trained 199 s: a new fault
    successor = Coordinator.successor(json.loads(json.dumps(c.view(now=later + 5))), 2, RunPolicy(), host=1, heard=later + 5, now=later + 6)
    assert successor.opened is not None and abs((later + 6) - successor.opened - 5) < 0.01  # the attempt's age travels in the copy
    d = fail(2, later + 10)
    assert d["path"] == inplace.PATH_GANG and "escalated" in d["message"] and c.final  # failed again 10 s after its restart
