"""Fixtures for operator tests on the real local control plane: the operator as a real process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from railtrain.cli.controlplane.operator_process import OperatorProcess
from tests.conftest import _FAILED


@pytest.fixture(scope="session")
def operator_process(cluster, tmp_path_factory):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from railtrain.crds import contract

    custom = client.CustomObjectsApi(cluster.api_client())

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
        resync_seconds=1, extra_args=("--topology-preset", "railtrain"),
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


def wait_for(check, timeout: float = 60.0, what: str = "condition", interval: float = 0.25):
    """Poll ``check()`` until it returns a truthy value or the deadline passes.

    Raises:
        AssertionError: naming ``what`` and the last value seen.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
