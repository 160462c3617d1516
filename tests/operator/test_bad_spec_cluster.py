"""Finding 1 of the new-user trial on a real control plane with KWOK nodes: one job whose pods the API server refuses.

The bad job's pod template passes the CRD schema (a volume name is only
``type: string`` there) but not Pod validation (a volume name must be an RFC
1123 label), so creating its pods answers 422, as ``cpu: lots`` once answered
400 ("cannot be handled as a Pod"). That error used to end the operator's
periodic resync: the job stayed Pending with no condition, and a job waiting
for capacity was never admitted when the capacity was freed. Now the bad job
fails alone (PodRejected, Warning Event) and the others are admitted,
including the one admitted only by the resync after capacity frees.
"""

from __future__ import annotations

import pytest

from .clusterkit import G, P, V, all_running, condition, events, finish, job_body, job_status, phase_is, pods_of
from tests.polling import wait_for

pytestmark = pytest.mark.cluster


def bad_template():
    return {"spec": {"volumes": [{"name": "Scratch_Vol", "emptyDir": {}}],
                     "containers": [{"name": "trainer", "volumeMounts": [{"name": "Scratch_Vol", "mountPath": "/scratch"}]}]}}


def test_a_job_whose_pods_are_refused_fails_alone_and_waiting_jobs_are_admitted_when_capacity_frees(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(2, gpus_per_node=8)
    submit(job_body("bad", nodes=1, template=bad_template()))  # first in the queue

    def rejected():
        status = job_status(custom, namespace, "bad")
        c = condition(status, "Failed")
        return c if status.get("phase") == "Failed" and c and c["reason"] == "PodRejected" else None

    c = wait_for(rejected, 60, "the bad job to fail with PodRejected")
    assert "refused Pod bad-0 (422)" in c["message"] and "Scratch_Vol" in c["message"], c["message"]
    # the Event is posted just after the status write the test saw
    wait_for(lambda: any(e.type == "Warning" and e.reason == "PodRejected" and "Scratch_Vol" in e.message for e in events(core, namespace, "bad")), 30, "the PodRejected Event")
    assert pods_of(core, namespace, "bad") == []

    submit(job_body("first", nodes=2))
    wait_for(lambda: all_running(core, namespace, "first", 2), 60, "the first job to run on both nodes")
    submit(job_body("later", nodes=2))
    wait_for(lambda: (condition(job_status(custom, namespace, "later"), "Scheduled") or {}).get("status") == "False", 60, "the later job to wait for capacity")

    custom.delete_namespaced_custom_object(G, V, namespace, P, "bad")
    finish(core, namespace, "first")  # its ranks exit 0: both nodes are free again
    wait_for(lambda: phase_is(custom, namespace, "first", "Succeeded"), 60, "the first job to succeed")
    wait_for(lambda: all_running(core, namespace, "later", 2), 60, "the later job to be admitted on the freed nodes (by the resync)")
    assert operator.running()
    log = operator.log_path.read_text(errors="replace")
    assert "Traceback" not in log, operator.tail()
