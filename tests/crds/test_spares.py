"""Hot spares in the gang's coordinator (crds/coordinator.py) and the one rule's spare path (crds/inplace.py:
decide_spare): a rank whose supervisor falls silent is lost, a ready spare takes exactly its place and the attempt
goes on in place; two ranks lost with one spare or no spare alive restart the gang with nothing half taken over; a
supervisor thought lost that comes back is told its rank is gone; the budget bounds takeovers. The coordinator's own
host lost: a successor started from a supervisor's copy of the state goes on with the same attempt, ledger and
counters, gives the old host's rank (node rank 0) to a spare and moves torch's rendezvous store to the spare's host."""

from __future__ import annotations

import json
import urllib.request

import pytest

from railtrain.crds import contract, inplace, recovery
from railtrain.crds.api import RunPolicy
from railtrain.crds.coordinator import LOST_SECONDS, STALL_SECONDS, Coordinator, serve

POLICY = RunPolicy(restart_in_place=True, max_infrastructure_restarts=3)


def gang(n=3, spares=("spare-0",), t=0.0, stall_seconds=None, **kw):
    """A coordinator whose n ranks and spares have all been heard at time t."""
    c = Coordinator(n, POLICY, recovery.Counters(**kw), inplace.Ledger(restarts=2), stall_seconds=stall_seconds)
    for r in range(n):
        c.state(r, node=f"n{r}", now=t)
    for s in spares:
        c.state(spare=s, node=f"s-{s}", now=t)
    return c


def beat(c, ranks, spares=(), t=0.0):
    for r in ranks:
        c.state(r, now=t)
    for s in spares:
        c.state(spare=s, now=t)


def stopped(c, ranks, attempt=0):
    """The survivors' supervisors stopped their workers for the lost peer and reported so."""
    for r in ranks:
        assert c.report({"attempt": attempt, "rank": r, "code": 1, "stopped": True, "message": None, "finished": 1.0, "node": f"n{r}"})


def test_a_silent_rank_is_lost_and_a_ready_spare_takes_exactly_its_place():
    c = gang()
    beat(c, [0, 2], ["spare-0"], t=3.0)
    assert c.step(now=3.0) is None  # rank 1 silent 3 s: not lost yet
    beat(c, [0, 2], ["spare-0"], t=LOST_SECONDS + 1)
    assert c.step(now=LOST_SECONDS + 1) is None and c.state(0, now=LOST_SECONDS + 1)["failed"]  # lost: the others stop their workers now
    stopped(c, [0, 2])
    d = c.step(now=LOST_SECONDS + 1)  # decided once the survivors reported, without waiting for the lost rank
    assert (d["path"], d["missing"], d["takeovers"], d["next"]) == (inplace.PATH_SPARE, [1], {"1": "spare-0"}, 1)
    assert "a hot spare takes node rank 1's place, the others restarting in place (job restarts 0/3, infrastructure restarts 1/3)" in d["message"]
    assert c.state(spare="spare-0", now=7.0)["assigned"] == 1
    state = c.state(1, who="spare-0", now=7.0)  # the spare asks as rank 1 from now on
    assert (state["attempt"], state["failed"], state["holders"]) == (1, False, {"1": "spare-0"})
    ledger = inplace.Ledger.from_json(state["ledger"])
    assert (ledger.attempt, ledger.infrastructure, ledger.spares, ledger.causes, ledger.streak) == (1, 1, 1, {inplace.SPARE_CAUSE: 1}, 0)
    assert c.state(1, now=7.5).get("replaced")  # rank 1's old supervisor, back from a partition: out, not a second rank 1
    assert not c.final


def test_two_ranks_lost_with_one_spare_restart_the_gang_and_nothing_is_half_taken():
    c = gang(4)
    beat(c, [0, 3], ["spare-0"], t=LOST_SECONDS + 1)
    stopped(c, [0, 3])
    d = c.step(now=LOST_SECONDS + 1)
    assert (d["path"], d["missing"]) == (inplace.PATH_GANG, [1, 2]) and c.final
    assert "1 spare(s) ready for 2 lost node rank(s)" in d["message"] and c.holders == {}
    assert c.state(spare="spare-0", now=7.0)["assigned"] is None  # the spare leaves with the gang, holding nothing


def test_a_spare_killed_while_it_waits_is_not_ready():
    c = gang()  # spare-0 heard at 0, never again (killed while it waits)
    beat(c, [0, 2], t=LOST_SECONDS + 1)
    stopped(c, [0, 2])
    d = c.step(now=LOST_SECONDS + 1)
    assert d["path"] == inplace.PATH_GANG and "0 spare(s) ready for 1 lost node rank(s)" in d["message"]


def addressed(n=3, t=0.0, **kw):
    """A gang whose ranks and spare said where their own servers answer."""
    c = Coordinator(n, POLICY, recovery.Counters(**kw), inplace.Ledger(restarts=2))
    for r in range(n):
        c.state(r, node=f"n{r}", addr=f"10.0.0.{r}:29510", now=t)
    c.state(spare="spare-0", node="s0", addr="10.0.9.9:29510", now=t)
    return c


def test_the_state_names_the_succession_of_live_ranks_in_rank_order_without_the_host():
    c = addressed(4)
    assert c.state(0, now=1.0)["succession"] == ["10.0.0.1:29510", "10.0.0.2:29510", "10.0.0.3:29510"]
    beat(c, [0, 2, 3], t=LOST_SECONDS + 1)  # rank 1 silent: no longer a successor
    view = c.view(now=LOST_SECONDS + 1)
    assert view["succession"] == ["10.0.0.2:29510", "10.0.0.3:29510"] and view["host"] == 0
    assert view["spares"]["spare-0"]["addr"] == "10.0.9.9:29510" and view["counters"] == recovery.Counters().spent()


def test_a_successor_from_a_copy_gives_the_old_host_s_rank_0_to_a_spare_and_moves_the_rendezvous_store():
    old = addressed(3, infrastructure_restarts=1)
    copy = old.state(1, now=1.0)  # rank 1's last read of the old coordinator (node rank 0's), at its time 1.0
    c = Coordinator.successor(copy, 3, POLICY, host=1, heard=1.0, now=1.0 + LOST_SECONDS + 0.5)
    t = 1.0 + LOST_SECONDS + 0.5
    assert (c.host, c.ledger.restarts, c.counters.infrastructure_restarts) == (1, 2, 1)
    assert c.lost(t) == {0: "n0"}  # the old host was last heard when the copy was read
    assert c.step(now=t) is None and c.state(2, now=t)["failed"]  # the others stop their workers
    stopped(c, [1, 2])
    assert c.step(now=t) is None  # no spare registered again yet: it waits for them, up to LOST_SECONDS
    c.state(spare="spare-0", node="s0", addr="10.0.9.9:29510", now=t + 0.2)
    d = c.step(now=t + 0.2)
    assert (d["path"], d["missing"], d["takeovers"], d["master"]) == (inplace.PATH_SPARE, [0], {"0": "spare-0"}, "10.0.9.9")
    assert "a hot spare takes node rank 0's place" in d["message"] and "infrastructure restarts 2/3" in d["message"]
    state = c.state(0, who="spare-0", addr="10.0.9.9:29510", now=t + 0.4)
    assert (state["attempt"], state["master"], state["host"]) == (1, "10.0.9.9", 1)
    assert state["succession"] == ["10.0.9.9:29510", "10.0.0.2:29510"]  # node rank 0, now the spare's, comes first again


def test_a_successor_without_spares_restarts_the_gang_once_their_wait_is_over():
    old = addressed(2)
    copy = old.state(1, now=1.0)
    t = 1.0 + LOST_SECONDS + 0.5
    c = Coordinator.successor(copy, 2, POLICY, host=1, heard=1.0, now=t)
    c.step(now=t)
    stopped(c, [1])
    assert c.step(now=t + 1) is None
    d = c.step(now=t + LOST_SECONDS + 0.1)  # spare-0 never registered again (lost with the old host's node)
    assert d["path"] == inplace.PATH_GANG and "0 spare(s) ready for 1 lost node rank(s)" in d["message"] and c.final
    assert c.everyone_saw_the_end(now=t + LOST_SECONDS + 0.2)  # rank 0, the old host, is lost: it will never ask


def test_the_host_waits_for_live_ranks_to_read_the_end_but_not_for_lost_ones():
    c = gang(3, spares=())
    beat(c, [0, 2], t=LOST_SECONDS + 1)  # rank 1 silent: lost
    stopped(c, [0, 2])
    assert c.step(now=LOST_SECONDS + 1)["path"] == inplace.PATH_GANG and c.final
    assert not c.everyone_saw_the_end(now=LOST_SECONDS + 1)  # rank 2 has not read the decision yet
    c.state(2, now=LOST_SECONDS + 1.2)
    assert c.everyone_saw_the_end(now=LOST_SECONDS + 1.2)  # rank 1 is lost: not waited for (it used to hold the host 30 s)


def test_takeovers_spend_the_infrastructure_budget_and_a_spent_budget_fails():
    c = gang(infrastructure_restarts=3)
    beat(c, [0, 2], ["spare-0"], t=LOST_SECONDS + 1)
    stopped(c, [0, 2])
    d = c.step(now=LOST_SECONDS + 1)
    assert (d["path"], d["reason"]) == (inplace.PATH_NONE, recovery.REASON_INFRA_LIMIT) and c.final and c.holders == {}


def test_a_rank_that_reported_is_not_lost_and_a_silent_rank_without_spares_still_ends_the_gang():
    c = gang(spares=())
    c.report({"attempt": 0, "rank": 2, "code": 3, "message": None, "finished": 1.0, "node": "n2"})
    beat(c, [0], t=LOST_SECONDS + 1)  # rank 2 reported, then stayed silent: not lost; rank 1 silent: lost
    assert c.lost(LOST_SECONDS + 1) == {1: "n1"}
    d = c.step(now=LOST_SECONDS + 1)
    assert d is None  # rank 0 has neither reported nor been lost: wait (its supervisor is stopping its workers)
    stopped(c, [0])
    d = c.step(now=LOST_SECONDS + 1)
    assert d["path"] == inplace.PATH_GANG and d["missing"] == [1] and c.final


@pytest.mark.parametrize("values", [{"node": 1}, {"node": 1, "step": 0}, {"nodes": 1, "step": 2}])
def test_lose_node_flag_refuses_what_cannot_fire(values):
    from railtrain.crds.contract_errors import ContractError
    from railtrain.crds.faults import parse_lose_node

    with pytest.raises(ContractError, match="--fault-lose-node"):
        parse_lose_node(",".join(f"{k}={v}" for k, v in values.items()))


def test_over_http_a_spare_registers_and_is_given_its_rank():
    c = gang(2, spares=(), t=__import__("time").monotonic())
    c.lost_seconds = 0.5
    server = serve(c, 0, host="127.0.0.1")
    port = server.server_address[1]

    def get(query):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/state?{query}", timeout=5) as r:
            return json.loads(r.read())

    try:
        assert get("spare=spare-0&node=s0")["assigned"] is None
        import time

        deadline = time.monotonic() + 10
        d = None
        while d is None and time.monotonic() < deadline:  # rank 1 never asks again: lost after 0.5 s
            get("rank=0")
            get("spare=spare-0&node=s0")
            if get("rank=0")["failed"] and 0 not in c.reports:
                stopped(c, [0])
            d = c.step()
            time.sleep(0.05)
        assert d is not None and d["takeovers"] == {"1": "spare-0"}
        assert get("spare=spare-0&node=s0")["assigned"] == 1
        assert get("rank=1&who=spare-0")["attempt"] == 1 and get("rank=1").get("replaced")
    finally:
        server.shutdown()


def test_a_rank_whose_supervisor_says_it_is_leaving_is_lost_at_once_and_its_asks_are_no_heartbeat():
    c = gang()
    assert c.report({"attempt": 0, "rank": 1, "leaving": True})  # its pod deleted: SIGTERM to its supervisor
    assert c.lost(0.1) == {1: "n1"} and c.state(0, now=0.1)["failed"]  # no 5 s of silence first
    c.state(1, now=0.2)  # the leaving supervisor waits to see its rank taken: not a heartbeat
    beat(c, [0, 2], ["spare-0"], t=0.3)
    stopped(c, [0, 2])
    d = c.step(now=0.3)
    assert (d["path"], d["takeovers"]) == (inplace.PATH_SPARE, {"1": "spare-0"})
    assert "node rank 1's supervisor was stopped (its pod on n1 deleted or evicted); a hot spare takes node rank 1's place" in d["message"]
    assert c.state(1, now=0.4)["holders"] == {"1": "spare-0"} and c.state(1, who="spare-0", now=0.4)["attempt"] == 1
    assert not c.report({"attempt": 1, "rank": 1, "leaving": True})  # taken: the spare's, not the old supervisor's to give up


def hardware_report(c, rank, node, attempt=0):
    """Rank ``rank``'s re-execution found its node at fault (the health monitor's hardware-suspect verdict)."""
    message = contract.format_termination_message(contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_RERUN_MISMATCH, "re-executed step 40 differs", nodes=[node], ranks=[rank])
    assert c.report({"attempt": attempt, "rank": rank, "code": contract.EXIT_FAILED, "message": message, "finished": 1.0, "node": node})


def test_a_verdict_that_quarantines_a_node_gives_its_rank_to_a_spare_instead_of_restarting_the_gang():
    """Issue 29, "when a node is lost or quarantined, a spare takes exactly the lost rank's place": a hardware-suspect
    verdict naming node n1 (quarantined at once by the default rule) moves rank 1 to the ready spare; the others
    restart in place; the decision spends the rule's one infrastructure restart; the ledger names the node for the
    operator to quarantine; rank 1's old supervisor is told its rank is gone and why. Without a spare: the gang."""
    c = gang()
    beat(c, [0, 1, 2], ["spare-0"], t=1.0)
    hardware_report(c, 1, "n1")
    stopped(c, [0, 2])
    d = c.step(now=1.5)
    assert (d["path"], d["verdict"], d["takeovers"], d["leave"], d["next"]) == (inplace.PATH_SPARE, contract.VERDICT_HARDWARE_SUSPECT, {"1": "spare-0"}, ["n1"], 1), d
    assert "node(s) n1 quarantined; a hot spare takes node rank 1's place, the others restarting in place (job restarts 0, infrastructure restarts 1)" in d["message"], d["message"]
    assert not c.final
    ledger = inplace.Ledger.from_json(c.view(now=1.6)["ledger"])
    assert (ledger.attempt, ledger.infrastructure, ledger.job, ledger.spares, ledger.causes) == (1, 1, 0, 1, {contract.VERDICT_HARDWARE_SUSPECT: 1})
    assert [(e["node"], e["verdict"], e["quarantine"]) for e in ledger.left] == [("n1", contract.VERDICT_HARDWARE_SUSPECT, True)]
    assert inplace.Ledger.from_json(ledger.to_json()) == ledger  # the claim survives the pod → operator trip
    old = c.state(1, now=1.7)
    assert old["replaced"] and "its node must be left (hardware-suspect verdict of rank 1" in old["why"], old
    assert c.state(1, who="spare-0", now=1.7)["attempt"] == 1  # the spare runs rank 1's next attempt

    none = gang(spares=())
    beat(none, [0, 1, 2], t=1.0)
    hardware_report(none, 1, "n1")
    stopped(none, [0, 2])
    d = none.step(now=1.5)
    assert d["path"] == inplace.PATH_GANG and "must be left" in d["message"] and none.final


def test_a_verdict_naming_two_nodes_with_one_spare_restarts_the_gang_and_an_infrastructure_failure_is_not_spared():
    c = gang(4)
    beat(c, [0, 1, 2, 3], ["spare-0"], t=1.0)
    message = contract.format_termination_message(contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_RERUN_MISMATCH, "differs", nodes=["n1", "n2"], ranks=[1, 2])
    assert c.report({"attempt": 0, "rank": 1, "code": contract.EXIT_FAILED, "message": message, "finished": 1.0, "node": "n1"})
    stopped(c, [0, 2, 3])
    d = c.step(now=1.5)
    assert d["path"] == inplace.PATH_GANG and c.holders == {}  # two ranks must move, one spare: nothing half taken over

    lost = recovery.restart_infrastructure(POLICY, recovery.Counters(), "NodeLost", "n1 lost", node="n1")
    assert inplace.decide_verdict_spare(lost, recovery.Counters(), {0: "n0", 1: "n1"}, 1) is None  # not a verdict: decide_spare's


@pytest.mark.parametrize("bad", [
    {"left": [{"node": "n1"}]},  # keys missing
    {"left": [{"node": "", "verdict": "v", "reason": "r", "quarantine": True, "evidence": "e"}]},  # no node
    {"left": [{"node": "n1", "verdict": "v", "reason": "r", "quarantine": "yes", "evidence": "e"}]},  # not a bool
    {"left": "n1"},
])
def test_a_ledger_whose_left_nodes_are_malformed_is_not_believed(bad):
    assert inplace.Ledger.from_json({"restarts": 0, "attempt": 1} | bad) is None



def test_a_decision_in_the_pods_sees_the_jobs_quarantine_history_and_its_bound():
    """The job's ``failurePolicy.maxQuarantinesPerHour`` holds on the verdict-spare path too: the pods are told the
    job's quarantines (``RAILTRAIN_RESTARTS_SPENT``, :meth:`recovery.Counters.spent`), so a hardware verdict that would
    quarantine one node more than the bound fails the job (``QuarantineLimitExceeded``), as the operator's decision
    for a gang would, instead of giving the rank to a spare. Fails on the old main (the pods knew only the two restart
    counts, quarantined a third node and trained on)."""
    from datetime import datetime, timedelta, timezone

    from railtrain.crds import supervisor
    from railtrain.crds.api import TrainingJobStatus
    from railtrain.crds.times import format_time

    policy = RunPolicy.model_validate({"restartInPlace": True, "failurePolicy": {"maxQuarantinesPerHour": 1}})
    recent = format_time(datetime.now(timezone.utc) - timedelta(minutes=10))
    status = TrainingJobStatus.model_validate({"infrastructureRestarts": 1, "quarantines": [{"node": "old", "verdict": "hardware-suspect", "time": recent}], "avoidNodes": ["old"]})
    env = {e["name"]: e["value"] for e in supervisor.supervisor_env(policy, status)}
    counters = recovery.Counters.from_status(json.loads(env[supervisor.ENV_SPENT]))
    assert (counters.infrastructure_restarts, [q["node"] for q in counters.quarantines], counters.avoid) == (1, ["old"], ("old",))
    c = Coordinator(3, policy, counters, inplace.Ledger(restarts=2))
    for r in range(3):
        c.state(r, node=f"n{r}", now=0.0)
    c.state(spare="spare-0", node="s", now=0.0)
    beat(c, [0, 1, 2], ["spare-0"], t=1.0)
    hardware_report(c, 1, "n1")
    stopped(c, [0, 2])
    d = c.step(now=1.5)
    assert (d["path"], d["reason"]) == (inplace.PATH_NONE, "QuarantineLimitExceeded"), d
    assert c.final and c.holders == {}
    successor = Coordinator.successor(json.loads(json.dumps(c.view(now=1.6))), 3, policy, host=2, heard=1.6, now=2.0)
    assert successor.counters == c.counters  # the copy every supervisor keeps carries the history to a successor


@pytest.mark.parametrize("value,seconds", [("2", 2.0), ("", LOST_SECONDS), ("0.2", LOST_SECONDS), ("soon", LOST_SECONDS), ("600", 600.0)])
def test_the_lost_rank_silence_is_the_jobs_setting_within_its_range(value, seconds):
    """``RAILTRAIN_SUPERVISOR_LOST_SECONDS`` (spec.env, the same in every pod) sets how long a silent rank waits before a
    spare takes it; a value the manifest check would refuse falls back to the default."""
    from railtrain.crds import supervisor

    assert supervisor.lost_after({supervisor.ENV_LOST: value}) == seconds
    c = Coordinator(2, POLICY, recovery.Counters(), inplace.Ledger(), lost_seconds=supervisor.lost_after({supervisor.ENV_LOST: "2"}))
    for r in range(2):
        c.state(r, node=f"n{r}", now=0.0)
    c.state(0, now=2.5)
    assert list(c.lost(2.5)) == [1] and not gang(2, spares=()).lost(2.5)  # silent 2.5 s: lost at 2 s, not at the default 5 s


def test_a_supervisor_tunable_out_of_range_is_refused_with_one_sentence(tmp_path):
    import subprocess
    import sys

    from railtrain.crds import supervisor
    from tests.cli import manifests

    path = manifests.write(tmp_path / "job.yaml", manifests.job(env=[{"name": supervisor.ENV_LOST, "value": "0"}]))
    proc = subprocess.run([sys.executable, "-m", "railtrain.cli.main", "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and supervisor.TUNABLE_MESSAGE in proc.stderr + proc.stdout and "Traceback" not in proc.stderr, proc.stderr


def stepping(c, start, end, every=0.2, ranks=(), spares=()):
    """The host's loop: step every ``every`` s from ``start`` to ``end``, the given ranks and spares asking each time."""
    t = start
    while t <= end + 1e-9:
        beat(c, ranks, spares, t=t)
        assert c.step(now=t) is None, t
        t = round(t + every, 6)


def test_a_stall_of_the_host_itself_is_nobodys_silence_and_a_lost_rank_is_still_found_after_it():
    """Stops 43, 44 and 47 (tests/cli/test_local_spares.py, under load): a rank was given to a spare although its
    supervisor asked all along; the coordinator's own process had not run for seconds, and its next step counted
    that time as every rank's silence. With ``stall_seconds``, the excess of a gap between two steps over it is
    forgiven. (On the old code, the step after the 6 s stall finds ranks 1 and 2 lost and the spare is given one.)"""
    c = gang(stall_seconds=STALL_SECONDS)
    stepping(c, 0.0, 2.0, ranks=[0, 1, 2], spares=["spare-0"])
    # the host stalls from 2.0 to 8.0: no step, no ask answered; then all the queued asks are served at once
    assert c.step(now=8.0) is None and c.lost(8.0) == {} and not c.state(0, now=8.0)["failed"]
    beat(c, [1, 2], ["spare-0"], t=8.05)
    stepping(c, 8.2, 12.0, ranks=[0, 1, 2], spares=["spare-0"])
    assert not c.state(0, now=12.0)["failed"] and c.holders == {}
    # rank 2 really falls silent at 12.0: found once its silence passes LOST_SECONDS of the coordinator's listening
    stepping(c, 12.2, 12.0 + LOST_SECONDS, ranks=[0, 1], spares=["spare-0"])
    assert c.lost(12.0 + LOST_SECONDS) == {}
    beat(c, [0, 1], ["spare-0"], t=12.0 + LOST_SECONDS + 0.4)
    c.step(now=12.0 + LOST_SECONDS + 0.4)
    assert set(c.lost(12.0 + LOST_SECONDS + 0.4)) == {2}


def test_a_host_whose_steps_are_merely_slow_still_finds_a_lost_rank():
    """Only the excess over ``stall_seconds`` is forgiven: steps every 1.5 s (each gap 0.5 s over) still find rank 2
    silent, within 3 × LOST_SECONDS."""
    c = gang(stall_seconds=STALL_SECONDS)
    t, found = 0.0, None
    while t < 3 * LOST_SECONDS and found is None:
        t += 1.5
        beat(c, [0, 1], ["spare-0"], t=t)
        c.step(now=t)
        found = t if 2 in c.lost(t) else None
    assert found is not None and found > LOST_SECONDS, found


def test_without_stall_seconds_every_gap_counts_as_listening():
    """A caller that steps at times of its own (the other pure tests): a long gap is silence, as before."""
    c = gang()
    assert c.step(now=0.0) is None
    c.step(now=LOST_SECONDS + 1)
    assert set(c.lost(LOST_SECONDS + 1)) == {0, 1, 2}
