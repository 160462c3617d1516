"""A job the operator cannot turn into pods fails alone, with a reason naming the field; the others are admitted (no cluster).

Finding 1 of the new-user trial: ``resources: {cpu: lots}`` reached the
operator, the API server refused its pods, and the error ended the periodic
resync and every later admission pass. These tests run the planner and the
controller over :class:`~tests.operator.test_controller.FakeKube`; the same
sequence on a real control plane is in ``test_bad_spec_cluster.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from railtrain.operator import main, resync
from railtrain.operator.job.observed import spec_problem
from railtrain.operator.scheduling import snapshot as cluster
from railtrain.operator.job import planner
from railtrain.operator.job.conditions import find
from railtrain.operator.context import OperatorContext
from railtrain.operator.kube.errors import Rejected
from railtrain.operator.settings import Settings

from .builders import job_obj, node
from .test_controller import NOW, FakeKube, pinned, reconcile_all, reconciler


def failed(kube, name):
    status = kube.jobs[("team", name)].get("status") or {}
    c = find(status.get("conditions") or [], "Failed")
    return (status.get("phase"), c and c["reason"], c and c["message"])


@pytest.mark.parametrize("text", ["lots", "2GB", "inf", "nan", "", "1.2.3", "5 Gi"])
def test_parse_quantity_refuses_what_the_api_server_refuses(text):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        cluster.parse_quantity(text)


@pytest.mark.parametrize(("text", "value"), [("500m", 0.5), ("64Gi", 64 * 2**30), ("1e3", 1000.0), ("-5Gi", -5 * 2**30), (".5", 0.5), ("2k", 2000.0)])
def test_parse_quantity_reads_kubernetes_quantities(text, value):
    assert cluster.parse_quantity(text) == value


@pytest.mark.parametrize(
    ("resources", "field", "words"),
    [
        ({"cpu": "lots"}, "spec.resources.cpu", "'lots' is not a Kubernetes quantity"),
        ({"memory": "-5Gi"}, "spec.resources.memory", "must not be negative"),
        ({"shm": "lots"}, "spec.resources.shm", "'lots' is not a Kubernetes quantity"),
    ],
)
def test_a_bad_resource_amount_fails_the_job_with_invalid_spec_naming_field_and_value(resources, field, words):
    obj = job_obj("bad", nodes=1, resources={"gpus": 8, **resources})
    p = planner.plan(obj, [], True, NOW)
    c = find(p.status["conditions"], "Failed")
    assert p.status["phase"] == "Failed" and c["reason"] == "InvalidSpec"
    assert field.rsplit(".", 1)[1] in c["message"] and (words in c["message"] or "quantity" in c["message"] or "negative" in c["message"]), c["message"]
    assert p.create_pods == [] and planner.admission_request(obj, [], NOW) is None
    assert ("Warning", "InvalidSpec") in {(t, r) for t, r, _ in p.events}


def test_spec_problem_names_the_field_of_a_bad_amount():
    job = planner.parse_job(job_obj("bad", nodes=1))
    job.spec.resources.cpu = "lots"  # past the models: stored before a stricter schema
    assert spec_problem(job) == "spec.resources.cpu: 'lots' is not a Kubernetes quantity (e.g. 500m, 4, 64Gi)"
    job.spec.resources.cpu = "16"
    assert spec_problem(job) is None


def test_a_bad_job_next_to_good_ones_fails_alone_and_the_good_ones_are_admitted():
    bad = job_obj("bad", nodes=1, resources={"gpus": 8, "cpu": "lots"})
    good = job_obj("good", nodes=2)
    bad["metadata"]["creationTimestamp"], good["metadata"]["creationTimestamp"] = "2026-11-29T11:00:00Z", "2026-11-29T11:00:01Z"
    kube = FakeKube([node("n0"), node("n1")], [bad, good])
    reconcile_all(kube)
    reconciler(kube).admission_pass()
    assert pinned(kube, "good") == {"n0", "n1"}
    phase, reason, _ = failed(kube, "bad")
    assert (phase, reason) == ("Failed", "InvalidSpec") and pinned(kube, "bad") == set()
    assert not [p for p in kube.pods.values() if p["metadata"]["name"].startswith("bad-")]


def test_a_job_whose_status_cannot_be_read_is_left_out_of_the_pass_alone(caplog):
    odd = job_obj("odd", nodes=1, status={"requeueAfter": "not a time"})
    kube = FakeKube([node("n0"), node("n1")], [odd, job_obj("good", nodes=1)])
    reconciler(kube).reconcile_job("team", "good", admit=False)  # odd's own reconcile fails alike (the resync isolates it)
    with caplog.at_level(logging.WARNING, "railtrain.operator"):
        reconciler(kube).admission_pass()
    assert pinned(kube, "good")
    assert any("team/odd left out of this admission pass" in r.getMessage() for r in caplog.records)


class RefusingKube(FakeKube):
    """Refuses the pods of job ``bad`` as the API server does a quantity it cannot parse."""

    def create(self, manifest):
        if manifest["kind"] == "Pod" and manifest["metadata"]["name"].startswith("bad-"):
            raise Rejected("Pod", manifest["metadata"]["name"], 400, 'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression')
        return super().create(manifest)


def test_pods_the_api_server_refuses_fail_their_job_with_pod_rejected_and_an_event():
    kube = RefusingKube([node("n0")], [job_obj("bad", nodes=1), job_obj("good", nodes=1)])
    reconcile_all(kube)
    reconciler(kube).admission_pass()  # admitted first (queue order), its pods are created: refused
    phase, reason, message = failed(kube, "bad")
    assert (phase, reason) == ("Failed", planner.REJECTED)
    assert "refused Pod bad-0 (400)" in message and "cannot be handled as a Pod" in message
    assert ("bad", "Warning", planner.REJECTED) in kube.events
    reconcile_all(kube)  # a Failed job is not retried: no second event
    assert kube.events.count(("bad", "Warning", planner.REJECTED)) == 1
    reconciler(kube).admission_pass()  # the failed job's promise no longer counts: good gets the node
    assert pinned(kube, "good") == {"n0"}


class FlakyKube(FakeKube):
    """``get_job`` of job ``flaky`` answers 403; listing fails with ``errors`` while it has some left."""

    def __init__(self, *args, errors=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.errors = list(errors)

    def get_job(self, ns, name):
        if name == "flaky":
            raise ApiException(status=403, reason="Forbidden")
        return super().get_job(ns, name)

    def list_jobs(self, namespace=None):
        if self.errors:
            raise self.errors.pop(0)
        return super().list_jobs(namespace)


def operator_context(kube, unreachable_seconds: float = 60.0) -> OperatorContext:
    """The context the operator's handlers get as kopf's memo, around a fake API server; it leads (holds the Lease)."""
    ctx = OperatorContext(Settings(resync_seconds=0.01, unreachable_seconds=unreachable_seconds), kube, identity="me/1")
    ctx.state.leader = True
    return ctx


def test_a_resync_pass_isolates_one_jobs_error_and_admits_the_others(caplog):
    kube = FlakyKube([node("n0"), node("n1")], [job_obj("flaky", nodes=1), job_obj("good", nodes=1)])
    ctx = operator_context(kube)
    with caplog.at_level(logging.WARNING, "railtrain.operator"):
        resync.resync_pass(ctx)  # admits the good gang and creates it pinned (admit before creating)
    assert len(pinned(kube, "good")) == 1
    lines = [r.getMessage() for r in caplog.records if "team/flaky" in r.getMessage()]
    # one line from flaky's reconcile, one from applying its admission decision; each names the answer, no traceback
    assert len(lines) == 2 and all("403" in line for line in lines) and not any(r.exc_info for r in caplog.records)


class WebhookKube(FlakyKube):
    """``get_job`` of job ``flaky`` answers 500 because an admission webhook does not answer (Kueue's, restarting)."""

    def get_job(self, ns, name):
        if name == "flaky":
            err = ApiException(status=500, reason="Internal Server Error")
            err.body = json.dumps({"kind": "Status", "code": 500, "reason": "InternalError", "message": 'Internal error occurred: failed calling webhook '
                                   '"mworkload.kb.io": failed to call webhook: Post "https://127.0.0.1:9443/mutate": dial tcp 127.0.0.1:9443: connect: connection refused'})  # fmt: skip
            raise err
        return super().get_job(ns, name)


def test_a_failing_admission_webhook_is_one_jobs_trouble_and_the_resync_pass_goes_on(caplog):
    """Found with Kueue killed (tests/kueue/test_kueue_cluster.py): the API server answers 500 "failed calling webhook"
    for the objects Kueue's webhooks cover. The resync took any 5xx for the API server's own trouble and gave up the
    whole pass, so while Kueue was down no job was resynced or admitted by it. The webhook's failure is now the job's
    (one line), and the pass goes on: the good job is admitted and created."""
    kube = WebhookKube([node("n0"), node("n1")], [job_obj("flaky", nodes=1), job_obj("good", nodes=1)])
    ctx = operator_context(kube)
    with caplog.at_level(logging.WARNING, "railtrain.operator"):
        resync.resync_pass(ctx)
    assert len(pinned(kube, "good")) == 1
    lines = [r.getMessage() for r in caplog.records if "team/flaky" in r.getMessage()]
    assert lines and all('failed calling webhook "mworkload.kb.io"' in line for line in lines), lines


def test_the_resync_loop_survives_errors_and_stops_the_operator_when_the_server_is_gone(caplog):
    refused = urllib3.exceptions.MaxRetryError(None, "/apis", urllib3.exceptions.NewConnectionError(None, "Connection refused"))
    errors = [ApiException(status=429, reason="Too Many Requests"), ApiException(status=400, reason="Bad Request"), ApiException(status=500, reason="x")]
    kube = FlakyKube([node("n0")], [job_obj("good", nodes=1)], errors=errors + [refused] * 1000)
    ctx = operator_context(kube, unreachable_seconds=0.2)

    async def run():
        await asyncio.wait_for(resync.loop(ctx), timeout=30)

    with caplog.at_level(logging.WARNING, "railtrain.operator"):
        asyncio.run(run())
    assert ctx.stop.is_set() and "has not answered for" in ctx.state.fatal
    messages = [r.getMessage() for r in caplog.records]
    assert any("429" in m for m in messages) and any("400" in m for m in messages) and any("500" in m for m in messages)
    assert any("connection refused" in m for m in messages)
    assert not any(r.exc_info for r in caplog.records)  # one line each, no traceback


@pytest.mark.parametrize(
    ("kubeconfig", "env", "words"),
    [
        ("/nonexistent/kubeconfig", {}, "^--kubeconfig: no kubeconfig file at /nonexistent/kubeconfig; pass --kubeconfig PATH"),
        (None, {"KUBECONFIG": "/nonexistent/kubeconfig"}, "^KUBECONFIG: no kubeconfig file at /nonexistent/kubeconfig; point KUBECONFIG at an existing file"),
        (None, {"KUBECONFIG": None, "HOME": "/nonexistent-home"}, "^no kubeconfig file at ~/.kube/config and no in-cluster credentials"),
    ],
)
def test_preflight_without_a_kubeconfig_is_one_sentence(monkeypatch, kubeconfig, env, words):
    for key, value in env.items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(main.OperatorError, match=words):
        main.preflight(kubeconfig, wait_seconds=0)


def test_preflight_against_a_dead_server_is_one_sentence(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    with pytest.raises(main.OperatorError, match=r"^cannot reach the Kubernetes API server at https://127.0.0.1:1: connection refused; start a cluster"):
        main.preflight(str(path), wait_seconds=0)


def test_kopf_routine_lines_are_quieted():
    quiet = main.QuietKopf()
    success = logging.LogRecord("kopf.objects", logging.INFO, "", 0, "Handler 'on_pod_event' succeeded.", None, None)
    retry = logging.LogRecord("kopf._cogs.clients.api", logging.ERROR, "", 0, "Request attempt #1/9 failed; will retry: GET /x -> APITooManyRequestsError(429)", None, None)
    ours = logging.LogRecord("railtrain.operator", logging.INFO, "", 0, "x succeeded.", None, None)
    assert quiet.filter(success) is logging.getLogger().isEnabledFor(logging.DEBUG) and success.levelno == logging.DEBUG
    assert quiet.filter(retry) and retry.levelname == "WARNING"
    assert quiet.filter(ours) and ours.levelno == logging.INFO


def test_a_lease_renewed_by_another_operator_is_noticed_and_an_expired_one_is_not():
    from datetime import timedelta

    from railtrain.operator import lease

    held = {"spec": lease.lease_spec("other-host/7", NOW - timedelta(seconds=5))}
    assert lease.other_holder(held, "me/1", NOW) == "other-host/7"
    assert lease.other_holder(held, "other-host/7", NOW) is None  # our own
    assert lease.other_holder(held, "me/1", NOW + timedelta(seconds=lease.LEASE_SECONDS)) is None  # it stopped renewing
    assert lease.other_holder(None, "me/1", NOW) is None
    assert lease.other_holder({"spec": {"holderIdentity": "x", "renewTime": "garbage"}}, "me/1", NOW) is None
