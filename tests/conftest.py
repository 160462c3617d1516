"""Fixtures for tests against the real local control plane (``pytest -m cluster``).

- ``cluster`` (session): a :class:`LocalCluster` started once per session, with
  every ``crds/*.yaml`` CRD installed and Established; stopped at the end (and
  by a watchdog if this process dies without cleaning up). It has no nodes.
- ``gpu_nodes`` (function): factory ``gpu_nodes(count, gpus_per_node=8, **kw)``
  adding fake GPU nodes with a prefix unique to the test; returns their names
  and deletes them afterwards. ``kw`` goes to ``LocalCluster.add_gpu_nodes``.
- ``kube`` (session): :class:`KubeClients`, ``kubernetes.client`` API objects
  configured from the cluster's kubeconfig.
- ``namespace`` (function): a fresh namespace, whose ``default``
  ServiceAccount exists; pods and events are printed if the test failed, then
  it is deleted (without waiting).

- ``operator_process`` (session) / ``operator`` (function): the railtrain
  operator as a real process against ``cluster`` (one per session, shared by
  every directory's tests, so two operators never act on one cluster); its
  log tail is printed when a test using ``operator`` failed.

Helper: ``fixed_namespace(kube, name)``, a namespace with a fixed name for a
module-scoped fixture (a context manager).

Every test that uses ``cluster`` (directly or through the others) is marked
``cluster``, so ``-m "not cluster"`` runs everything else. Under the README's
``pytest -n 3`` command (``tests/xdist_groups.py``: one xdist scope per module,
the kind tests first and in one scope) each worker starts its own ``cluster``
and operator (named by the worker's pid, on free ports, so two never meet).
"""

from __future__ import annotations

import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from railtrain.cli.controlplane import LocalCluster, wait_until
from tests.xdist_groups import kind_first, make_scheduler

REPO = Path(__file__).resolve().parents[1]
_FAILED = pytest.StashKey[bool]()


@dataclass
class KubeClients:
    """``kubernetes.client`` API objects sharing one ``ApiClient``."""

    api_client: Any
    core: Any = field(init=False)
    apps: Any = field(init=False)
    batch: Any = field(init=False)
    custom: Any = field(init=False)
    apiext: Any = field(init=False)
    coordination: Any = field(init=False)

    def __post_init__(self) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.apiext = client.ApiextensionsV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    kind_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``-n N --dist loadscope``: one scope per module, the kind tests one scope (tests/xdist_groups.py)."""
    return make_scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when in ("setup", "call") and report.failed:
        item.stash[_FAILED] = True


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "t"


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    local = LocalCluster(f"pytest-{os.getpid()}")
    local.start(owner_pid=os.getpid())
    try:
        local.install_crds(sorted((REPO / "crds").glob("*.yaml")))
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster) -> Iterator[KubeClients]:
    api = cluster.api_client()
    try:
        yield KubeClients(api)
    finally:
        api.close()


@pytest.fixture
def gpu_nodes(request: pytest.FixtureRequest, cluster: LocalCluster, kube: KubeClients) -> Iterator[Callable[..., list[str]]]:
    created: list[str] = []

    def add(count: int, gpus_per_node: int = 8, **kwargs: Any) -> list[str]:
        prefix = f"{_slug(request.node.name, 30)}-{uuid.uuid4().hex[:5]}"
        names = cluster.add_gpu_nodes(count, gpus_per_node, name_prefix=kwargs.pop("name_prefix", prefix), **kwargs)
        created.extend(names)
        return names

    yield add
    from kubernetes.client.exceptions import ApiException

    for name in created:
        try:
            kube.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:  # the test may have deleted it itself
                raise


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: KubeClients) -> Iterator[str]:
    name = f"{_slug(request.node.name, 50)}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": name, "labels": {"railtrain.dev/test": "true"}}})
    # The ServiceAccount admission plugin rejects pods until this exists.
    wait_until(lambda: kube.core.read_namespaced_service_account("default", name), 30, f"ServiceAccount {name}/default")
    yield name
    if request.node.stash.get(_FAILED, False):
        print(_dump_namespace(kube, name))
    kube.core.delete_namespace(name)


@contextmanager
def fixed_namespace(kube: KubeClients, name: str) -> Iterator[str]:
    """Create namespace ``name`` for a module's tests, yield the name, then delete it (without waiting).

    An existing namespace of that name (409 AlreadyExists: e.g. left by an
    interrupted run) is reused rather than refused.
    """
    from kubernetes.client.exceptions import ApiException

    try:
        kube.core.create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise
    yield name
    kube.core.delete_namespace(name)


def _dump_namespace(kube: KubeClients, namespace: str) -> str:
    lines = [f"===== pods in {namespace}"]
    for pod in kube.core.list_namespaced_pod(namespace).items:
        status = pod.status
        lines.append(f"{pod.metadata.name}: phase={status.phase} node={pod.spec.node_name} labels={pod.metadata.labels}")
        for cond in status.conditions or []:
            lines.append(f"    {cond.type}={cond.status} {cond.reason or ''} {cond.message or ''}".rstrip())
        for cs in status.container_statuses or []:
            state = {k: v for k, v in cs.state.to_dict().items() if v}
            lines.append(f"    container {cs.name}: {state}")
    lines.append(f"===== events in {namespace}")
    events = kube.core.list_namespaced_event(namespace).items
    for ev in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp)):
        lines.append(f"{ev.type} {ev.reason} {ev.involved_object.kind}/{ev.involved_object.name}: {ev.message}")
    return "\n".join(lines)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the operator binds it moments later), below the kernel's ephemeral range so
    that no outgoing connection takes it first (:func:`railtrain.cli.local.free_ports`)."""
    from railtrain.cli.local import free_ports

    return free_ports(1)[0]


@pytest.fixture(scope="session")
def operator_process(cluster, kube, tmp_path_factory):
    from kubernetes.client.rest import ApiException

    from railtrain.cli.controlplane.operator_process import OperatorProcess
    from railtrain.crds import contract
    from railtrain.operator.metrics import ENV_PORT
    from tests.polling import wait_for

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


