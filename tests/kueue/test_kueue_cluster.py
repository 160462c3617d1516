"""TrainingJobs admitted by stock Kueue v0.17.0 (a local process) through the external-framework protocol, on the real control plane.

One scene, lean: 4 KWOK nodes of 8 GPUs in 2 racks, a ClusterQueue with 16 GPUs of quota over them.
The first job is admitted and lands on the nodes of Kueue's topology assignment, in one rack, rail
aligned; the second waits on quota with Kueue's reason in its condition; a job naming a LocalQueue
that does not exist says so; deactivating the first job's Workload (an eviction) stops its whole gang,
frees the quota, and the second is admitted; a job of a higher WorkloadPriorityClass preempts it (its gang stops
whole, its quota is released to the urgent job); a job changed while it waits gets a new Workload; a finished job's
Workload is Finished and loses railtrain's finalizer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from railtrain.crds import kueue as names
from railtrain.crds import reasons
from railtrain.operator.job.workload import workload_name
from railtrain.operator.scheduling.kueue import expand
from tests.operator.clusterkit import G, P, V, all_running, condition, end_pod, events_with, finish, job_body, job_status, observe, pods_of
from tests.polling import wait_for

TAG = "railtrain.dev/kueue-test"


def kueue_job(name, queue, nodes=2):
    body = job_body(name, nodes=nodes, topology={"policy": "preferred", "level": "railtrain.dev/rack"})
    body["metadata"]["labels"] = {names.QUEUE_LABEL: queue}
    return body


def workload_of(custom, ns, name):
    """The Workload ``ns/name`` as stored, or None."""
    from kubernetes.client.rest import ApiException

    try:
        return custom.get_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.WORKLOADS, name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


HOLD = "railtrain.dev/test-hold"
"""A finalizer the tests put on a Workload to keep it in the API after its deletion, as Kueue's own may for a while."""


def hold_workload(custom, ns, name, hold):
    """Add (``hold``) or remove the finalizer :data:`HOLD` on the Workload ``ns/name``, guarded by the version read.

    Kueue and the operator write the same Workload (its status, its admission) meanwhile: a write that lost to one of
    theirs (409 Conflict) reads the Workload again and tries again, until 30 s have passed (stop 48's fresh-clone run
    met the conflict once, as the test put its finalizer on)."""
    from kubernetes.client.rest import ApiException

    def write() -> bool:
        stored = workload_of(custom, ns, name)
        finalizers = [f for f in stored["metadata"].get("finalizers") or [] if f != HOLD] + ([HOLD] if hold else [])
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": stored["metadata"]["resourceVersion"]}}
        try:
            custom.patch_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.WORKLOADS, name, patch)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    wait_for(write, 30, f"the finalizer {HOLD} {'on' if hold else 'off'} Workload {ns}/{name} (no conflicting write)")


def describe(kubeconfig, ns, name):
    """``railtrain describe`` as a user runs it (a real process), its output with whitespace folded; it must exit 0."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "railtrain.cli.main", "describe", name, "-n", ns], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def evicted(custom, ns, name):
    """The Scheduled condition once Kueue's eviction stopped the job, else None (a ``wait_for`` check).

    Its reason is EvictedByKueue while the gang stops, then WaitingForKueue (the same "Kueue evicted ..." sentence)
    a fraction of a second later, once every pod is gone: a poll may see either.
    """
    found = condition(job_status(custom, ns, name), "Scheduled")
    ok = found and found.get("reason") in (reasons.EVICTED_BY_KUEUE, reasons.WAITING_FOR_KUEUE) and "Kueue evicted" in found.get("message", "")
    return found if ok else None


def scheduled(custom, ns, name, reason):
    """The Scheduled condition when its reason is ``reason``, else None (a ``wait_for`` check)."""
    found = condition(job_status(custom, ns, name), "Scheduled")
    return found if found and found.get("reason") == reason else None


def test_admitted_inside_kueues_assignment_waits_on_quota_and_stops_whole_when_evicted_or_preempted(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    core, custom = kube.core, kube.custom
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(4, labels={TAG: tag}, nodes_per_rack=2)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=16)

    custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("first", queue))
    bound = wait_for(lambda: (ps := pods_of(core, namespace, "first")) and len(ps) == 2 and all(p.spec.node_name for p in ps) and ps,
                     90, "the first job's two pods bound")
    job = custom.get_namespaced_custom_object(G, V, namespace, P, "first")
    wl_name = workload_name(job["metadata"])
    wl = custom.get_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.WORKLOADS, wl_name)
    levels, domains = expand(wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"])
    hosts = {values[levels.index("kubernetes.io/hostname")] for values, _ in domains}
    assert {p.spec.node_name for p in bound} == hosts  # the gang sits exactly on Kueue's assignment
    assert wl["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"] and names.FINALIZER in wl["metadata"]["finalizers"]
    for pod in bound:
        assert pod.metadata.annotations[names.WORKLOAD_ANNOTATION] == wl_name and pod.spec.node_selector[TAG] == tag
    status = wait_for(lambda: (s := job_status(custom, namespace, "first")).get("topology") and s, 30, "the first job's placement")
    assert status["topology"]["spread"]["railtrain.dev/rack"] == 1 and status["topology"].get("railAligned") is True

    custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("second", queue))
    custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("lost", "no-such-queue", nodes=1))
    waiting = wait_for(lambda: (c := scheduled(custom, namespace, "second", reasons.WAITING_FOR_KUEUE)) and "quota" in c["message"] and c,
                       60, "the second job waiting for Kueue's quota, with Kueue's reason")
    assert "insufficient unused quota for nvidia.com/gpu" in waiting["message"], waiting["message"]
    said = describe(local_kueue.cluster.kubeconfig, namespace, "second")
    assert f"(LocalQueue {queue}, ClusterQueue {queue})" in said and "Admission: pending: " in said, said
    assert "insufficient unused quota for nvidia.com/gpu" in said, said
    lost = wait_for(lambda: (c := scheduled(custom, namespace, "lost", reasons.WAITING_FOR_KUEUE)) and "doesn't exist" in c["message"] and c,
                    60, "the job naming a missing LocalQueue to say so, in Kueue's words")
    assert "LocalQueue no-such-queue doesn't exist" in lost["message"], lost["message"]
    assert pods_of(core, namespace, "second") == [] and pods_of(core, namespace, "lost") == []
    lost_wl = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "lost")["metadata"])
    custom.patch_namespaced_custom_object(G, V, namespace, P, "lost", {"spec": {"priority": 7}})  # changed while waiting: its Workload is replaced
    wait_for(lambda: (w := workload_of(custom, namespace, lost_wl)) and w["spec"].get("priority") == 7, 60, "the waiting job's Workload replaced")

    custom.patch_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.WORKLOADS, wl_name, {"spec": {"active": False}})
    stopped = wait_for(lambda: evicted(custom, namespace, "first"), 60, "the first job stopped by the eviction")
    assert "evicted" in stopped["message"]
    wait_for(lambda: all(p.metadata.deletion_timestamp for p in pods_of(core, namespace, "first")), 30, "every pod of the first gang deleted")
    wait_for(lambda: all_running(core, namespace, "second", 2), 90, "the second job admitted once the quota was freed, and Running")
    said = describe(local_kueue.cluster.kubeconfig, namespace, "first")
    assert f"Kueue: Workload {wl_name} (LocalQueue {queue}, ClusterQueue {queue})" in said and "Admission: evicted: " in said, said
    assert "Warning EvictedByKueue" in said, said  # the gang was stopped by the eviction: describe's Events show the Warning
    said = describe(local_kueue.cluster.kubeconfig, namespace, "second")
    assert f"Admission: admitted by ClusterQueue {queue}, flavor {queue} (nvidia.com/gpu), 2 pods on 2 assigned hosts" in said, said

    urgent = kueue_job("urgent", queue)
    urgent["metadata"]["labels"][names.PRIORITY_LABEL] = f"{queue}-high"
    custom.create_namespaced_custom_object(G, V, namespace, P, urgent)
    preempted = wait_for(lambda: evicted(custom, namespace, "second"), 120, "the second job preempted by the urgent one")
    assert "Preempted" in preempted["message"], preempted["message"]
    wait_for(lambda: all_running(core, namespace, "urgent", 2), 90, "the urgent job admitted on the preempted quota, and Running")
    assert all(p.metadata.deletion_timestamp for p in pods_of(core, namespace, "second"))  # the preempted gang stopped whole
    urgent_wl = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "urgent")["metadata"])
    assert workload_of(custom, namespace, urgent_wl)["spec"]["priority"] == 1000

    finish(core, namespace, "urgent")
    done = wait_for(lambda: (w := workload_of(custom, namespace, urgent_wl)) and names.FINALIZER not in (w["metadata"].get("finalizers") or []) and w,
                    120, "the finished job's Workload Finished and its finalizer gone")
    assert condition(done["status"], "Finished")["reason"] == "Succeeded"


def test_a_finished_jobs_workload_is_finished_and_released_in_the_same_pass(local_kueue, kueue_queue, namespace, kube):
    """The scene above failed twice in fresh-clone runs on its last wait: the finished job's Workload was Finished but
    kept railtrain's finalizer for good. The reconcile that saw the job finished wrote Finished and left the finalizer
    to a next pass, and none came: the job's pods had ended (no more events) and the resync skips a Succeeded job.
    One sync of a finished job whose pods are not live must now do both (operator/kueue.py, ``_finish``)."""
    from datetime import datetime, timezone

    from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK
    from railtrain.operator import kueue as kueue_sync
    from railtrain.operator.job.observed import observe_job
    from railtrain.operator.kube.verbs import Kube

    queue = kueue_queue(namespace, {TAG: uuid.uuid4().hex[:8]}, gpus=16)  # a flavor over no node: Kueue never admits it here
    job = kube.custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("done", queue))
    edge, levels, now = Kube(kube.api_client), (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME), datetime.now(timezone.utc)
    kueue_sync.sync(edge, job, observe_job(job), levels, [], now)  # the waiting job's Workload, with railtrain's finalizer
    name = workload_name(job["metadata"])
    assert names.FINALIZER in workload_of(kube.custom, namespace, name)["metadata"]["finalizers"]

    finished = job | {"status": {"phase": "Succeeded", "conditions": [
        {"type": "Succeeded", "status": "True", "reason": "AllRanksSucceeded", "message": "every rank exited 0", "lastTransitionTime": "2026-12-04T12:00:00Z"}]}}
    view = kueue_sync.sync(edge, finished, observe_job(finished), levels, [], now)  # one pass, no pod live
    wl = workload_of(kube.custom, namespace, name)
    assert view.state == "Finished" and condition(wl["status"], "Finished")["reason"] == "Succeeded", wl.get("status")
    assert names.FINALIZER not in (wl["metadata"].get("finalizers") or []), wl["metadata"]


def test_the_resync_releases_a_just_finished_kueue_jobs_workload_whose_pod_event_was_missed(operator_process, local_kueue, kueue_queue, namespace, kube):
    """A Kueue job that finished while a pod of it was still live keeps its Workload's finalizer until that pod's end
    reconciles it again; when that event is missed (the operator restarted, leadership moved), the resync must do it.
    The old resync skipped every Succeeded job without a TTL, so the finalizer stayed for good. Here the running
    operator is paused (SIGSTOP) so that only the resync pass under test acts; no pod of the job exists."""
    import os
    import signal
    from datetime import datetime, timezone

    from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK
    from railtrain.operator import kueue as kueue_sync
    from railtrain.operator import resync
    from railtrain.operator.context import OperatorContext, RuntimeState
    from railtrain.operator.job.observed import observe_job
    from railtrain.operator.kube.verbs import Kube
    from railtrain.operator.settings import Settings

    queue = kueue_queue(namespace, {TAG: uuid.uuid4().hex[:8]}, gpus=16)  # a flavor over no node: Kueue never admits it here
    edge, levels = Kube(kube.api_client), (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME)
    paused = operator_process.proc if operator_process.running() else None
    if paused is not None:
        os.kill(paused.pid, signal.SIGSTOP)
    try:
        job = kube.custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("late", queue))
        kueue_sync.sync(edge, job, observe_job(job), levels, [], datetime.now(timezone.utc))  # its Workload, with the finalizer
        name = workload_name(job["metadata"])
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        finished = {"status": {"phase": "Succeeded", "completionTime": now, "conditions": [
            {"type": "Succeeded", "status": "True", "reason": "AllRanksSucceeded", "message": "every rank exited 0", "lastTransitionTime": now}]}}  # fmt: skip
        kube.custom.patch_namespaced_custom_object_status(G, V, namespace, P, "late", finished)
        assert names.FINALIZER in workload_of(kube.custom, namespace, name)["metadata"]["finalizers"]  # the missed event's work
        ctx = OperatorContext(Settings(namespace=namespace, topology_levels=levels), edge, identity="test/1", state=RuntimeState(leader=True))
        resync.resync_pass(ctx)
        wl = workload_of(kube.custom, namespace, name)
        done = condition(wl.get("status") or {}, "Finished")
        assert done is not None and done["reason"] == "Succeeded", f"the resync left the finished job's Workload unfinished: {wl.get('status')}"
        assert names.FINALIZER not in (wl["metadata"].get("finalizers") or []), wl["metadata"]
    finally:
        if paused is not None:
            os.kill(paused.pid, signal.SIGCONT)


def one_running(kube, gpu_nodes, kueue_queue, namespace, name):
    """Two fresh 8-GPU nodes in one rack, a LocalQueue with 16 GPUs of quota over them (all of it for one 2-node job),
    and job ``name`` in it admitted by Kueue and Running; returns ``(queue, the uids of the job's pods)``."""
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(2, labels={TAG: tag}, nodes_per_rack=2)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=16)
    kube.custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job(name, queue))
    running = wait_for(lambda: all_running(kube.core, namespace, name, 2), 90, f"{name} admitted by Kueue and Running")
    return queue, {p.metadata.uid for p in running}


def test_a_running_jobs_workload_deleted_by_hand_stops_the_gang_whole_then_a_new_workload_is_admitted_and_it_runs_again(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28's fault list, a Workload deleted by hand (``kubectl delete workload``) under a running gang: as Kueue's
    own integrations do, the gang stops whole (Scheduled False, EvictedByKueue, every pod deleted), railtrain drops its
    finalizer so the deletion completes, and a new Workload (another uid) stands for the job; Kueue admits it and the
    gang runs again on new pods. Nothing is left half-way: no pod of the old gang keeps running beside the new one."""
    core, custom = kube.core, kube.custom
    _, first = one_running(kube, gpu_nodes, kueue_queue, namespace, "kept")
    name = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "kept")["metadata"])
    old_uid = workload_of(custom, namespace, name)["metadata"]["uid"]

    custom.delete_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.WORKLOADS, name)  # by hand
    # Kueue admits the new Workload within a second here, so the stopped state (Scheduled False) is too brief to poll
    # for; its Warning Event stays.
    said = events_with(core, namespace, "kept", reasons.EVICTED_BY_KUEUE, timeout=60, where=lambda e: "the Workload is being deleted" in e.message)
    event = said[reasons.EVICTED_BY_KUEUE][0]
    assert event.type == "Warning" and f"Kueue evicted Workload {name}" in event.message and "WorkloadDeleted" in event.message, event.message
    wait_for(lambda: (w := workload_of(custom, namespace, name)) is not None and w["metadata"]["uid"] != old_uid and w, 90,
             "the old Workload gone (railtrain's finalizer dropped) and a new one created for the job")
    wait_for(lambda: all_running(core, namespace, "kept", 2, old_uids=frozenset(first)), 120, "the job admitted again by Kueue and Running on new pods")
    live = [p for p in pods_of(core, namespace, "kept") if not p.metadata.deletion_timestamp]
    assert len(live) == 2 and not {p.metadata.uid for p in live} & first, [p.metadata.name for p in live]
    new = workload_of(custom, namespace, name)
    assert condition(new["status"], "Admitted")["status"] == "True" and names.FINALIZER in new["metadata"]["finalizers"]


def test_kueue_killed_and_restarted_leaves_the_running_gang_alone_and_admits_the_waiting_job_when_back(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28's fault list, Kueue restarted: its manager SIGKILLed while one job runs on all the quota. The running
    gang is left alone (the same pods keep running: a Kueue that does not answer is no eviction); a job submitted
    meanwhile, whose Workload cannot be created while Kueue's webhooks are down, says so in its Scheduled condition
    instead of waiting silently, and creates no pod; once Kueue is back the job's Workload is created and waits on
    quota, and when the first job ends it is admitted and runs.

    On the old code the late job had no condition at all: its Workload's create failed with a 500 on every
    reconcile, which the resync also took for the API server's trouble and so gave up its whole pass."""
    core, custom = kube.core, kube.custom
    queue, uids = one_running(kube, gpu_nodes, kueue_queue, namespace, "holder")
    local_kueue.kill()
    try:
        custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("late", queue))
        said = wait_for(lambda: (c := scheduled(custom, namespace, "late", reasons.WAITING_FOR_KUEUE)) and "does not answer" in c["message"] and c,
                        60, "the late job's Scheduled condition saying Kueue does not answer")  # fmt: skip
        assert f"its Workload in LocalQueue {queue} cannot be created yet: Kueue's admission webhook" in said["message"], said["message"]
        assert "Kueue is down or restarting; the Workload is created when Kueue answers again" in said["message"], said["message"]
        assert pods_of(core, namespace, "late") == []
        assert {p.metadata.uid for p in pods_of(core, namespace, "holder") if not p.metadata.deletion_timestamp} == uids
    finally:
        local_kueue.restart()
    late_wl = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "late")["metadata"])
    wait_for(lambda: workload_of(custom, namespace, late_wl), 60, "the late job's Workload created once Kueue is back")
    wait_for(lambda: (c := scheduled(custom, namespace, "late", reasons.WAITING_FOR_KUEUE)) and "quota" in c["message"], 60, "the late job waiting on quota")
    assert {p.metadata.uid for p in all_running(core, namespace, "holder", 2) or []} == uids  # still the same gang
    finish(core, namespace, "holder")
    wait_for(lambda: all_running(core, namespace, "late", 2), 120, "the late job admitted once the first finished, and Running")


def test_suspending_a_kueue_job_deactivates_its_workload_so_its_quota_admits_the_next_and_resuming_queues_it_again(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """``runPolicy.suspend`` of a Kueue job maps to its Workload's ``spec.active`` (as Kueue's own integrations map
    ``suspend``): the gang stops and the Workload is deactivated, so Kueue releases its quota and admits the job that
    waited on it; resumed, the Workload is active again and queued, and is admitted when the other job ends. Before,
    a suspended job's pods went but its Workload kept the quota, and the waiting job stayed waiting. (A Workload an
    administrator deactivates by hand stays inactive: the first scene's eviction.)"""
    core, custom = kube.core, kube.custom
    queue, _ = one_running(kube, gpu_nodes, kueue_queue, namespace, "paused")
    custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("next", queue))
    wait_for(lambda: (c := scheduled(custom, namespace, "next", reasons.WAITING_FOR_KUEUE)) and "quota" in c["message"], 60, "the second job waiting on quota")
    name = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "paused")["metadata"])

    custom.patch_namespaced_custom_object(G, V, namespace, P, "paused", {"spec": {"runPolicy": {"suspend": True}}})
    wait_for(lambda: workload_of(custom, namespace, name)["spec"].get("active") is False, 30, "the suspended job's Workload deactivated")
    assert workload_of(custom, namespace, name)["metadata"]["annotations"][names.DEACTIVATED_FOR_SUSPEND] == "true"  # railtrain's, undone on resume
    wait_for(lambda: all_running(core, namespace, "next", 2), 90, "the second job admitted on the released quota, and Running")
    assert not [p for p in pods_of(core, namespace, "paused") if not p.metadata.deletion_timestamp]
    assert not condition(workload_of(custom, namespace, name).get("status") or {}, "QuotaReserved") or condition(workload_of(custom, namespace, name)["status"], "QuotaReserved")["status"] == "False"

    custom.patch_namespaced_custom_object(G, V, namespace, P, "paused", {"spec": {"runPolicy": {"suspend": False}}})
    wait_for(lambda: workload_of(custom, namespace, name)["spec"].get("active") is True, 30, "the resumed job's Workload active again")
    wait_for(lambda: (c := scheduled(custom, namespace, "paused", reasons.WAITING_FOR_KUEUE)) and "quota" in c["message"], 60, "the resumed job queued, waiting on quota")
    finish(core, namespace, "next")
    wait_for(lambda: all_running(core, namespace, "paused", 2), 120, "the resumed job admitted again when the second ended, and Running")


def test_with_wait_for_pods_ready_a_ready_gang_keeps_its_admission_past_the_timeout_and_a_restarted_one_recovers(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, ``PodsReady`` where Kueue waits for it: Kueue restarted with ``waitForPodsReady`` (timeout 20 s) evicts
    an admitted Workload whose ``PodsReady`` condition is not True within the timeout. railtrain writes it as Kueue's
    own integrations do: True (Started) once the gang's pods are Ready, so the running gang keeps its admission and
    its pods well past the timeout; a rank's failure restarts the gang on new pods, PodsReady goes False
    (WaitForRecovery) and comes back True (Recovered), still admitted. On the old code (run with an 8 s timeout) nothing wrote PodsReady and
    Kueue evicted the running gang 8 s after admitting it (PodsReadyTimeout). The timeout here is 20 s
    so that a loaded machine's slow pod start (admission → pods Ready → the reconcile writing PodsReady) is not taken
    for the fault."""
    from datetime import datetime, timezone

    core, custom = kube.core, kube.custom
    timeout_s = 20
    local_kueue.wait_for_pods_ready = {"timeout": f"{timeout_s}s", "recoveryTimeout": "120s"}
    local_kueue.restart()
    try:
        _, first = one_running(kube, gpu_nodes, kueue_queue, namespace, "ready")
        name = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "ready")["metadata"])
        started = wait_for(lambda: (c := condition((workload_of(custom, namespace, name) or {}).get("status") or {}, "PodsReady"))
                           and c["status"] == "True" and c, 60, "the Workload's PodsReady True")  # fmt: skip
        assert started["reason"] == "Started" and "all 2 pods of the gang are ready" in started["message"], started
        admitted_at = datetime.strptime(condition(workload_of(custom, namespace, name)["status"], "Admitted")["lastTransitionTime"],
                                        "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)  # fmt: skip
        past = max(0.0, (admitted_at - datetime.now(timezone.utc)).total_seconds() + timeout_s + 6)
        seen = observe(lambda: (condition(workload_of(custom, namespace, name)["status"], "Admitted")["status"],
                                (condition(workload_of(custom, namespace, name)["status"], "Evicted") or {}).get("status", "none"),
                                frozenset(p.metadata.uid for p in pods_of(core, namespace, "ready") if not p.metadata.deletion_timestamp)),
                       past)  # fmt: skip
        assert seen == [("True", "none", frozenset(first))], f"the gang lost its admission or pods past Kueue's timeout: {seen}"
        end_pod(core, namespace, sorted(p.metadata.name for p in pods_of(core, namespace, "ready"))[0], code=1, message="rank failed")
        wait_for(lambda: all_running(core, namespace, "ready", 2, old_uids=frozenset(first)), 120, "the gang restarted on new pods")
        recovered = wait_for(lambda: (c := condition(workload_of(custom, namespace, name)["status"], "PodsReady")) and c["reason"] == "Recovered" and c,
                             60, "PodsReady True again, reason Recovered")  # fmt: skip
        assert recovered["status"] == "True", recovered
        wl = workload_of(custom, namespace, name)
        assert condition(wl["status"], "Admitted")["status"] == "True" and (condition(wl["status"], "Evicted") or {}).get("status") != "True", wl["status"]
    finally:
        local_kueue.wait_for_pods_ready = None
        local_kueue.restart()



def test_the_operator_killed_between_kueues_admission_and_pod_creation_makes_the_gang_once_when_back(operator_process, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28's fault list, the railtrain operator killed between Kueue's admission and the gang's pods. The running
    operator is paused (SIGSTOP) before the job exists, so it creates neither the Workload nor the pods; the
    operator's own reconcile and admission pass run here in-process and "crash" at the pod creates (every create of a
    pod raises): the Workload is created and admitted, the pass has recorded its admission in the job's status (nodes
    chosen inside Kueue's assignment, ``created`` false) and no pod exists. The paused operator is then SIGKILLed and a
    new one started: it must create the gang once, on the recorded nodes, with Kueue's workload annotation, under the
    same Workload (no second one, no orphan), without a restart; and the Workload gets ``PodsReady``."""
    import signal

    from railtrain.operator.context import OperatorContext, RuntimeState
    from railtrain.operator.kube.verbs import Kube
    from railtrain.operator.settings import parse

    core, custom = kube.core, kube.custom
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(2, labels={TAG: tag}, nodes_per_rack=2)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=16)
    if operator_process.running():
        os.kill(operator_process.proc.pid, signal.SIGSTOP)
    try:
        edge = Kube(kube.api_client)

        def crash(manifests, *args, **kwargs):
            raise RuntimeError("the operator died here (test)")

        edge.create_many = crash  # the crash point: after the pass's status write, at the pods' creation
        ctx = OperatorContext(parse(["--namespace", namespace, "--topology-preset", "railtrain"]), edge, identity="test/1", state=RuntimeState(leader=True))
        job = custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("crash", queue))
        name = workload_name(job["metadata"])

        def admitted_and_recorded():
            ctx.reconciler.reconcile_job(namespace, "crash")  # the job's Workload created and kept, as the operator's handler does
            ctx.reconciler.admission_pass()
            recorded = job_status(custom, namespace, "crash").get("admission") or {}
            return recorded if recorded.get("nodes") else None

        recorded = wait_for(admitted_and_recorded, 90, "the Workload admitted by Kueue and the admission recorded by the in-process pass")
        assert recorded.get("created") is False and pods_of(core, namespace, "crash") == [], recorded
        wl = workload_of(custom, namespace, name)
        assert condition(wl["status"], "Admitted")["status"] == "True", wl["status"]
        uid = wl["metadata"]["uid"]
    finally:
        operator_process.kill()  # SIGKILL (it was paused): no cleanup, as a crashed operator pod ends
    operator_process.start()
    running = wait_for(lambda: all_running(core, namespace, "crash", 2), 120, "the gang created by the new operator and Running")
    assert sorted(p.spec.node_name for p in running) == sorted(recorded["nodes"]), ([p.spec.node_name for p in running], recorded)
    assert all(p.metadata.annotations.get(names.WORKLOAD_ANNOTATION) == name for p in running), [p.metadata.annotations for p in running]
    workloads = custom.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.WORKLOADS)["items"]
    assert [(w["metadata"]["name"], w["metadata"]["uid"]) for w in workloads] == [(name, uid)], "a second Workload or an orphan"
    ready = wait_for(lambda: (c := condition(workload_of(custom, namespace, name)["status"], "PodsReady")) and c["status"] == "True" and c, 60, "PodsReady True")
    assert ready["reason"] == "Started", ready
    status = job_status(custom, namespace, "crash")
    assert status.get("restarts", 0) == 0 and (status.get("admission") or {}).get("created") is not False, status


def test_submit_wait_follows_kueues_reasons_and_stops_on_a_request_over_the_queues_maximum_capacity(operator, local_kueue, kueue_queue, gpu_nodes, cluster, namespace, kube, tmp_path):
    """Issue 28's CLI: ``railtrain submit --wait`` of a Kueue job prints Kueue's own pending reason as it waits, and a
    job larger than its ClusterQueue's maximum capacity (3 nodes x 8 GPUs against 16 GPUs of quota: Kueue says
    "> maximum capacity") is said to never fit the quota as it is: ``--wait`` stops with exit 1 and that sentence, as it
    does for a gang too large for railtrain's own cluster, and the job stays queued (its Workload kept). Before,
    ``--wait`` followed such a job forever."""
    import yaml

    tag = uuid.uuid4().hex[:8]
    gpu_nodes(2, labels={TAG: tag}, nodes_per_rack=2)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=16)
    path = tmp_path / "big.yaml"
    body = kueue_job("big", queue, nodes=3)
    body["spec"]["command"] = ["python", "-c", "print('hi')"]
    body["spec"].pop("args", None)
    path.write_text(yaml.safe_dump(body))
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "railtrain.cli.main", "submit", str(path), "-n", namespace, "--wait"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "> maximum capacity (16)" in out and f"It can never fit LocalQueue {queue}'s ClusterQueue as its quota is" in out, out
    status = job_status(kube.custom, namespace, "big")
    assert status.get("phase") == "Pending", status
    assert workload_of(kube.custom, namespace, workload_name(kube.custom.get_namespaced_custom_object(G, V, namespace, P, "big")["metadata"])) is not None


def test_an_elastic_job_partially_admitted_by_kueue_runs_at_the_admitted_count_and_does_not_grow_past_its_quota(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, an elastic job's ``minCount``: 3 nodes free in the flavor but 16 GPUs of quota; an elastic job of 3
    nodes (``minNodes`` 2, grow interval 0) gets a Workload with ``minCount`` 2, Kueue admits 2 pods (partial
    admission), and the gang runs on 2 nodes inside the assignment (``admittedNodes`` 2) with ``PodsReady`` True. It
    does not grow onto the free third node (that would run 24 GPUs on 16 of quota): the same 2 pods over several
    resync periods. On the old code the Workload asked for 3 pods and nothing less, so Kueue never admitted it."""
    core, custom = kube.core, kube.custom
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(3, labels={TAG: tag}, nodes_per_rack=3)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=16)
    body = kueue_job("elastic", queue, nodes=3)
    body["spec"]["elastic"] = {"minNodes": 2, "growIntervalSeconds": 0}
    custom.create_namespaced_custom_object(G, V, namespace, P, body)
    name = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "elastic")["metadata"])
    running = wait_for(lambda: all_running(core, namespace, "elastic", 2), 90, "the elastic job admitted by Kueue with 2 of 3 nodes and Running")
    wl = workload_of(custom, namespace, name)
    assert wl["spec"]["podSets"][0]["count"] == 3 and wl["spec"]["podSets"][0]["minCount"] == 2, wl["spec"]["podSets"][0]
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2, wl["status"]["admission"]
    assert job_status(custom, namespace, "elastic").get("admittedNodes") == 2
    wait_for(lambda: (c := condition(workload_of(custom, namespace, name)["status"], "PodsReady")) and c["status"] == "True", 60, "PodsReady True at 2 pods")
    uids = frozenset(p.metadata.uid for p in running)
    seen = observe(lambda: frozenset(p.metadata.uid for p in pods_of(core, namespace, "elastic")), 6)
    assert seen == [uids], f"the gang changed (grew past Kueue's admission?): {seen}"


def _quarantined_scene(kube, gpu_nodes, kueue_queue, namespace, name, nodes, beside=""):
    """``nodes`` fresh 8-GPU nodes in one rack, a LocalQueue with all their GPUs as quota, a 2-node job admitted and
    Running on two of them (and, with ``beside``, a 1-node job of that name Running on another); then rank 1's trainer reports a hardware-suspect verdict naming its node (railtrain
    quarantines it: the taint Kueue's ``TASReplaceNodeOnNodeTaints`` reads). Returns ``(the bad node, the first pods' uids,
    the Workload's name)``."""
    from railtrain.crds import contract

    core, custom = kube.core, kube.custom
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(nodes, labels={TAG: tag}, nodes_per_rack=nodes)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=8 * nodes)
    kube.custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job(name, queue))
    running = wait_for(lambda: all_running(core, namespace, name, 2), 90, f"{name} admitted by Kueue and Running")
    if beside:
        kube.custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job(beside, queue, nodes=1))
        wait_for(lambda: all_running(core, namespace, beside, 1), 90, f"{beside} admitted by Kueue and Running")
    bad = next(p.spec.node_name for p in running if p.metadata.name == f"{name}-1")
    message = contract.format_termination_message(contract.VERDICT_HARDWARE_SUSPECT, "ParameterMismatch", "rank 9 parameter bytes differ",
                                                  nodes=[bad], ranks=[9], step=40)  # fmt: skip
    end_pod(core, namespace, f"{name}-1", 1, message)
    workload = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, name)["metadata"])
    return bad, frozenset(p.metadata.uid for p in running), workload


def test_a_quarantined_node_inside_kueues_assignment_is_replaced_without_a_fight(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, recovery inside Kueue's admission, the quarantine taint vs ``TASReplaceNodeOnNodeTaints`` (Beta, on
    in Kueue v0.17): a hardware-suspect verdict quarantines rank 1's node (a NoSchedule taint the job does not
    tolerate). Kueue, seeing its Workload on a node with an untolerated taint, puts the node in the Workload's
    ``unhealthyNodes`` and its scheduler finds a replacement inside the quota; railtrain restarts the gang once, inside
    the new assignment: it runs again on two nodes, not the quarantined one, with one infrastructure restart and no
    more (no fight: nothing fails the new pods, no pod lands on the tainted node) over a window of several resyncs."""
    core, custom = kube.core, kube.custom
    bad, first, workload = _quarantined_scene(kube, gpu_nodes, kueue_queue, namespace, "qr", nodes=3)
    new = wait_for(lambda: all_running(core, namespace, "qr", 2, old_uids=first), 120, "the gang Running again on new pods")
    assert bad not in {p.spec.node_name for p in new}, [p.spec.node_name for p in new]
    status = job_status(custom, namespace, "qr")
    assert status.get("infrastructureRestarts") == 1 and status.get("jobRestarts", 0) == 0, status
    seen = observe(lambda: (job_status(custom, namespace, "qr").get("infrastructureRestarts"),
                            frozenset((p.metadata.uid, p.spec.node_name, p.status.phase) for p in pods_of(core, namespace, "qr"))), 8)
    assert len(seen) == 1, f"the gang churned after its restart: {seen}"
    wl = workload_of(custom, namespace, workload)
    assert condition(wl["status"], "Admitted")["status"] == "True", wl["status"]
    assigned = {values[-1] for psa in wl["status"]["admission"]["podSetAssignments"] for values, _ in expand(psa.get("topologyAssignment"))[1]}
    assert bad not in assigned and {p.spec.node_name for p in new} <= assigned, (assigned, [p.spec.node_name for p in new])


def test_a_quarantined_node_with_no_free_replacement_is_evicted_by_kueue_and_readmitted_when_capacity_returns(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, the same quarantine with no free node to replace it: three nodes and 24 GPUs of quota, the 2-node job
    on two of them and a 1-node job of the same queue on the third. Kueue finds no replacement and evicts the
    Workload (``NodeFailures``); the gang stops whole and the job waits for Kueue with its sentence, with no pod on the
    quarantined node and no restart while it waits; once the 1-node job ends, Kueue admits it again on the healthy
    node and the freed one, and the gang runs there."""
    core, custom = kube.core, kube.custom
    bad, first, workload = _quarantined_scene(kube, gpu_nodes, kueue_queue, namespace, "qn", nodes=3, beside="other")
    waiting = wait_for(lambda: (c := condition(job_status(custom, namespace, "qn"), "Scheduled")) and c["status"] == "False"
                       and c["reason"] == reasons.WAITING_FOR_KUEUE
                       and not [p for p in pods_of(core, namespace, "qn") if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp] and c,
                       90, "the gang stopped, the job waiting for Kueue")  # fmt: skip
    seen = observe(lambda: (job_status(custom, namespace, "qn").get("infrastructureRestarts"),
                            frozenset(p.metadata.uid for p in pods_of(core, namespace, "qn") if p.status.phase in ("Pending", "Running"))), 6)
    assert seen == [(1, frozenset())], f"pods or restarts while the job waits for Kueue: {seen}; it said {waiting}"
    finish(core, namespace, "other")
    new = wait_for(lambda: all_running(core, namespace, "qn", 2, old_uids=first), 120, "the job admitted again and Running once the 1-node job ended")
    assert bad not in {p.spec.node_name for p in new}
    assert job_status(custom, namespace, "qn").get("infrastructureRestarts") == 1


def test_a_node_deleted_under_a_kueue_gang_is_replaced_inside_its_admission(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, recovery inside Kueue's admission, a node lost: 3 nodes in the quota, a 2-node job; the node of rank 0
    is deleted. Kueue's ``TASFailedNodeReplacement`` (Beta, on in v0.17) replaces it in the Workload's topology
    assignment and railtrain restarts the gang there (one infrastructure restart, backoffLimit 0 not spent): it runs on
    two live nodes, both inside the new assignment, under the same admitted Workload (no eviction, no new uid)."""
    core, custom = kube.core, kube.custom
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(3, labels={TAG: tag}, nodes_per_rack=3)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=24)
    body = kueue_job("nl", queue)
    body["spec"]["runPolicy"] = {"backoffLimit": 0}
    custom.create_namespaced_custom_object(G, V, namespace, P, body)
    running = wait_for(lambda: all_running(core, namespace, "nl", 2), 90, "nl admitted by Kueue and Running")
    workload = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "nl")["metadata"])
    uid = workload_of(custom, namespace, workload)["metadata"]["uid"]
    victim = next(p.spec.node_name for p in running if p.metadata.name == "nl-0")
    core.delete_node(victim)
    new = wait_for(lambda: all_running(core, namespace, "nl", 2, old_uids=frozenset(p.metadata.uid for p in running)), 120, "the gang Running again on new pods")
    assert victim not in {p.spec.node_name for p in new}
    # The pods' Running reaches the job's status.phase with the next reconcile, not at once: poll it.
    status = wait_for(lambda: (s := job_status(custom, namespace, "nl")).get("phase") == "Running" and s, 60, "the job's phase Running again")
    assert status.get("infrastructureRestarts") == 1 and status.get("jobRestarts", 0) == 0 and status["phase"] == "Running", status
    wl = workload_of(custom, namespace, workload)
    assert wl["metadata"]["uid"] == uid and condition(wl["status"], "Admitted")["status"] == "True", wl["status"]
    assigned = {values[-1] for psa in wl["status"]["admission"]["podSetAssignments"] for values, _ in expand(psa.get("topologyAssignment"))[1]}
    assert victim not in assigned and {p.spec.node_name for p in new} <= assigned, (assigned, [p.spec.node_name for p in new])


def test_a_node_avoided_for_a_straggler_gets_a_new_admission_without_it(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, recovery inside Kueue's admission, a node avoided without a taint: a straggler verdict makes the job
    avoid rank 1's node (``status.avoidNodes``) without quarantining it, so Kueue sees nothing wrong with the node and
    would keep it in the admission. railtrain gives the admission back: the stopped gang's Workload is replaced by one
    whose pod set's required node affinity leaves the node out (Kueue's TAS honours it), Kueue admits that one to the
    two other nodes and the gang runs there, with one infrastructure restart. On the old code the Kueue path ignored
    ``avoidNodes``: the gang restarted on the slow node (and would again at each verdict, until the infrastructure
    budget ran out).

    While the released Workload is being deleted (held here by a finalizer of the test's, as Kueue's own may hold it),
    the job's WaitingForKueue Event says why: nodes of its admission avoided. On the code before stop 47 the admission
    pass read such a Workload as "being deleted" and the reason never reached the job (a fresh-clone run timed out on it)."""
    from railtrain.crds import contract
    from railtrain.crds.labels import HOSTNAME

    core, custom = kube.core, kube.custom
    tag = uuid.uuid4().hex[:8]
    gpu_nodes(3, labels={TAG: tag}, nodes_per_rack=3)
    queue = kueue_queue(namespace, {TAG: tag}, gpus=24)
    custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("sl", queue))
    running = wait_for(lambda: all_running(core, namespace, "sl", 2), 90, "sl admitted by Kueue and Running")
    workload = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "sl")["metadata"])
    uid = workload_of(custom, namespace, workload)["metadata"]["uid"]
    slow = next(p.spec.node_name for p in running if p.metadata.name == "sl-1")
    # the released Workload lingers (as it does while Kueue's own finalizer is on it): a finalizer of the test's holds it
    hold_workload(custom, namespace, workload, True)
    end_pod(core, namespace, "sl-1", 1, contract.format_termination_message(contract.VERDICT_STRAGGLER, "SlowRank", "rank 1 is 25% slower", nodes=[slow], ranks=[1]))
    # while it is being deleted the job says why (stop 47: a fresh-clone run saw only "the Workload is being deleted")
    said = events_with(core, namespace, "sl", reasons.WAITING_FOR_KUEUE, where=lambda e: "avoided by this job" in e.message)[reasons.WAITING_FOR_KUEUE]
    assert f"node(s) {slow} of Kueue's admission are avoided by this job" in said[0].message, said[0].message
    assert (workload_of(custom, namespace, workload) or {}).get("metadata", {}).get("deletionTimestamp"), "the Workload was not being deleted"
    hold_workload(custom, namespace, workload, False)
    new = wait_for(lambda: all_running(core, namespace, "sl", 2, old_uids=frozenset(p.metadata.uid for p in running)), 120, "the gang Running again on new pods")
    assert slow not in {p.spec.node_name for p in new}, (slow, [p.spec.node_name for p in new])
    status = job_status(custom, namespace, "sl")
    assert status.get("infrastructureRestarts") == 1 and status.get("jobRestarts", 0) == 0 and status["avoidNodes"] == [slow], status
    wl = workload_of(custom, namespace, workload)
    assert wl["metadata"]["uid"] != uid and condition(wl["status"], "Admitted")["status"] == "True", wl["status"]
    terms = wl["spec"]["podSets"][0]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all({"key": HOSTNAME, "operator": "NotIn", "values": [slow]} in t["matchExpressions"] for t in terms), terms


def test_a_running_kueue_job_deleted_leaves_no_workload_and_its_quota_admits_the_next(operator, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """Issue 28, nothing leaks: a running Kueue job deleted (``kubectl delete tj``) takes its Workload with it (railtrain's
    finalizer must not keep it, holding the quota), so a job waiting on that quota is admitted and runs."""
    core, custom = kube.core, kube.custom
    queue, _ = one_running(kube, gpu_nodes, kueue_queue, namespace, "gone")
    name = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "gone")["metadata"])
    custom.create_namespaced_custom_object(G, V, namespace, P, kueue_job("next", queue))
    wait_for(lambda: scheduled(custom, namespace, "next", reasons.WAITING_FOR_KUEUE), 60, "the second job waiting on quota")
    custom.delete_namespaced_custom_object(G, V, namespace, P, "gone")
    # Released by the job's DELETED event (operator/kueue.py: release), or, when that release lost to the garbage
    # collector's concurrent delete, by the leader's sweep (sweep), at most ORPHAN_SWEEP_SECONDS later.
    wait_for(lambda: workload_of(custom, namespace, name) is None, 60, "the deleted job's Workload gone")
    wait_for(lambda: all_running(core, namespace, "next", 2), 120, "the waiting job admitted on the freed quota and Running")


def test_a_kueue_jobs_workload_is_released_when_the_operator_missed_the_jobs_deletion(operator_process, local_kueue, kueue_queue, gpu_nodes, namespace, kube):
    """A Kueue job deleted while no operator ran (a crash, a rollout, a leader change) sends no DELETED event to the
    next one, and its Workload kept railtrain's finalizer for good, holding its quota (seen in CI as a Workload that
    outlived its job by minutes: the release at the job's deletion lost to the garbage collector's concurrent delete).
    The leader's resync releases every Workload whose TrainingJob is gone, on its first pass (operator/kueue.py: sweep)."""
    core, custom = kube.core, kube.custom
    if not operator_process.running():
        operator_process.start()
    one_running(kube, gpu_nodes, kueue_queue, namespace, "missed")
    name = workload_name(custom.get_namespaced_custom_object(G, V, namespace, P, "missed")["metadata"])
    operator_process.kill()  # SIGKILL: no operator sees the deletion
    custom.delete_namespaced_custom_object(G, V, namespace, P, "missed")
    held = wait_for(lambda: (w := workload_of(custom, namespace, name)) and w["metadata"].get("deletionTimestamp") and w, 60,
                    "the garbage collector deleting the orphaned Workload")
    assert names.FINALIZER in held["metadata"]["finalizers"], held["metadata"]  # held by railtrain's finalizer: only railtrain releases it
    operator_process.start()
    wait_for(lambda: workload_of(custom, namespace, name) is None, 60, "the orphaned Workload released by the operator back")
