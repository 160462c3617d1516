"""Sidecars on a real control plane: a rank is done when its trainer container exited 0, whatever its sidecars do (issue 15, kind 2).

KWOK's stage ``railtrain-trainer-exited`` (cli/controlplane/stages.yaml) ends
only the ``trainer`` container of a pod labelled ``railtrain.dev/kwok-trainer-exit``;
the metrics-exporter sidecar and the native log-shipper sidecar keep running,
and so does the pod, as a kubelet would report it.
"""

from __future__ import annotations

import pytest

from railtrain.cli.controlplane import LABEL_KWOK_TRAINER_EXIT
from tests.polling import wait_for

from .clusterkit import all_running, condition, job_body, phase_is, pods_of

pytestmark = pytest.mark.cluster

SIDECARS = {"spec": {
    "containers": [{"name": "metrics-exporter", "image": "exporter:1", "command": ["sleep", "infinity"]}],
    "initContainers": [{"name": "log-shipper", "image": "shipper:1", "restartPolicy": "Always"}],
}}


def test_trainers_that_exited_0_complete_the_job_while_a_sidecar_runs_forever_and_the_pods_are_ended(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(2)
    submit(job_body("exporting", nodes=2, template=SIDECARS))
    wait_for(lambda: phase_is(custom, namespace, "exporting", "Running"), 90, "the job Running")
    for p in all_running(core, namespace, "exporting", 2):
        core.patch_namespaced_pod(p.metadata.name, namespace, {"metadata": {"labels": {LABEL_KWOK_TRAINER_EXIT: "0"}}})

    # Only the trainers end (KWOK keeps the sidecars running); the operator may delete the pods within
    # milliseconds of seeing that, so the test does not try to observe the state in between.
    status = wait_for(lambda: phase_is(custom, namespace, "exporting", "Succeeded"), 60, "phase Succeeded")
    assert condition(status, "Succeeded")["status"] == "True" and status.get("restarts", 0) == 0
    # The operator ends the pods: their sidecars would hold the GPUs forever.
    wait_for(lambda: all(p.metadata.deletion_timestamp for p in pods_of(core, namespace, "exporting")), 60, "the pods deleted")
