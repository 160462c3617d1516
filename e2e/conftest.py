"""A cluster for the end-to-end suite: ``railtrain dev up`` by default, or an existing one."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests import polling
from tests.xdist_groups import kind_first, make_scheduler

REPO = Path(__file__).resolve().parents[1]
RAILTRAIN = [str(Path(sys.executable).with_name("railtrain"))]  # the installed console script


def railtrain(*args: str, kubeconfig: str | None = None, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the ``railtrain`` CLI as a subprocess from the repo root; returns the completed process."""
    env = os.environ | ({"KUBECONFIG": kubeconfig} if kubeconfig else {})
    proc = subprocess.run([*RAILTRAIN, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"railtrain {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


wait_for = functools.partial(polling.wait_for, interval=0.5)
""":func:`tests.polling.wait_for`, polling every 0.5 s by default: each check here runs kubectl or reads a real cluster."""


@dataclass
class E2ECluster:
    """Where the suite runs: a kubeconfig and a kubectl."""

    kubeconfig: str
    kubectl: str

    def kubectl_run(self, *args: str) -> str:
        return subprocess.run([self.kubectl, f"--kubeconfig={self.kubeconfig}", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session")
def e2e_cluster() -> Iterator[E2ECluster]:
    existing = os.environ.get("RAILTRAIN_E2E_KUBECONFIG")
    if existing:
        yield E2ECluster(existing, os.environ.get("RAILTRAIN_E2E_KUBECTL") or shutil.which("kubectl") or "kubectl")
        return
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    out = railtrain("dev", "up", "--nodes", "4", "--gpus-per-node", "8", "--name", name, timeout=1800).stdout
    kubeconfig = next(line.split("=", 1)[1].strip().strip("'\"") for line in out.splitlines() if line.startswith("export KUBECONFIG="))
    from railtrain.cli.controlplane.binaries import ensure_binaries

    try:
        yield E2ECluster(kubeconfig, str(ensure_binaries() / "kubectl"))
    finally:
        railtrain("dev", "down", "--name", name, check=False)


@pytest.fixture(scope="session")
def operator_proc(e2e_cluster: E2ECluster, tmp_path_factory) -> Iterator[subprocess.Popen]:
    log = tmp_path_factory.mktemp("e2e") / "operator.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*RAILTRAIN, "operator", "--kubeconfig", e2e_cluster.kubeconfig], stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if proc.returncode not in (0, -15, 143):
            print(log.read_text(errors="replace")[-4000:])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The kind tests first (tests/xdist_groups.py; also when only e2e/ is collected)."""
    kind_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``-n N --dist loadscope``: the kind tests one scope, the rest one per module (tests/xdist_groups.py)."""
    return make_scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (``rep_setup``, ``rep_call``), so fixtures can tell a failed test."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def app_images():
    """(operator, trainer) images built from the project's Dockerfiles; skipped with the reason where Docker cannot run."""
    from .kind_support import build_app_images

    return build_app_images()


@pytest.fixture(scope="session")
def kind_deletions() -> Iterator[list]:
    """Kind clusters being deleted in the background: ``(name, dev down process, its output file, start time)`` entries, each waited for when the session ends."""
    deletions: list = []
    yield deletions
    from .kind_support import wait_deleted

    wait_deleted(deletions)


@pytest.fixture(scope="package")
def kind_cluster(app_images, kind_deletions):
    """A kind cluster (1 control plane + 3 workers) with the chart installed; skipped with the reason where Docker cannot run.

    Package scope: one cluster for every kind test (they run first and together,
    tests/xdist_groups.py), deleted as soon as the run leaves ``e2e/``'s kind tests
    rather than idling until the session ends: its ``dev down`` runs in the
    background while the worker goes on with the rest of the suite, and the
    session waits for it at its end (``kind_deletions``).
    """
    from .kind_support import kind_cluster_session

    yield from kind_cluster_session(app_images, kind_deletions)


@pytest.fixture
def kind_ns(kind_cluster, request):
    """A fresh namespace on the kind cluster; diagnostics are printed when the test fails."""
    from .kind_support import kind_namespace

    yield from kind_namespace(kind_cluster, request)
