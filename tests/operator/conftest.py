"""Fixtures for operator tests on the real local control plane: the operator as a real process, API clients, job submission."""

from __future__ import annotations

from pathlib import Path

import pytest

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.operator.metrics import ENV_PORT
from tests.conftest import _FAILED, KubeClients
from tests.polling import wait_for

from .clusterkit import G, P, V


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the operator binds it moments later)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.fixture(scope="session")
def operator_process(cluster, kube, tmp_path_factory):
    from kubernetes.client.rest import ApiException

    from railtrain.crds import contract

    custom = kube.custom

    def served():  # Established can precede the API server serving the new route
        try:
            return custom.list_cluster_custom_object(contract.API_GROUP, contract.API_VERSION, contract.PLURAL) is not None
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    wait_for(served, 60, "the TrainingJob API to be served")
    op = OperatorProcess(
        Path(cluster.kubeconfig), tmp_path_factory.mktemp("operator") / "operator.log",
        resync_seconds=1, extra_args=("--topology-preset", "railtrain"), env={ENV_PORT: str(free_port())},
    )
    op.start()
    yield op
    op.stop()


@pytest.fixture
def operator(operator_process, request):
    """The running operator; its log tail is printed when the test fails."""
    if not operator_process.running():
        operator_process.start()
    yield operator_process
    if request.node.stash.get(_FAILED, False):
        print("---- operator log tail ----\n" + operator_process.tail())


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
