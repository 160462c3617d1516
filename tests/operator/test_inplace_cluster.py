"""In-place restarts counted by the operator on a real control plane (KWOK pods run no process, so the tests end
pods with what the pod-side supervisor leaves: the last verdict plus the gang's in-place ledger in the termination
message): the supervisor is the pods' entry, in-place restarts spend the one job-wide budget before the gang
decision, an escalation restarts the gang, and a budget spent by in-place restarts alone fails the job."""

from __future__ import annotations

import json

import pytest

from railtrain.crds import contract, inplace, launcher, recovery, supervisor
from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, end_pod, events, job_body, job_status, phase_is, pods_of

pytestmark = pytest.mark.cluster


def supervised_end(core, ns, name, ledger, failing=1):
    """End the gang as its supervisors do after a final decision: the failing rank with its verdict, the others stopped."""
    verdict = contract.format_termination_message(contract.VERDICT_RETRYABLE, "Crash", "segfault")
    for p in pods_of(core, ns, name):
        rank = int(p.metadata.labels[contract.LABEL_NODE_RANK])
        end_pod(core, ns, p.metadata.name, 3 if rank == failing else 1, inplace.with_ledger(verdict if rank == failing else None, ledger, stopped=rank != failing))


def test_in_place_restarts_spend_the_job_budget_escalate_and_exhaust_it(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(4)
    policy = {"restartInPlace": True, "restartBackoffSeconds": 0}
    for name, limit in (("esc", 3), ("spent", 2)):
        custom.create_namespaced_custom_object(G, V, namespace, P, job_body(name, runPolicy=policy | {"backoffLimit": limit}))
    pods = {n: wait_for(lambda n=n: all_running(core, namespace, n, 2), 90, f"{n} Running") for n in ("esc", "spent")}
    trainer = next(c for c in pods["esc"][0].spec.containers if c.name == "trainer")
    assert tuple(trainer.command[: len(launcher.SUPERVISOR)]) == launcher.SUPERVISOR  # the supervisor is the entry
    assert json.loads(next(e.value for e in trainer.env if e.name == supervisor.ENV_SPENT)) == recovery.Counters().spent()  # nothing spent, no history

    # esc: one in-place restart, then its attempt failed again: the supervisors escalated; the operator counts both
    supervised_end(core, namespace, "esc", inplace.Ledger(restarts=0, attempt=1, job=1, causes={"retryable": 1}, streak=1))
    # spent: two in-place restarts spent backoffLimit 2, the third failure fails the job
    supervised_end(core, namespace, "spent", inplace.Ledger(restarts=0, attempt=2, job=2, causes={"retryable": 2}, streak=2))

    st = wait_for(lambda: (s := job_status(custom, namespace, "esc")).get("restarts") == 1 and s, 60, "esc: a gang restart")
    assert (st["jobRestarts"], st["inPlaceRestarts"], st["inPlace"]["attempt"]) == (2, 1, 1)

    def seen():
        r = {e.reason: e.message for e in events(core, namespace, "esc")}
        return r if {"InPlaceRestart", "Restarting"} <= set(r) else None

    reasons = wait_for(seen, 30, "esc: the InPlaceRestart and Restarting Events")
    assert "in place 1 time(s) (retryable 1)" in reasons["InPlaceRestart"] and "job restarts 1/3" in reasons["InPlaceRestart"]
    assert reasons["Restarting"].startswith("rank 1 exited with code 3: Crash: segfault; restarting the whole gang (job restarts 2/3")
    new = wait_for(lambda: all_running(core, namespace, "esc", 2, {p.metadata.uid for p in pods["esc"]}), 90, "esc: the new gang Running")
    env = next(c for c in new[0].spec.containers if c.name == "trainer").env
    assert json.loads(next(e.value for e in env if e.name == supervisor.ENV_SPENT))["jobRestarts"] == 2  # the next gang's supervisors start from there

    wait_for(lambda: phase_is(custom, namespace, "spent", "Failed"), 60, "spent: Failed")
    st = job_status(custom, namespace, "spent")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and failed["message"].startswith("rank 1 exited with code 3: Crash: segfault; runPolicy.backoffLimit=2")
    assert (st["jobRestarts"], st["inPlaceRestarts"], st.get("restarts", 0)) == (2, 2, 0)
    assert all(int(p.metadata.annotations[contract.ANNOTATION_RESTART]) == 0 for p in pods_of(core, namespace, "spent"))  # nothing restarted after
