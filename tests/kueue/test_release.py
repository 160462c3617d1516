"""A deleted job's Workload released for good (no cluster): the release retried on a newer version, the orphans named, the sweep's cadence."""

from __future__ import annotations

import copy

from railtrain.crds import contract
from railtrain.crds import kueue as names
from railtrain.operator import kueue, resync
from railtrain.operator.kueue import orphans, release_workload


def stored(name="trainingjob-a-1", job="a", uid="u-a", finalizers=(names.FINALIZER,), deleting=False, kind="TrainingJob"):
    meta = {"namespace": "ns", "name": name, "uid": f"wl-{name}", "resourceVersion": "1", "finalizers": list(finalizers),
            "ownerReferences": [{"apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}" if kind == "TrainingJob" else "batch/v1",
                                 "kind": kind, "name": job, "uid": uid, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T13:31:19Z"
    return {"metadata": meta, "spec": {}, "status": {}}


class RacingVerbs:
    """The Workload verbs release_workload uses, over one stored Workload whose first ``lost`` guarded writes lose to
    a newer version (409: the garbage collector deleting it, Kueue writing its status, at the same moment)."""

    def __init__(self, workload, lost=1):
        self.workload, self.lost, self.deleted, self.reads = workload, lost, [], 0

    def get_workload(self, namespace, name):
        self.reads += 1
        return copy.deepcopy(self.workload) if self.workload is not None else None

    def remove_finalizer(self, seen):
        if self.lost:
            self.lost -= 1
            self.workload["metadata"]["resourceVersion"] = str(int(self.workload["metadata"]["resourceVersion"]) + 1)
            self.workload["metadata"]["deletionTimestamp"] = "2026-12-05T13:31:19Z"  # the concurrent delete
            return False
        self.workload = None if self.workload["metadata"].get("deletionTimestamp") else {
            **self.workload, "metadata": {**self.workload["metadata"], "finalizers": []}}
        return True

    def delete_workload(self, namespace, name, uid):
        self.deleted.append(name)
        if self.workload is not None:
            self.workload = None


def test_a_release_that_loses_to_a_concurrent_delete_reads_again_and_drops_the_finalizer():
    """The CI fault of stop 44 at its root: the finalizer removal refused with 409 (the Workload changed since read)
    was dropped silently, so the Workload kept railtrain's finalizer for good. Now it is read again and retried."""
    verbs = RacingVerbs(stored(), lost=2)
    assert release_workload(verbs, "ns", "trainingjob-a-1", "u-a") is True
    assert verbs.workload is None and verbs.reads == 3


def test_a_release_still_losing_after_its_tries_says_so():
    verbs = RacingVerbs(stored(), lost=kueue.RELEASE_TRIES + 1)
    assert release_workload(verbs, "ns", "trainingjob-a-1", "u-a") is False
    assert names.FINALIZER in verbs.workload["metadata"]["finalizers"]


def test_a_release_leaves_a_workload_of_a_job_created_since_under_the_same_name():
    verbs = RacingVerbs(stored(uid="u-new"), lost=0)
    assert release_workload(verbs, "ns", "trainingjob-a-1", "u-old") is True
    assert verbs.workload is not None and verbs.deleted == []


def test_a_release_of_a_workload_already_being_deleted_only_drops_the_finalizer():
    verbs = RacingVerbs(stored(deleting=True), lost=0)
    assert release_workload(verbs, "ns", "trainingjob-a-1", "u-a") is True
    assert verbs.workload is None and verbs.deleted == []


def test_orphans_are_the_workloads_of_trainingjobs_that_are_gone_and_nothing_else():
    workloads = [
        stored("trainingjob-a-1", "a", "u-a"),  # its job exists
        stored("trainingjob-b-2", "b", "u-b", deleting=True),  # its job is gone
        stored("job-c-3", "c", "u-c", kind="Job"),  # Kueue's own batch/v1 integration
        {"metadata": {"namespace": "ns", "name": "prebuilt", "labels": {names.PREBUILT_WORKLOAD_LABEL: "x"}}},  # MultiKueue's, not adopted yet
    ]
    assert orphans(workloads, {"u-a"}) == [("ns", "trainingjob-b-2", "b", "u-b")]
    assert orphans(workloads, {"u-a", "u-b"}) == []


def test_the_sweep_runs_on_the_first_leading_pass_then_once_a_period():
    assert resync.sweep_due(None, 5.0)
    assert not resync.sweep_due(100.0, 100.0 + kueue.ORPHAN_SWEEP_SECONDS - 1)
    assert resync.sweep_due(100.0, 100.0 + kueue.ORPHAN_SWEEP_SECONDS)


class Refusing:
    """A Kube whose every Workload call answers ``status`` (403: the chart without ``kueue.enabled`` grants no Kueue
    verbs; 404: Kueue not installed; 500: the server's trouble)."""

    def __init__(self, status):
        from kubernetes.client.rest import ApiException

        class Custom:
            def __getattr__(self, name):
                def refuse(*args, **kwargs):
                    raise ApiException(status=status, reason="refused")

                return refuse

        self.custom = Custom()

    def _fenced(self):
        pass


def test_the_sweep_never_fails_the_resync_pass_it_runs_in(caplog):
    """Found on kind: with the chart's ``kueue.enabled`` false the operator may not list Workloads (403), and the
    sweep's error failed every resync pass, so the pass's admission never ran. 403 and 404 mean nothing to sweep
    (no word); any other error is one line and the next sweep retries."""
    for status in (403, 404):
        assert kueue.sweep(Refusing(status), []) == 0
    assert not caplog.records
    assert kueue.sweep(Refusing(500), []) == 0
    assert "could not list Workloads" in caplog.text
