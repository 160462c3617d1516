"""The operator's metrics helpers (pure), its HTTP endpoint (/metrics, /healthz, /readyz) and its JSON log lines."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

import pytest
from kubernetes.client.rest import ApiException
from urllib3.exceptions import MaxRetryError

from railtrain.operator import logformat, metrics, serve


def test_phase_counts_name_every_phase_and_count_a_new_job_as_pending():
    jobs = [{"status": {"phase": "Running"}}, {"status": {"phase": "Running"}}, {}, {"status": {"phase": "Failed"}}]
    assert metrics.phase_counts(jobs) == {"Pending": 1, "Running": 2, "Restarting": 0, "Succeeded": 0, "Failed": 1, "Suspended": 0}


@pytest.mark.parametrize(
    "err,kind",
    [
        (ApiException(status=409), "conflict"), (ApiException(status=404), "not_found"), (ApiException(status=403), "forbidden"),
        (ApiException(status=422), "invalid"), (ApiException(status=429), "throttled"), (ApiException(status=503), "server"),
        (ApiException(status=0), "unreachable"), (MaxRetryError(None, "/"), "unreachable"), (KeyError("spec"), "internal"),
    ],
)  # fmt: skip
def test_error_kind_names_the_kind_of_a_reconcile_error(err, kind):
    assert metrics.error_kind(err) == kind


def test_a_5xx_because_an_admission_webhook_failed_is_its_own_kind_naming_the_webhook():
    from railtrain.operator.kube.errors import WebhookFailed, typed

    err = ApiException(status=500, reason="Internal Server Error")
    err.body = '{"kind": "Status", "code": 500, "message": "Internal error occurred: failed calling webhook \\"vworkload.kb.io\\": failed to call webhook: connection refused"}'
    answer = typed(err)
    assert isinstance(answer, WebhookFailed) and answer.webhook == "vworkload.kb.io" and metrics.error_kind(err) == "webhook"
    assert not isinstance(typed(ApiException(status=500, reason="etcdserver: request timed out")), WebhookFailed)


def test_every_known_restart_reason_and_error_kind_is_exported_at_zero_before_it_happens():
    # increase() over a series born at 1 counts nothing: the dashboard would never show a first restart or error
    from prometheus_client import REGISTRY, generate_latest

    text = generate_latest(REGISTRY).decode()
    assert {"Restarting", "NodeLost", "NodeQuarantined", "ElasticGrow"} <= set(metrics.RESTART_REASONS)
    for reason in metrics.RESTART_REASONS:
        assert f'railtrain_gang_restarts_total{{reason="{reason}"}}' in text
    assert {metrics.error_kind(e) for e in (ApiException(status=409), ApiException(status=500), KeyError("x"))} <= set(metrics.ERROR_KINDS)
    for kind in metrics.ERROR_KINDS:
        assert f'railtrain_reconcile_errors_total{{kind="{kind}"}}' in text


CREATED = "2026-12-01T10:00:00Z"


@pytest.mark.parametrize(
    "old,new,seconds",
    [
        ({}, {"startTime": "2026-12-01T10:00:42.500000Z"}, 42.5),  # the first gang is Running
        ({}, {}, None),  # not yet
        ({"startTime": "2026-12-01T10:00:42Z"}, {"startTime": "2026-12-01T10:00:42Z"}, None),  # already counted
        ({"conditions": [{"type": "Running", "status": "False"}]}, {"startTime": "2026-12-01T11:00:00Z"}, None),  # resumed: not the first time
    ],
)  # fmt: skip
def test_time_to_running_counts_only_the_first_all_running_gang(old, new, seconds):
    assert metrics.time_to_running(old, new, CREATED) == seconds


def sample(name, labels=None):
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_a_written_transition_counts_its_restart_reason_gang_timeout_and_time_to_running():
    restarts, timeouts, runs = sample("railtrain_gang_restarts_total", {"reason": "NodeLost"}), sample("railtrain_gang_timeouts_total"), sample("railtrain_job_time_to_running_seconds_count")
    metrics.observe_transition({"restarts": 1}, {"restarts": 2, "conditions": [{"type": "Scheduled", "reason": "NodeLost"}]}, CREATED)
    metrics.observe_transition({"requeues": 0}, {"requeues": 1}, CREATED)
    metrics.observe_transition({}, {"startTime": "2026-12-01T10:00:07Z"}, CREATED)
    assert sample("railtrain_gang_restarts_total", {"reason": "NodeLost"}) == restarts + 1
    assert sample("railtrain_gang_timeouts_total") == timeouts + 1
    assert sample("railtrain_job_time_to_running_seconds_count") == runs + 1
    assert sample("railtrain_job_time_to_running_seconds_bucket", {"le": "10.0"}) >= 1


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_health_is_live_until_the_last_pass_is_stale_and_ready_only_after_a_first_pass():
    clock = Clock()
    health = serve.Health(stale_seconds=30, clock=clock)
    assert health.live()[0] and not health.ready()[0]  # starting: live, not ready
    clock.t += 10
    health.passed()
    assert health.live()[0] and health.ready()[0]
    clock.t += 31
    ok, line = health.live()
    assert not ok and not health.ready()[0]
    assert line == "stuck: the last resync pass completed 31.0 s ago (limit 30 s)"
    clock.t += 1000  # never passed at all: stale counts from the start
    fresh = serve.Health(stale_seconds=30, clock=clock)
    clock.t += 31
    assert not fresh.live()[0] and "no resync pass completed yet" in fresh.live()[1]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_one_port_serves_metrics_healthz_and_readyz():
    clock = Clock()
    health = serve.Health(stale_seconds=30, clock=clock)
    server = serve.start(0, health, addr="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert get(base + "/healthz")[0] == 200
        assert get(base + "/readyz")[0] == 503
        health.passed()
        assert get(base + "/readyz") == (200, "ok: the last resync pass completed 0.0 s ago (limit 30 s)\n")
        clock.t += 60
        assert get(base + "/healthz")[0] == 503
        status, text = get(base + "/metrics")
        assert status == 200
        for name in ("railtrain_jobs", "railtrain_admission_pass_duration_seconds_bucket", "railtrain_reconcile_errors_total",
                     "railtrain_resync_last_completed_timestamp_seconds", "railtrain_quarantined_nodes"):  # fmt: skip
            assert f"# TYPE {name.removesuffix('_bucket')} " in text, name
    finally:
        server.shutdown()


def test_json_log_format_writes_one_object_per_line():
    record = logging.LogRecord("railtrain.operator", logging.WARNING, __file__, 1, "job %s/%s: «%s»", ("ns", "a", "x"), None)
    record.created = 1764583200.25
    line = logformat.JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line) == {"time": "2025-12-01T10:00:00.250Z", "level": "WARNING", "logger": "railtrain.operator", "message": "job ns/a: «x»"}


def test_a_deleted_jobs_goodput_series_are_dropped():
    from prometheus_client import REGISTRY

    metrics.observe_goodput("ns", "gone", {"queuedSeconds": 3, "startingSeconds": 1, "trainingSeconds": 5, "lostSeconds": {"restart_job": 2}, "ratio": 0.45})
    assert REGISTRY.get_sample_value("railtrain_job_goodput_seconds", {"namespace": "ns", "trainingjob": "gone", "cause": "restart_job"}) == 2
    metrics.forget_job("ns", "gone")
    metrics.forget_job("ns", "gone")  # twice: nothing left to drop is fine
    assert REGISTRY.get_sample_value("railtrain_job_goodput_seconds", {"namespace": "ns", "trainingjob": "gone", "cause": "queued"}) is None
    assert REGISTRY.get_sample_value("railtrain_job_goodput_ratio", {"namespace": "ns", "trainingjob": "gone"}) is None


def test_a_replica_group_jobs_degraded_seconds_are_exported_and_dropped_with_it():
    """Issue 31: status.goodput.degradedSeconds (an absent group's share of the job, not lost time) as a gauge."""
    from prometheus_client import REGISTRY

    labels = {"namespace": "ns", "trainingjob": "ft"}
    metrics.observe_goodput("ns", "ft", {"trainingSeconds": 100, "ratio": 0.9, "degradedSeconds": 12.5})
    assert REGISTRY.get_sample_value("railtrain_job_degraded_seconds", labels) == 12.5
    metrics.observe_goodput("ns", "plain", {"trainingSeconds": 100, "ratio": 0.9})  # no groups: no series
    assert REGISTRY.get_sample_value("railtrain_job_degraded_seconds", {"namespace": "ns", "trainingjob": "plain"}) is None
    metrics.forget_job("ns", "ft")
    assert REGISTRY.get_sample_value("railtrain_job_degraded_seconds", labels) is None
