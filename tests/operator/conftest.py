"""Fixtures for operator tests on the real local control plane: API clients, job submission (the operator process is tests/conftest.py's ``operator``)."""

from __future__ import annotations


import pytest

from tests.conftest import KubeClients

from .clusterkit import G, P, V


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
