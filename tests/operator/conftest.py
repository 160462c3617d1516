"""Fixtures for operator tests on the real local control plane: API clients, job submission (the operator process is tests/conftest.py's ``operator``)."""

from __future__ import annotations

import pytest

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.operator.metrics import ENV_PORT
from tests.conftest import KubeClients, free_port  # noqa: F401  (free_port: re-exported for this directory's tests)

from .clusterkit import G, P, V


def scrape(op: OperatorProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The operator's /metrics as ``{(sample name, sorted labels): value}`` (prometheus-client's own text parser); ``{}`` while it does not answer."""
    import urllib.error
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.env[ENV_PORT]}/metrics", timeout=10) as r:
            text = r.read().decode()
    except urllib.error.URLError:  # not serving yet (the operator is starting): a wait_for polls again
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture
def api(kube: KubeClients):
    """``(CoreV1Api, CustomObjectsApi)`` on the session's cluster (the ``kube`` clients)."""
    return kube.core, kube.custom


@pytest.fixture
def submit(api, namespace):
    """``submit(body)`` creates a TrainingJob in the test's namespace; every job submitted is deleted at the end,
    so no waiting job outlives its test's nodes (a 404 there is fine: the test deleted it itself)."""
    from kubernetes.client.rest import ApiException

    _, custom = api
    names: list[str] = []

    def create(body):
        custom.create_namespaced_custom_object(G, V, namespace, P, body)
        names.append(body["metadata"]["name"])

    yield create
    for name in names:
        try:
            custom.delete_namespaced_custom_object(G, V, namespace, P, name)
        except ApiException as err:
            if err.status != 404:
                raise
