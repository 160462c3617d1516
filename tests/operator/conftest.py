"""Fixtures for operator tests on the real local control plane: the operator as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import _FAILED


class OperatorProcess:
    """``python -m railtrain.operator`` against the test cluster, restartable.

    Logs go to ``log_path``; :meth:`tail` returns the end for failure messages.
    """

    def __init__(self, kubeconfig: Path, log_path: Path):
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "railtrain.operator", "--kubeconfig", str(self.kubeconfig), "--resync-seconds", "1",
             "--topology-preset", "railtrain"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crashed operator pod."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


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
    op = OperatorProcess(Path(cluster.kubeconfig), tmp_path_factory.mktemp("operator") / "operator.log")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def operator(operator_process, request):
    """The running operator; its log tail is printed when the test fails."""
    if operator_process.proc.poll() is not None:
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
