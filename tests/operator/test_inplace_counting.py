"""The operator counts in-place restarts from what the pods expose (pure, a fake API): node rank 0's supervisor ledger
read with the progress endpoint, counted once into the job-wide budget, an InPlaceRestart Event, and goodput's
running attempt ended with the in-place cause."""

from __future__ import annotations

import json
from datetime import timedelta

from railtrain.crds import inplace, launcher
from railtrain.operator import progress
from railtrain.operator.reconciler import Reconciler

from .builders import job_obj
from .test_controller import NOW, FakeKube
from .test_progress import trainer_text

LEDGER = inplace.Ledger(restarts=0, attempt=1, job=1, causes={"retryable": 1}, streak=1)


def supervised_job():
    status = {"phase": "Running", "jobRestarts": 0, "goodput": {"wallSeconds": 0, "lastUpdateTime": "2026-11-29T12:00:00Z", "attempts": [{"released": "2026-11-29T11:59:50Z"}]}}
    job = job_obj("ip", nodes=1, status=status)
    job["spec"]["runPolicy"] = {"restartInPlace": True}
    job["metadata"]["creationTimestamp"] = "2026-11-29T11:59:00Z"
    kube = FakeKube([], [job])
    kube.pods[("team", "ip-0")] = {"metadata": {"name": "ip-0"}, "status": {"podIP": "10.0.0.9"},
                                   "spec": {"containers": [{"name": "trainer", "command": [*launcher.SUPERVISOR, "torchrun"]}]}}  # fmt: skip
    return kube


def test_the_reader_counts_the_supervisors_in_place_restarts_once():
    kube, urls = supervised_job(), []

    def fetch(url):
        urls.append(url)
        return json.dumps({"ledger": LEDGER.to_json()}) if url.endswith("/ledger") else trainer_text()

    reader = progress.Reader(fetch=fetch)
    assert [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), NOW, Reconciler(kube).job_lock)] == [True]
    assert "http://10.0.0.9:29510/ledger" in urls
    st = kube.jobs[("team", "ip")]["status"]
    assert (st["jobRestarts"], st["inPlaceRestarts"], st["inPlace"]["attempt"]) == (1, 1, 1)
    assert ("ip", "Normal", "InPlaceRestart") in kube.events
    first, second = st["goodput"]["attempts"]
    assert first["inPlace"] == "retryable" and first["ended"] and second["firstStep"] == 120  # the progress read lands in the new attempt
    later = NOW + timedelta(seconds=6)
    assert [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), later, Reconciler(kube).job_lock)] == [True]
    st = kube.jobs[("team", "ip")]["status"]
    assert (st["jobRestarts"], st["inPlaceRestarts"]) == (1, 1) and [e for e in kube.events if e[2] == "InPlaceRestart"] == [("ip", "Normal", "InPlaceRestart")]


def test_a_ledger_of_another_gang_or_a_malformed_one_counts_nothing():
    kube = supervised_job()
    other = inplace.Ledger(restarts=4, attempt=3, job=3)
    for body in (json.dumps({"ledger": other.to_json()}), json.dumps({"ledger": {"attempt": "many"}}), "not json"):
        reader = progress.Reader(fetch=lambda url, body=body: body if url.endswith("/ledger") else trainer_text())
        [f.result(timeout=10) for f in reader.poll(kube, kube.list_jobs(), NOW, Reconciler(kube).job_lock)]
        assert kube.jobs[("team", "ip")]["status"].get("inPlaceRestarts") is None
        kube.jobs[("team", "ip")]["status"].pop("progress", None)


def test_describe_says_how_many_restarts_were_in_place():
    from tests.cli.test_jobviews import render
    from railtrain.cli import describe

    obj = job_obj("ip", status={"phase": "Running", "restarts": 1, "jobRestarts": 3, "inPlaceRestarts": 2,
                                "inPlace": {"restarts": 1, "attempt": 1, "jobRestarts": 1, "causes": {"hang": 1}}})  # fmt: skip
    obj["metadata"]["creationTimestamp"] = "2026-11-29T11:59:00Z"
    text = " ".join(render(describe.describe_view(obj, [], [], NOW), width=200).split())
    assert "Restarts: 1 (job 3, infrastructure 0); 2 of them in place (this gang: hang 1)" in text
