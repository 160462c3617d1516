"""Issue 26, items 1 and 2, on the real control plane: a leader frozen and resumed writes nothing, a status decided
on a stale read is refused, and a frozen API server is noticed by the deadlines of the operator's calls.

Item 1's input: two operators, a few free nodes; the leader is frozen (SIGSTOP) mid-pass until the standby takes
the Lease, then resumed and a 1-node job submitted: the old leader posted GangPlaced/GangCreated for the job the new
leader also admitted. Item 2's input: the API server frozen under a running operator: no Lease loss was logged and
``--unreachable-seconds`` never fired, because no call had a deadline.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from kubernetes import client

from railtrain.cli.controlplane.cluster import LocalCluster
from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import contract, times
from railtrain.operator.reconciler import Reconciler
from railtrain.operator import lease
from railtrain.operator.kube.verbs import Kube
from tests.polling import wait_for

from .clusterkit import all_running, events, job_body, job_obj, observe, phase_is, pods_of

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 4
"""A short Lease keeps the test short: takeover within ~4.5 s, a renew deadline of 2.7 s (two thirds)."""


def identity(op: OperatorProcess) -> str:
    """The holderIdentity an operator process writes into the Lease (operator/context.py: ``host/pid``)."""
    return f"{socket.gethostname()}/{op.proc.pid}"


def read_lease(coordination: client.CoordinationV1Api, namespace: str) -> dict:
    return coordination.api_client.sanitize_for_serialization(coordination.read_namespaced_lease(lease.LEASE_NAME, namespace))


def holder(coordination: client.CoordinationV1Api, namespace: str) -> str | None:
    """The live holder of the test's Lease now, or None."""
    try:
        return lease.holder(read_lease(coordination, namespace), datetime.now(timezone.utc))
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def expires(coordination: client.CoordinationV1Api, namespace: str) -> float:
    """When (time.monotonic()) the Lease expires unless renewed: its renewTime + leaseDurationSeconds, by this host's clock."""
    spec = read_lease(coordination, namespace)["spec"]
    end = times.parse_time(spec["renewTime"]) + timedelta(seconds=int(spec["leaseDurationSeconds"]))
    return time.monotonic() + (end - datetime.now(timezone.utc)).total_seconds()


def said(op: OperatorProcess, words: str) -> bool:
    return words in op.log_path.read_text(errors="replace")


def writes_seen(core, custom, namespace: str, names: list[str]) -> tuple:
    """What a writer could have changed: per job its resourceVersion, its pods and its Events (by reason)."""
    out = []
    for name in names:
        try:
            rv = job_obj(custom, namespace, name)["metadata"]["resourceVersion"]
        except client.ApiException as err:
            if err.status != 404:
                raise
            rv = None
        pods = tuple(sorted(p.metadata.uid for p in pods_of(core, namespace, name)))
        reasons = tuple(sorted(e.reason for e in events(core, namespace, name)))
        out.append((name, rv, pods, reasons))
    return tuple(out)


def test_a_leader_frozen_mid_pass_and_resumed_writes_nothing_while_another_holds_the_lease(
    cluster, api, kube, namespace, gpu_nodes, operator_process, submit, tmp_path
):
    """Each round: submit a job and freeze the leader mid-pass (round 0: as the job is created, while its event is
    being handled; round 1: as soon as its admission record is written, before its pod and Events), let the standby
    take the Lease and finish the job, freeze the new leader too (so that every write seen comes from the old one),
    submit a second job and resume the old leader. Until the new leader's Lease expires, neither job changes: no
    status write, no pod, no Event. Afterwards the resumed operator may lead again, and each job ends with its one pod."""
    operator_process.stop()  # the session's cluster-wide operator would act on this namespace too (`operator` restarts it)
    core, custom = api
    coordination = kube.coordination
    gpu_nodes(4, gpus_per_node=8)

    def start(name: str) -> OperatorProcess:
        op = OperatorProcess(
            Path(cluster.kubeconfig), tmp_path / f"{name}.log", namespace=namespace, resync_seconds=1,
            extra_args=("--topology-preset", "railtrain", "--lease-namespace", namespace, "--lease-seconds", str(LEASE_SECONDS)),
        )
        op.start()
        return op

    a = start("a")
    b = None
    stopped: list[OperatorProcess] = []
    try:
        wait_for(lambda: a.check() or holder(coordination, namespace) == identity(a), 60, "operator a to lead")
        b = start("b")
        wait_for(lambda: b.check() or said(b, "standing by: the Lease"), 60, "operator b to stand by")
        for round_ in range(2):
            current = wait_for(lambda: holder(coordination, namespace), 3 * LEASE_SECONDS, "a holder of the Lease")
            old = a if current == identity(a) else b
            new = b if old is a else a
            mid, late = f"mid-{round_}", f"late-{round_}"
            submit(job_body(mid, nodes=1))
            if round_ == 1:
                wait_for(lambda: (job_obj(custom, namespace, mid).get("status") or {}).get("admission"), 30, "the leader to record the admission", interval=0.01)
            os.kill(old.proc.pid, signal.SIGSTOP)  # mid-pass
            stopped.append(old)
            wait_for(lambda: holder(coordination, namespace) == identity(new), 3 * LEASE_SECONDS, "the standby to take the Lease")
            wait_for(lambda: all_running(core, namespace, mid, 1) and phase_is(custom, namespace, mid, "Running"), 60, "the new leader to run the job")
            rv = lambda: job_obj(custom, namespace, mid)["metadata"]["resourceVersion"]  # noqa: E731
            wait_for(lambda: len(observe(rv, 1.0)) == 1, 30, "the new leader's writes of the job to settle", interval=0)
            os.kill(new.proc.pid, signal.SIGSTOP)  # from here on, a write can only come from the old leader
            stopped.append(new)
            until = expires(coordination, namespace) - 0.3
            submit(job_body(late, nodes=1))
            before = writes_seen(core, custom, namespace, [mid, late])
            os.kill(old.proc.pid, signal.SIGCONT)
            stopped.remove(old)
            seen = []
            while time.monotonic() < until:  # an observation window: nothing may change while the frozen operator's Lease is live
                seen.append(writes_seen(core, custom, namespace, [mid, late]))
                assert seen[-1] == before, f"the resumed operator wrote while another held the Lease:\nbefore {before}\nafter  {seen[-1]}\n{old.tail()}"
                time.sleep(0.2)
            assert len(seen) >= 3, "the window was too short to observe anything"
            os.kill(new.proc.pid, signal.SIGCONT)
            stopped.remove(new)
            wait_for(lambda: all_running(core, namespace, late, 1), 60, f"an operator to admit {late} once the Lease lapsed")
        for op in (a, b):
            op.check()
            assert "Traceback" not in op.log_path.read_text(errors="replace"), op.tail()
        for name in ("mid-0", "late-0", "mid-1", "late-1"):  # one gang each: nothing admitted twice
            assert len(pods_of(core, namespace, name)) == 1
    finally:
        for op in stopped:
            os.kill(op.proc.pid, signal.SIGCONT)
        for op in (a, b):
            if op is not None:
                op.stop()


class StaleRead(Kube):
    """A leader whose view of one job lags: it plans on the job as it read it earlier (a cache its watch has not
    updated yet, or a leader frozen between its read and its write), whatever the API server holds now."""

    def __init__(self, api_client, job: dict):
        super().__init__(api_client)
        self.job = job

    def read_job(self, namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.job)

    def get_job(self, namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.job)

    def list_job_pods(self, namespace: str, name: str) -> list[dict]:
        return []  # as read with the job: none yet

    def get_service(self, namespace: str, name: str) -> dict | None:
        return None  # none yet either


def test_a_status_decided_on_a_stale_read_is_refused_with_409_and_nothing_after_it_is_written(
    cluster, api, namespace, gpu_nodes, operator_process, submit
):
    """Two writers, no operator process: one admits the job on a fresh read; the other decides on the job as it read
    it before, and its status write carries that resourceVersion: the API server answers 409 Conflict, the admitted
    status stays as written, and the stale decision posts no Event and creates no pod."""
    operator_process.stop()  # this test plays both writers
    core, custom = api
    gpu_nodes(1, gpus_per_node=8)
    submit(job_body("j", nodes=1))
    fresh = Kube(cluster.api_client())
    stale = StaleRead(cluster.api_client(), fresh.get_job(namespace, "j"))
    Reconciler(fresh, namespace=namespace).reconcile_job(namespace, "j", admit=True)  # the leader admits the job
    admitted = wait_for(lambda: job_obj(custom, namespace, "j").get("status", {}).get("admission") and job_obj(custom, namespace, "j"), 30, "the admission record")
    reasons = sorted(e.reason for e in events(core, namespace, "j"))
    service_uid = core.read_namespaced_service(contract.service_name("j"), namespace).metadata.uid
    plan = Reconciler(stale).reconcile_job(namespace, "j", admit=False)  # the stale writer: the job as it was before any status
    assert plan is not None and plan.status_changed  # it did decide to write a first status
    now = job_obj(custom, namespace, "j")
    assert now["metadata"]["resourceVersion"] == admitted["metadata"]["resourceVersion"], "the stale status was written"
    assert now["status"] == admitted["status"]
    assert sorted(e.reason for e in events(core, namespace, "j")) == reasons
    assert len(pods_of(core, namespace, "j")) == 1
    assert core.read_namespaced_service(contract.service_name("j"), namespace).metadata.uid == service_uid


def test_a_frozen_api_server_loses_the_lease_within_its_duration_and_stops_the_operator(tmp_path):
    """The API server stopped (SIGSTOP) under a leading operator: every call it makes has a deadline, so it says
    "no longer leading" within the Lease duration and stops with exit status 1 after ``--unreachable-seconds``.
    Its own control plane: freezing the session's would stall every other test."""
    local = LocalCluster(f"freeze-{uuid.uuid4().hex[:6]}")
    local.start(owner_pid=os.getpid())
    apiserver = None
    op = OperatorProcess(
        Path(local.kubeconfig), tmp_path / "operator.log", resync_seconds=1,
        extra_args=("--lease-seconds", str(LEASE_SECONDS), "--unreachable-seconds", "6"),
    )
    try:
        local.install_crds(sorted((REPO / "crds").glob("*.yaml")))
        op.start()
        wait_for(lambda: op.check() or said(op, "leading: this operator"), 60, "the operator to lead")
        apiserver = local.pids()["kube-apiserver"]
        os.kill(apiserver, signal.SIGSTOP)
        frozen = time.monotonic()
        wait_for(lambda: said(op, "no longer leading"), LEASE_SECONDS + 2, "the operator to give up the Lease it cannot renew")
        lost = time.monotonic() - frozen
        # --unreachable-seconds (6 s) after the first failed pass; a pass caught mid-call by the freeze first waits for
        # that call's deadline (--request-seconds, default 30 s), and the stop itself may take up to 8 s.
        wait_for(lambda: not op.running(), 6 + 30 + 8 + 6, "--unreachable-seconds to stop the operator")
        stopped = time.monotonic() - frozen
        print(f"API server frozen: Lease given up after {lost:.1f} s, operator stopped after {stopped:.1f} s")
        assert op.proc.returncode == 1, op.tail()
        lines = op.log_path.read_text(errors="replace").splitlines()
        assert "Traceback" not in "\n".join(lines)
        assert any("has not answered for" in line and "the operator stops" in line for line in lines[-3:]), op.tail()
    finally:
        if apiserver is not None:
            os.kill(apiserver, signal.SIGCONT)
        op.stop()
        local.stop()
