"""The operator's Kueue defaults on the real control plane (issue 28): ``--kueue-only`` refuses a job that names no
LocalQueue, and ``--kueue-default-queue`` gives such a job the platform's LocalQueue, so railtrain's own queue admits
neither. No Kueue runs here: both are decided before a Workload exists (the Workload path is tests/kueue's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import kueue as names
from railtrain.operator.job.admit import QUEUE_REQUIRED
from tests.polling import wait_for

from .clusterkit import G, P, V, events_with, job_body, job_obj, observe, pods_of, refused

pytestmark = pytest.mark.cluster


def test_kueue_only_refuses_an_unlabelled_job_and_a_default_queue_labels_it_before_any_admission(
    cluster, api, namespace, gpu_nodes, operator_process, tmp_path
):
    operator_process.stop()  # the session's cluster-wide operator would admit these jobs itself (`operator` restarts it)
    core, custom = api
    gpu_nodes(2, gpus_per_node=8)

    def start(name: str, *flags: str) -> OperatorProcess:
        op = OperatorProcess(
            Path(cluster.kubeconfig), tmp_path / f"{name}.log", namespace=namespace, resync_seconds=1,
            extra_args=("--topology-preset", "railtrain", "--lease-namespace", namespace, *flags),
        )
        op.start()
        return op

    only = start("only", "--kueue-only")
    try:
        custom.create_namespaced_custom_object(G, V, namespace, P, job_body("bare", nodes=1))
        c = wait_for(lambda: refused(custom, namespace, "bare", "QueueNameRequired"), 60, "Scheduled=False QueueNameRequired")
        assert c["message"] == QUEUE_REQUIRED and names.QUEUE_LABEL in c["message"]
        events_with(core, namespace, "bare", "QueueNameRequired", where=lambda e: e.type == "Warning")
        assert observe(lambda: len(pods_of(core, namespace, "bare")), 2) == [0]  # nothing created, across resyncs
    finally:
        only.stop()

    default = start("default", "--kueue-default-queue", "team-a")
    try:
        custom.create_namespaced_custom_object(G, V, namespace, P, job_body("plain", nodes=1))
        labels = wait_for(lambda: (job_obj(custom, namespace, "plain")["metadata"].get("labels") or {}).get(names.QUEUE_LABEL), 60, "the default queue's label")
        assert labels == "team-a"
        # The already refused job is labelled too (it was never admitted) and waits for Kueue now, as the new one does.
        assert wait_for(lambda: (job_obj(custom, namespace, "bare")["metadata"].get("labels") or {}).get(names.QUEUE_LABEL), 30, "bare labelled") == "team-a"
        for name in ("plain", "bare"):
            wait_for(lambda name=name: refused(custom, namespace, name, "WaitingForKueue"), 60, f"{name}: Scheduled=False WaitingForKueue")
        assert observe(lambda: len(pods_of(core, namespace, "plain")) + len(pods_of(core, namespace, "bare")), 2) == [0]  # railtrain's queue admits neither
    finally:
        default.stop()
