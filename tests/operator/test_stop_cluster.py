"""SIGTERM and SIGINT stop the operator process within 10 s, its Lease given up and its jobs left for the next operator (issue 15, kind 10)."""

from __future__ import annotations

import signal
import socket
import time

import pytest
from kubernetes.client.rest import ApiException

from railtrain.operator import lease
from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, job_body, job_status, phase_is, pods_of

pytestmark = pytest.mark.cluster


def lease_holder(kube) -> str | None:
    try:
        held = kube.coordination.read_namespaced_lease(lease.LEASE_NAME, "default")
    except ApiException as err:
        if err.status == 404:  # not taken yet
            return None
        raise
    return held.spec.holder_identity if held.spec else None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_operator_within_10_s_giving_up_its_lease_and_leaving_its_jobs_to_the_next(kube, api, namespace, gpu_nodes, operator, sig):
    core, custom = api
    gpu_nodes(2)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("steady", nodes=2))
    wait_for(lambda: phase_is(custom, namespace, "steady", "Running"), 90, "the job Running")
    pods = {p.metadata.name: p.metadata.uid for p in all_running(core, namespace, "steady", 2)}
    me = f"{socket.gethostname()}/{operator.proc.pid}"
    wait_for(lambda: lease_holder(kube) == me, 30, "the operator holding its Lease")

    mark = len(operator.log_path.read_text(errors="replace"))
    began = time.monotonic()
    status = operator.interrupt(sig, timeout=10)
    took = time.monotonic() - began
    assert status == 0, f"still running 10 s after {sig.name} (killed), or exit status {status}:\n{operator.tail()}"
    assert took < 10
    assert lease_holder(kube) is None  # given up: the next operator is not warned about this one
    assert "Traceback" not in operator.log_path.read_text(errors="replace")[mark:]

    before = job_status(custom, namespace, "steady")
    operator.start()  # the next operator takes over the same gang: no restart, the same pods
    wait_for(lambda: lease_holder(kube) == f"{socket.gethostname()}/{operator.proc.pid}", 30, "the next operator holding the Lease")
    after = wait_for(lambda: phase_is(custom, namespace, "steady", "Running"), 30, "the job still Running")
    assert after.get("restarts", 0) == before.get("restarts", 0) == 0
    assert {p.metadata.name: p.metadata.uid for p in pods_of(core, namespace, "steady")} == pods
    assert "another railtrain operator" not in operator.log_path.read_text(errors="replace")[mark:]
