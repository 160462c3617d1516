"""Issue 26 on the real control plane: a Node deleted and created again under the same name is a lost node (item 3),
and a waiting job holds no rendezvous Service, which comes with its gang (item 8)."""

from __future__ import annotations

import os
import signal

import pytest
from kubernetes.client.exceptions import ApiException

from tests.polling import wait_for

from .clusterkit import G, P, V, start_running, all_running, condition, events, events_with, job_body, job_status, observe, phase_is, pods_of

pytestmark = pytest.mark.cluster


start = start_running


def recreate(core, name):
    """Delete Node ``name`` and create it again under the same name at once (a reinstalled machine, a cloud node
    replaced under its name): the new object has a new uid."""
    node = core.api_client.sanitize_for_serialization(core.read_node(name))
    meta = node["metadata"]
    fresh = {"apiVersion": "v1", "kind": "Node", "metadata": {k: meta[k] for k in ("name", "labels", "annotations") if k in meta},
             "spec": {k: v for k, v in node["spec"].items() if k != "providerID"}, "status": node.get("status") or {}}
    core.delete_node(name)
    wait_for(lambda: _gone(core, name), 10, f"node {name} gone")
    created = core.create_node(fresh)
    assert created.metadata.uid != meta["uid"]
    return meta["uid"], created.metadata.uid


def _gone(core, name):
    try:
        core.read_node(name)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def test_a_node_created_again_under_the_same_name_is_lost_and_the_gang_restarts(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(3)
    pods = start(core, custom, namespace, "reborn", 2, runPolicy={"backoffLimit": 0})
    victim = pods[0].spec.node_name
    # Freeze the operator around the replacement, so it sees only the node as it is after it: the same name, Ready,
    # and another uid (within the ~1 s window of the report, a reconcile that runs between the two never happens).
    os.kill(operator.proc.pid, signal.SIGSTOP)
    try:
        old_uid, new_uid = recreate(core, victim)
    finally:
        os.kill(operator.proc.pid, signal.SIGCONT)
    old = {p.metadata.uid for p in pods}
    # The whole gang is replaced (whether the re-created node runs the new rank 0 is KWOK's matter, not the operator's).
    wait_for(lambda: new_gang(core, namespace, "reborn", 2, old), 30, "a new gang: every rank a new pod")
    status = job_status(custom, namespace, "reborn")
    assert status["infrastructureRestarts"] == 1 and status.get("jobRestarts", 0) == 0
    lost = [e.message for e in events_with(core, namespace, "reborn", "NodeLost")["NodeLost"]]
    # The watch may deliver the DELETED event before the ADDED one after the operator resumes; a reconcile between
    # them sees the node gone. Either way the lost node is named and the gang replaced; the uid rule itself is the
    # pure tests/operator/test_node_identity.py's.
    assert lost and (
        (f"node {victim}: the Node was deleted and created again under the same name (uid {old_uid}" in lost[0] and new_uid in lost[0])
        or f"node {victim}: the Node was deleted" in lost[0]
    ), lost


def new_gang(core, ns, name, count, old_uids):
    """The job's pods when there are ``count``, none terminating and none of ``old_uids``, else None."""
    found = pods_of(core, ns, name)
    ok = len(found) == count and all(p.metadata.uid not in old_uids and not p.metadata.deletion_timestamp for p in found)
    return found if ok else None


def service_of(core, ns, name):
    """The job's rendezvous Service's uid, or None when it does not exist."""
    try:
        return core.read_namespaced_service(name, ns).metadata.uid
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_a_waiting_job_has_no_service_and_gets_it_with_its_gang(api, namespace, gpu_nodes, operator):
    core, custom = api
    gpu_nodes(1)
    start(core, custom, namespace, "holder", 1)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("queued", nodes=1))
    wait_for(lambda: (c := condition(job_status(custom, namespace, "queued"), "Scheduled")) and c["status"] == "False", 30, "queued refused")
    assert observe(lambda: service_of(core, namespace, "queued"), 3) == [None]  # three resyncs of the operator: never created
    wait_for(lambda: service_of(core, namespace, "holder"), 10, "holder's Service, created with its gang")
    custom.delete_namespaced_custom_object(G, V, namespace, P, "holder")
    wait_for(lambda: all_running(core, namespace, "queued", 1), 60, "queued Running once the node is free")
    wait_for(lambda: service_of(core, namespace, "queued"), 10, "queued's Service, created with its gang")  # the pass queues the ranks before it


def test_a_suspended_job_gives_its_service_back_and_gets_it_with_its_next_gang(api, namespace, gpu_nodes, operator):
    """Suspending a running job stops its gang: once its pods are gone it holds no node, and no Service either."""
    core, custom = api
    gpu_nodes(1)
    start(core, custom, namespace, "paused", 1)
    wait_for(lambda: service_of(core, namespace, "paused"), 10, "paused's Service, created with its gang")
    custom.patch_namespaced_custom_object(G, V, namespace, P, "paused", {"spec": {"runPolicy": {"suspend": True}}})
    wait_for(lambda: service_of(core, namespace, "paused") is None, 30, "the suspended job's Service deleted")
    custom.patch_namespaced_custom_object(G, V, namespace, P, "paused", {"spec": {"runPolicy": {"suspend": False}}})
    wait_for(lambda: all_running(core, namespace, "paused", 1), 60, "resumed Running")
    wait_for(lambda: service_of(core, namespace, "paused"), 10, "the resumed gang's Service")  # the pass queues the ranks before it
