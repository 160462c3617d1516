"""The admission pass and reconcile loop against an in-memory API (no cluster)."""

from __future__ import annotations

import copy
import threading
from datetime import datetime, timezone

from railtrain.crds import contract
from railtrain.operator.job import planner
from railtrain.operator.reconciler import Reconciler
from railtrain.operator.job.conditions import find

from .builders import job_obj, node

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def merge_patch(target: dict, patch: dict) -> None:
    """Apply a JSON merge patch (RFC 7386) to ``target`` in place, as the API server does: nested objects merge,
    null deletes a key, anything else (lists included) replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = value


class NoKueue:
    """The ``CustomObjectsApi`` of a cluster without Kueue: every call of it answers 404 (the Workload kind is not served)."""

    def __getattr__(self, name):
        def not_served(*args, **kwargs):
            from kubernetes.client.rest import ApiException

            raise ApiException(status=404, reason="Not Found")

        return not_served


class FakeKube:
    """The verbs of :class:`railtrain.operator.kube.verbs.Kube` over dicts in memory (no Kueue: ``custom`` answers 404)."""

    custom = NoKueue()

    def __init__(self, nodes, jobs, terminating=()):
        self.nodes = nodes
        self.jobs = {(j["metadata"]["namespace"], j["metadata"]["name"]): j for j in jobs}
        self.pods: dict[tuple[str, str], dict] = {}
        self.services: set[tuple[str, str]] = set()
        self.service_objs: dict[tuple[str, str], dict] = {}
        self.terminating = set(terminating)
        self.events: list[tuple[str, str, str]] = []

    def get_job(self, ns, name):
        return copy.deepcopy(self.jobs.get((ns, name)))

    def read_job(self, ns, name):
        return self.get_job(ns, name)

    def list_jobs(self, namespace=None):
        return [copy.deepcopy(j) for (ns, _), j in self.jobs.items() if namespace in (None, ns)]

    def list_job_pods(self, ns, name):
        return [copy.deepcopy(p) for (pns, _), p in self.pods.items() if pns == ns and p["metadata"]["labels"].get(contract.LABEL_JOB_NAME) == name]

    def list_railtrain_pods(self):
        return [copy.deepcopy(p) for p in self.pods.values()]

    def list_active_pods(self):
        return [copy.deepcopy(p) for p in self.pods.values() if p["status"]["phase"] not in ("Succeeded", "Failed")]

    def list_nodes(self):
        return self.nodes

    def terminating_namespaces(self):
        return set(self.terminating)

    def get_service(self, ns, name):
        return self.service_objs.get((ns, name))

    def create(self, manifest):
        ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        if manifest["kind"] == "Service":
            self.services.add((ns, name))
            self.service_objs[(ns, name)] = copy.deepcopy(manifest)
        elif (ns, name) in self.pods:
            return False  # AlreadyExists
        else:
            self.pods[(ns, name)] = copy.deepcopy(manifest) | {"status": {"phase": "Pending"}}
        return True

    def create_many(self, manifests):
        return [self.create(m) for m in manifests]

    def get_pod(self, ns, name):
        return copy.deepcopy(self.pods.get((ns, name)))

    def pods_named(self, ns, names, cached=False):
        return [p for p in (self.get_pod(ns, n) for n in names) if p is not None]

    def delete_pod(self, ns, name, uid=None, force=False):
        if uid is None or self.pods.get((ns, name), {}).get("metadata", {}).get("uid") in (None, uid):
            self.pods.pop((ns, name), None)

    def release_pod(self, ns, name, node, annotations=None):
        pod = self.pods[(ns, name)]
        if node:
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        pod["metadata"]["annotations"].update(annotations or {})
        pod["spec"].pop("schedulingGates", None)

    def patch_status(self, ns, name, patch, resource_version=None):
        if (ns, name) not in self.jobs:
            return False
        meta = self.jobs[(ns, name)]["metadata"]
        if resource_version and meta.get("resourceVersion") and resource_version != meta["resourceVersion"]:
            return False  # 409: changed since it was read (a job given a resourceVersion bumps it on every write)
        if meta.get("resourceVersion"):
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        merge_patch(self.jobs[(ns, name)].setdefault("status", {}), copy.deepcopy(patch))
        return True

    def get_lease(self, ns, name):
        return copy.deepcopy(getattr(self, "leases", {}).get((ns, name)))

    def put_lease(self, ns, name, spec, seen):
        self.__dict__.setdefault("leases", {})[(ns, name)] = {"metadata": {"name": name, "namespace": ns, "resourceVersion": "1"}, "spec": spec}
        return True

    def emit_event(self, job, type_, reason, message):
        self.events.append((job["metadata"]["name"], type_, reason))


def reconciler(kube, namespace=None):
    """The operator's Reconciler over ``kube``, its clock stopped at :data:`NOW` (default plan settings: no fabric, no quarantine bound)."""
    return Reconciler(kube, namespace=namespace, clock=lambda: NOW)


def reconcile_all(kube):
    for ns, name in list(kube.jobs):
        reconciler(kube).reconcile_job(ns, name, admit=False)


def scheduled(kube, ns, name):
    return find(kube.jobs[(ns, name)]["status"]["conditions"], "Scheduled")


def pinned(kube, name):
    return {p["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname") for p in kube.pods.values()
            if p["metadata"]["labels"][contract.LABEL_JOB_NAME] == name} - {None}


def test_one_pass_admits_the_earlier_job_whole_and_keeps_the_other_waiting():
    first = job_obj("first", nodes=3)
    second = job_obj("second", nodes=3)
    first["metadata"]["creationTimestamp"] = "2026-11-29T11:00:00Z"
    second["metadata"]["creationTimestamp"] = "2026-11-29T11:00:01Z"
    kube = FakeKube([node(f"n{i}") for i in range(4)], [first, second])
    reconcile_all(kube)  # services and gated pods
    decisions = reconciler(kube).admission_pass()
    assert {d.job for d in decisions} == {"team/first", "team/second"}
    assert len(pinned(kube, "first")) == 3 and pinned(kube, "second") == set()
    assert all(not p["spec"].get("schedulingGates") for p in kube.pods.values() if p["metadata"]["name"].startswith("first"))
    assert scheduled(kube, "team", "first")["status"] == "True"
    assert scheduled(kube, "team", "second")["reason"] == "WaitingForEarlierJobs"
    # The next pass sees the pins as used capacity: the second job is now simply short of nodes.
    reconciler(kube).admission_pass()
    assert scheduled(kube, "team", "second")["reason"] == "Unschedulable" and pinned(kube, "second") == set()


def test_jobs_in_terminating_namespaces_are_left_out():
    gone = job_obj("gone", ns="old", nodes=1)
    kube = FakeKube([node("n0")], [gone], terminating={"old"})
    reconcile_all(kube)
    assert reconciler(kube).admission_pass() == []
    assert pinned(kube, "gone") == set()


def test_jobs_of_different_gpu_resources_do_not_compete():
    nv = job_obj("nv", nodes=1)
    amd = job_obj("amd", nodes=1)
    amd["spec"]["resources"] = {"gpus": 8, "gpuResourceName": "amd.com/gpu"}
    amd_node = node("m0")
    amd_node["status"]["allocatable"] = {"amd.com/gpu": "8"}
    kube = FakeKube([node("n0"), amd_node], [nv, amd])
    reconcile_all(kube)
    reconciler(kube).admission_pass()
    assert pinned(kube, "nv") == {"n0"} and pinned(kube, "amd") == {"m0"}


def test_reconcile_runs_a_pass_for_a_waiting_job():
    kube = FakeKube([node("n0"), node("n1")], [job_obj("solo", nodes=2)])
    reconciler(kube).reconcile_job("team", "solo")  # creates the gang
    reconciler(kube).reconcile_job("team", "solo")  # the gang exists and waits: a pass places it
    assert pinned(kube, "solo") == {"n0", "n1"}
    assert kube.jobs[("team", "solo")]["status"]["placement"][0]["domains"]["kubernetes.io/hostname"] in {"n0", "n1"}
    assert ("solo", "Normal", "GangPlaced") in kube.events


def test_an_operator_watching_one_namespace_admits_only_its_jobs():
    kube = FakeKube([node("n0"), node("n1")], [job_obj("mine", ns="a", nodes=1), job_obj("theirs", ns="b", nodes=1)])
    reconcile_all(kube)
    reconciler(kube, namespace="a").admission_pass()
    assert pinned(kube, "mine") and pinned(kube, "theirs") == set()


def test_an_unlabelled_pod_holding_a_ranks_name_is_found_by_name_and_reported():
    kube = FakeKube([node("n0")], [job_obj("solo", nodes=1)])
    kube.pods[("team", "solo-0")] = {"metadata": {"name": "solo-0", "namespace": "team", "labels": {}, "uid": "x"}, "spec": {}, "status": {"phase": "Running"}}
    kube.pods[("team", "solo-0")]["metadata"]["labels"][contract.LABEL_JOB_NAME] = "someone-else"
    reconciler(kube).reconcile_job("team", "solo", admit=False)  # the create of solo-0 fails with AlreadyExists
    reconciler(kube).reconcile_job("team", "solo", admit=False)  # the next pass reads the name and reports it
    c = scheduled(kube, "team", "solo")
    assert (c["status"], c["reason"]) == ("False", "PodNameTaken") and "Pod solo-0 (no controller ownerReference)" in c["message"]
    assert kube.pods[("team", "solo-0")]["metadata"]["uid"] == "x"  # never replaced or adopted
    assert ("solo", "Warning", "PodNameTaken") in kube.events


class LaggingActiveKube(FakeKube):
    """The active-pods watch has not heard yet of the deletion the railtrain-pods watch already reported."""

    def __init__(self, *args, stale=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.stale = list(stale)

    def list_active_pods(self):
        return super().list_active_pods() + copy.deepcopy(self.stale)


def test_a_restarted_gang_waits_while_the_active_pods_still_show_its_old_pod():
    """The CI failure of e2e resume-delete: a rank placed away from its node while its own old pod still held it."""
    job = job_obj("llm", nodes=2)
    kube = LaggingActiveKube([node(n) for n in ("a", "b", "c")], [job])
    reconcile_all(kube)
    reconciler(kube).admission_pass()
    old = {p["metadata"]["name"]: copy.deepcopy(p) for p in kube.pods.values()}
    assert {p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in old.values()} == {"a", "b"}
    for p in kube.pods.values():
        p["status"] = {"phase": "Running"}
    kube.pods[("team", "llm-1")]["status"] = {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 1}}}]}
    reconciler(kube).reconcile_job("team", "llm", admit=False)  # restart: both pods deleted, status.hold written
    assert not kube.pods and kube.jobs[("team", "llm")]["status"]["restarts"] == 1
    kube.stale = [old["llm-0"] | {"metadata": old["llm-0"]["metadata"] | {"deletionTimestamp": "2026-11-29T12:00:01Z"}, "status": {"phase": "Running"}}]
    reconciler(kube).admission_pass()
    assert pinned(kube, "llm") == set()  # not placed around its own old pod (on c)
    kube.stale = []
    reconciler(kube).admission_pass()
    assert {p["metadata"]["name"]: p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in kube.pods.values()} == {
        name: p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for name, p in old.items()}  # each rank back on its node


class CountingKube(FakeKube):
    """Counts GETs by name; its cached lookup knows labelled pods and unfinished pods, as the operator's caches do."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gets = 0

    def get_pod(self, ns, name):
        self.gets += 1
        return super().get_pod(ns, name)

    def pods_named(self, ns, names, cached=False):
        if not cached:
            return super().pods_named(ns, names)
        known = [self.pods.get((ns, n)) for n in names]
        return [copy.deepcopy(p) for p in known if p is not None and (p["status"]["phase"] not in ("Succeeded", "Failed") or contract.LABEL_JOB_NAME in p["metadata"]["labels"])]


def test_a_new_gang_is_admitted_and_created_without_reading_its_ranks_names_one_by_one():
    """The admission of a 16-pod gang used to GET each of its 16 names first (all 404) on the way to creating them."""
    kube = CountingKube([node(f"n{i}") for i in range(16)], [job_obj("wide", nodes=16)])
    reconciler(kube).reconcile_job("team", "wide")
    assert len(pinned(kube, "wide")) == 16 and kube.gets == 0
    assert not planner.gang_ever_created(None) and not planner.gang_ever_created({"phase": "Pending", "restarts": 0, "placement": []})
    assert planner.gang_ever_created(kube.jobs[("team", "wide")]["status"])  # the admission record: from now on names are read


def test_a_finished_unlabelled_pod_holding_a_ranks_name_is_reported_once_the_gang_is_admitted():
    kube = CountingKube([node("n0"), node("n1")], [job_obj("solo", nodes=2)])
    kube.pods[("team", "solo-0")] = {"metadata": {"name": "solo-0", "namespace": "team", "labels": {}, "uid": "x"}, "spec": {}, "status": {"phase": "Succeeded"}}
    reconciler(kube).reconcile_job("team", "solo")  # the caches do not know it: admitted, and the create of solo-0 is refused
    assert scheduled(kube, "team", "solo")["reason"] == "GangPlaced"
    reconciler(kube).reconcile_job("team", "solo")  # the admission's status write asks for this one: it reads the name
    c = scheduled(kube, "team", "solo")
    assert (c["status"], c["reason"]) == ("False", "PodNameTaken") and "solo-0" in c["message"] and kube.gets >= 1
    assert kube.pods[("team", "solo-0")]["metadata"]["uid"] == "x"


class WriteCountingKube(FakeKube):
    """Records every write in order: ("status", phase) per status patch, ("create", kind) per create."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []

    def patch_status(self, ns, name, patch, resource_version=None):
        self.writes.append(("status", str(patch.get("phase"))))
        return super().patch_status(ns, name, patch, resource_version)

    def create(self, manifest):
        self.writes.append(("create", manifest["kind"]))
        return super().create(manifest)


def test_a_job_admitted_on_arrival_gets_one_status_write_before_its_service_and_pods():
    """The first reconcile used to write a Pending status and create the Service, then the pass wrote the admission."""
    kube = WriteCountingKube([node("n0"), node("n1")], [job_obj("solo", nodes=2)])
    reconciler(kube).reconcile_job("team", "solo")
    assert kube.writes[0] == ("status", "Pending") and [w for w in kube.writes if w[0] == "status"] == [("status", "Pending")]
    assert sorted(kube.writes[1:]) == [("create", "Pod"), ("create", "Pod"), ("create", "Service")]
    assert kube.jobs[("team", "solo")]["status"]["admission"]["nodes"] == ["n0", "n1"] and ("team", "solo") in kube.services


def test_a_new_job_that_does_not_fit_gets_its_first_status_from_the_pass():
    kube = WriteCountingKube([node("n0")], [job_obj("wide", nodes=2)])
    reconciler(kube).reconcile_job("team", "wide")
    assert sorted(kube.writes) == [("status", "Pending")]  # one status write: the refusal, not a bare Pending first; no Service while it waits
    assert scheduled(kube, "team", "wide")["reason"] == "Unschedulable" and not kube.pods
    reconciler(kube).reconcile_job("team", "wide", admit=False)  # a resync's reconcile (no pass) writes as before
    assert kube.jobs[("team", "wide")]["status"]["phase"] == "Pending"


def test_a_new_job_reconciled_without_a_pass_writes_its_status_at_once_and_no_service():
    kube = WriteCountingKube([node("n0")], [job_obj("solo", nodes=1)])
    reconciler(kube).reconcile_job("team", "solo", admit=False)
    assert ("status", "Pending") in kube.writes and ("create", "Service") not in kube.writes and not kube.pods


class MeetingKube(FakeKube):
    """Each admission's status write waits until ``parties`` of them are in flight at once (or 10 s pass)."""

    def __init__(self, *args, parties=2, **kwargs):
        super().__init__(*args, **kwargs)
        self.meeting = threading.Barrier(parties, timeout=10)

    def patch_status(self, ns, name, patch, resource_version=None):
        if isinstance(patch.get("admission"), dict):
            self.meeting.wait()  # BrokenBarrierError when the pass writes one admission after the other
        return super().patch_status(ns, name, patch, resource_version)


def test_a_pass_applies_the_admissions_it_decided_for_several_jobs_at_once():
    """100 jobs of 8 pods were admitted one after the other: each job's reads, status write, creates and Events in turn."""
    kube = MeetingKube([node(f"n{i}") for i in range(4)], [job_obj(f"j{i}", nodes=2) for i in range(2)])
    for ns, name in list(kube.jobs):
        reconciler(kube).reconcile_job(ns, name, admit=False)
    reconciler(kube).admission_pass()
    assert len(pinned(kube, "j0")) == 2 and len(pinned(kube, "j1")) == 2 and not pinned(kube, "j0") & pinned(kube, "j1")


class BehindKube(FakeKube):
    """The pass's first read of the pods predates a pod a concurrent reconcile then created, while its read of the jobs
    already shows that reconcile's status write (the admission record marked created): ``hidden`` pods are left out of
    the first ``list_active_pods`` and ``list_railtrain_pods`` calls after :meth:`hide`."""

    def hide(self, *names):
        self.hidden, self.left = set(names), {"active": 1, "railtrain": 1}

    def _seen(self, which, pods):
        if getattr(self, "left", {}).get(which):
            self.left[which] -= 1
            return [p for p in pods if p["metadata"]["name"] not in self.hidden]
        return pods

    def list_active_pods(self):
        return self._seen("active", super().list_active_pods())

    def list_railtrain_pods(self):
        return self._seen("railtrain", super().list_railtrain_pods())


def test_a_pass_that_read_the_pods_before_a_recorded_rank_was_created_does_not_place_a_gang_on_its_node():
    """The CI failure of test_admission_crash_cluster (an operator restarted after a crash between its admission record
    and its creates): the restarted operator's reconcile created the recorded rank 1 and marked the record created,
    while its admission pass had read the pods just before that create and the jobs just after the status write. The
    record no longer promised the node (created) and the pods did not show it taken: the pass placed the waiting gang
    on rank 1's node, two gangs on one node. The pass now counts the pods it reads again after the jobs too."""
    first = job_obj("first", nodes=2)
    first["metadata"]["creationTimestamp"] = "2026-11-29T11:00:00Z"
    kube = BehindKube([node(f"n{i}") for i in range(3)], [first])
    reconcile_all(kube)
    reconciler(kube).admission_pass()
    reconciler(kube).reconcile_job("team", "first", admit=False)  # sees its pods: the record marked created
    taken = pinned(kube, "first")
    assert len(taken) == 2 and kube.jobs[("team", "first")]["status"]["admission"]["created"] is True
    second = job_obj("second", nodes=2)
    second["metadata"]["creationTimestamp"] = "2026-11-29T11:00:01Z"
    kube.jobs[("team", "second")] = second
    reconciler(kube).reconcile_job("team", "second", admit=False)
    kube.hide("first-1")
    decisions = {d.job: d.result for d in reconciler(kube).admission_pass()}
    assert type(decisions["team/second"]).__name__ == "Refusal", decisions
    assert pinned(kube, "second") == set()
