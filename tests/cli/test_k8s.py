"""Cluster-side errors of `submit` and `get` become one sentence each (no cluster needed)."""

from __future__ import annotations

import json
import socket

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from railtrain.cli import k8s
from railtrain.cli.errors import CliError
from railtrain.cli.main import app
from tests.cli import manifests

runner = CliRunner()


def api_error(status: int, body: dict | str) -> ApiException:
    return ApiException(status=status, reason="x", body=body if isinstance(body, str) else json.dumps(body))


class FakeApi:
    """Stands in for CustomObjectsApi: raises the given error from every call, or records creates."""

    def __init__(self, error: Exception | None = None):
        self.error = error
        self.created: list[tuple[str, dict]] = []

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kwargs):
        assert kwargs.get("field_validation") == "Strict"
        if self.error:
            raise self.error
        self.created.append((namespace, body))
        return body

    def get_namespaced_custom_object(self, *args, **kwargs):
        raise self.error

    def list_namespaced_custom_object(self, *args, **kwargs):
        raise self.error


def cluster(error=None) -> k8s.Cluster:
    return k8s.Cluster(api=FakeApi(error), namespace="default", host="https://127.0.0.1:6443")


UNPROCESSABLE = {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
    "message": 'TrainingJob.railtrain.dev "tiny" is invalid: [spec.nodes: Invalid value: 0: spec.nodes in body should be greater than or equal to 1, spec: Invalid value: "object": spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode (the world size)]',
    "details": {"name": "tiny", "group": "railtrain.dev", "kind": "TrainingJob", "causes": [
        {"reason": "FieldValueInvalid", "message": "Invalid value: 0: spec.nodes in body should be greater than or equal to 1", "field": "spec.nodes"},
        {"reason": "FieldValueInvalid", "message": 'Invalid value: "object": spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode (the world size)', "field": "spec"},
    ]},
}


def test_refusal_gives_one_sentence_per_cause():
    with pytest.raises(CliError) as info:
        k8s.create_job(cluster(api_error(422, UNPROCESSABLE)), "default", manifests.job())
    assert info.value.messages == [
        "the API server refused trainingjob tiny: Invalid value: 0: spec.nodes in body should be greater than or equal to 1",
        "the API server refused trainingjob tiny: spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode (the world size)",
    ]


def test_refusal_without_causes_uses_the_status_message():
    status = {"kind": "Status", "code": 400, "message": '.spec.bogus: field not declared in schema', "reason": "BadRequest"}
    with pytest.raises(CliError) as info:
        k8s.create_job(cluster(api_error(400, status)), "default", manifests.job())
    assert info.value.messages == ["the API server refused trainingjob tiny: .spec.bogus: field not declared in schema"]


@pytest.mark.parametrize(
    "status, body, expected",
    [
        (409, {"kind": "Status", "reason": "AlreadyExists", "code": 409}, "trainingjob tiny already exists in namespace default"),
        (404, "404 page not found", "the TrainingJob CRD (trainingjobs.railtrain.dev) is not installed"),
        (404, {"kind": "Status", "reason": "NotFound", "details": {"name": "nope", "kind": "namespaces"}}, "--namespace: namespace default does not exist"),
        (403, {"kind": "Status", "message": 'trainingjobs.railtrain.dev is forbidden: User "bob" cannot create resource'}, "not allowed by the Kubernetes API server"),
        (401, {"kind": "Status"}, "rejected the kubeconfig's credentials"),
    ],
)
def test_create_errors(status, body, expected):
    with pytest.raises(CliError) as info:
        k8s.create_job(cluster(api_error(status, body)), "default", manifests.job())
    assert len(info.value.messages) == 1 and expected in info.value.messages[0]


def test_get_missing_job_vs_missing_crd():
    not_found = {"kind": "Status", "reason": "NotFound", "details": {"name": "nope", "group": "railtrain.dev", "kind": "trainingjobs"}}
    with pytest.raises(CliError, match="^trainingjob nope not found in namespace default$"):
        k8s.get_job(cluster(api_error(404, not_found)), "default", "nope")
    with pytest.raises(CliError, match="CRD .* is not installed"):
        k8s.get_job(cluster(api_error(404, "404 page not found")), "default", "nope")
    with pytest.raises(CliError, match="CRD .* is not installed"):
        k8s.list_jobs(cluster(api_error(404, "404 page not found")), "default")


def test_create_sets_the_namespace():
    c = cluster()
    k8s.create_job(c, "team-a", manifests.job())
    assert c.api.created[0][0] == "team-a" and c.api.created[0][1]["metadata"] == {"name": "tiny", "namespace": "team-a"}


def test_missing_kubeconfig_names_the_flag(tmp_path):
    result = runner.invoke(app, ["get", "--kubeconfig", str(tmp_path / "none.yaml")])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: --kubeconfig: no kubeconfig file at {tmp_path / 'none.yaml'}; pass --kubeconfig PATH or set KUBECONFIG (start a local cluster with 'railtrain dev up', which prints one)"
    ]


NOT_A_KUBECONFIG = "it is not a kubeconfig (a YAML mapping whose clusters, contexts and users are lists of named entries)"
BAD_KUBECONFIGS = [
    ("not YAML", "clusters: [\n", "not valid YAML at line 2, column 1: expected the node content, but found '<stream end>'"),
    ("a list", "- a\n", NOT_A_KUBECONFIG),
    ("a string", "hello\n", NOT_A_KUBECONFIG),
    ("clusters not a list", "current-context: x\nclusters: 5\n", NOT_A_KUBECONFIG),
]


@pytest.mark.parametrize("case, text, expected", BAD_KUBECONFIGS, ids=[c[0] for c in BAD_KUBECONFIGS])
def test_a_file_that_is_not_a_kubeconfig_is_one_sentence(tmp_path, case, text, expected):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    result = runner.invoke(app, ["get", "--kubeconfig", str(path)])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [f"error: kubeconfig {path} cannot be used: {expected}"]
    assert "Traceback" not in result.output


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable_kubeconfig(tmp_path):
    port = _closed_port()
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u", "namespace": "team-a"}}],
    }))
    return path, port


@pytest.mark.parametrize("command", [["get"], ["get", "tiny"], ["submit", "JOB"]])
def test_connection_refused_is_one_sentence(tmp_path, unreachable_kubeconfig, command):
    path, port = unreachable_kubeconfig
    job = manifests.write(tmp_path / "job.yaml", manifests.job())
    args = [str(job) if a == "JOB" else a for a in command]
    result = runner.invoke(app, [*args, "--kubeconfig", str(path)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}: connection refused")
    assert "Traceback" not in result.output


def test_the_kubeconfig_namespace_is_the_default(unreachable_kubeconfig):
    path, _ = unreachable_kubeconfig
    assert k8s.connect(str(path)).namespace == "team-a"


def test_submit_refuses_conflicting_namespaces(tmp_path, unreachable_kubeconfig):
    doc = manifests.job()
    doc["metadata"]["namespace"] = "team-a"
    job = manifests.write(tmp_path / "job.yaml", doc)
    result = runner.invoke(app, ["submit", str(job), "-n", "team-b", "--kubeconfig", str(unreachable_kubeconfig[0])])
    assert result.exit_code == 2
    assert "--namespace team-b differs from metadata.namespace team-a" in result.stderr


def test_submit_validates_before_connecting(tmp_path):
    job = manifests.write(tmp_path / "job.yaml", manifests.job(nodes=0))
    result = runner.invoke(app, ["submit", str(job), "--kubeconfig", str(tmp_path / "none.yaml")])
    assert result.exit_code == 1
    assert "spec.nodes" in result.stderr and "kubeconfig" not in result.stderr


def test_a_stale_kubeconfig_variable_is_named_not_suggested(tmp_path):
    """KUBECONFIG set to a file that is gone: the sentence names the variable instead of telling the user to set it."""
    stale = str(tmp_path / "gone.yaml")
    result = runner.invoke(app, ["get"], env={"KUBECONFIG": stale})
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: KUBECONFIG: no kubeconfig file at {stale}; point KUBECONFIG at an existing file or unset it "
        "(its cluster may be gone: start a local cluster with 'railtrain dev up', which prints one)"
    ]


def test_an_unreachable_kubelet_is_a_short_cause_not_the_dial_error():
    """The API server's dial error (a DNS lookup for a KWOK node) becomes a short cause and the fix, not the raw dump."""
    from railtrain.cli.k8s_jobs import _log_refusal

    message = ('Get "https://kwok-node-0:10250/containerLogs/ns/talk-0/trainer?follow=true&timestamps=true": '
               "dial tcp: lookup kwok-node-0 on 10.0.0.10:53: no such host")
    err = ApiException(status=500, reason="Internal Server Error")
    err.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": 500})
    said = _log_refusal(err)
    assert said == "the API server could not reach the kubelet of the pod's node (no such host; KWOK nodes have none, logs need a real kubelet such as kind's)"
    assert "lookup" not in said and "10250" not in said


def test_an_unexpected_exception_is_one_sentence_and_debug_keeps_the_traceback(capsys, monkeypatch):
    """A bug (any exception no rule describes) is one sentence naming its type; RAILTRAIN_DEBUG=1 re-raises it."""
    from railtrain.cli.main import _report

    monkeypatch.delenv("RAILTRAIN_DEBUG", raising=False)
    assert _report(ValueError("1 validation error for read_namespaced_pod_log\n_request_timeout\n  more")) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: unexpected ValueError: 1 validation error for read_namespaced_pod_log "
        "(a bug in railtrain; run again with RAILTRAIN_DEBUG=1 for the traceback)"
    ]
    monkeypatch.setenv("RAILTRAIN_DEBUG", "1")
    with pytest.raises(ValueError):
        _report(ValueError("boom"))
