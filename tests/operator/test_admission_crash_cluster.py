"""An operator SIGKILLed between recording a gang's admitted placement and creating its pods, on the real control plane.

The first "operator" is a child process running the real controller against the real API server; its pod creates
are cut after rank 0 by the process killing itself (SIGKILL), so the crash lands exactly between the status write
(``status.admission``) and the rest of the creates. Then an admission pass must count the recorded but uncreated
rank as taken (no double booking), and the restarted operator must create it pinned to its recorded node without
restarting the gang.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.operator.reconciler import Reconciler
from railtrain.operator.kube.verbs import Kube
from railtrain.operator.kube.connection import connect
from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, job_body, job_status, pods_of, refused

pytestmark = pytest.mark.cluster

CRASHING_OPERATOR = textwrap.dedent('''
    import os, signal, sys
    from railtrain.operator.kube.verbs import Kube
    from railtrain.operator.reconciler import Reconciler
    from railtrain.operator.kube.connection import connect

    kube = Kube(connect(sys.argv[1]).api)
    def create_one_then_die(manifests):
        if not manifests:  # the first reconcile creates nothing: the gang is not admitted yet
            return []
        kube.create(manifests[0])
        os.kill(os.getpid(), signal.SIGKILL)  # after the status write and one create: the rest never happen
    kube.create_many = create_one_then_die
    Reconciler(kube).reconcile_job(sys.argv[2], sys.argv[3])
''')


def test_an_operator_killed_after_recording_the_placement_recovers_without_double_booking(api, namespace, gpu_nodes, operator_process, cluster, tmp_path):
    core, custom = api
    nodes = set(gpu_nodes(3, gpus_per_node=8))
    operator_process.stop()  # this test runs its own operators
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("first", nodes=2, gpus=8, procs=8))
    child = subprocess.run([sys.executable, "-c", CRASHING_OPERATOR, str(cluster.kubeconfig), namespace, "first"], capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr[-2000:]
    record = job_status(custom, namespace, "first")["admission"]
    assert record["created"] is False and len(record["nodes"]) == 2 and set(record["nodes"]) <= nodes
    assert [p.metadata.name for p in pods_of(core, namespace, "first")] == ["first-0"]  # rank 1 exists only in the record

    # While no operator runs, a second gang of two asks for the cluster: only one node is free, the third is promised.
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("second", nodes=2, gpus=8, procs=8))
    kube = Kube(connect(str(cluster.kubeconfig)).api)
    Reconciler(kube).reconcile_job(namespace, "second", admit=False)
    decisions = {d.job: d.result for d in Reconciler(kube).admission_pass()}
    assert type(decisions[f"{namespace}/second"]).__name__ == "Refusal", decisions
    assert pods_of(core, namespace, "second") == [] and len(pods_of(core, namespace, "first")) == 1

    op = OperatorProcess(Path(cluster.kubeconfig), tmp_path / "restarted.log", resync_seconds=1, extra_args=("--topology-preset", "railtrain"))
    op.start()
    try:
        pods = wait_for(lambda: all_running(core, namespace, "first", 2), 90, "the restarted operator to create rank 1 and the gang to run")
        assert {p.metadata.name: p.spec.node_name for p in pods} == {"first-0": record["nodes"][0], "first-1": record["nodes"][1]}
        assert all(not p.spec.scheduling_gates for p in pods)
        status = wait_for(lambda: (s := job_status(custom, namespace, "first")).get("phase") == "Running" and s, 30, "first Running")
        assert status["restarts"] == 0 and status["admission"]["created"] is True  # recovered, not restarted
        wait_for(lambda: refused(custom, namespace, "second"), 30, "second refused by the restarted operator too")
        assert pods_of(core, namespace, "second") == []
    except AssertionError:
        print(f"---- restarted operator log tail ----\n{op.tail()}")
        raise
    finally:
        op.kill()
