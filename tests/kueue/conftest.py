"""Fixtures for TrainingJobs admitted by stock Kueue (cluster tier): one Kueue per worker session, beside the control plane.

- ``local_kueue`` (session): Kueue v0.17.0 (``bench/install-kueue.sh``, which
  ``.ci/test`` runs) as a local process against the session's ``cluster``,
  configured with ``integrations.externalFrameworks: [TrainingJob.v1alpha1.railtrain.dev]``
  (railtrain's operator writes the Workloads), and the Topology ``railtrain``
  (block, rack, hostname). Built here when not cached; skipped, with the
  script's reason, only where Go or the module proxy cannot serve it.
- ``kueue_queue`` (function): factory ``kueue_queue(namespace, node_labels, gpus)``
  giving ``namespace`` a LocalQueue on a fresh ClusterQueue with ``gpus``
  ``nvidia.com/gpu`` of quota (preempting lower priorities within it) and a TAS
  ResourceFlavor over the nodes carrying ``node_labels``, and a
  WorkloadPriorityClass ``<name>-high`` (1000); returns the LocalQueue's name
  (the ClusterQueue's and the flavor's too); deletes them afterwards.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator, Mapping

import pytest

from railtrain.cli.controlplane import kueue as kq
from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK
from tests.conftest import _FAILED

TOPOLOGY = "railtrain"


@pytest.fixture(scope="session")
def local_kueue(cluster, tmp_path_factory) -> Iterator[kq.LocalKueue]:
    root, reason = kq.ensure_kueue()
    if root is None:
        pytest.skip(reason)
    kueue = kq.LocalKueue(cluster, root, tmp_path_factory.mktemp("kueue") / "kueue.log", frameworks=("batch/job",),
                          external_frameworks=(kq.TRAININGJOB_FRAMEWORK,))
    kueue.start()
    try:
        kueue.apply([kq.topology(TOPOLOGY, (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME))])
        yield kueue
    finally:
        kueue.stop()


@pytest.fixture
def kueue_queue(local_kueue, request) -> Iterator[Callable[..., str]]:
    made: list[str] = []

    def make(namespace: str, node_labels: Mapping[str, str], gpus: int, tolerations: tuple[Mapping[str, Any], ...] = ()) -> str:
        name = f"q-{uuid.uuid4().hex[:8]}"
        local_kueue.apply([
            kq.resource_flavor(name, node_labels, TOPOLOGY, tolerations),
            kq.cluster_queue(name, name, {"nvidia.com/gpu": gpus}, preemption={"withinClusterQueue": "LowerPriority"}),
            kq.workload_priority_class(f"{name}-high", 1000),
            kq.local_queue(name, namespace, name),
        ])
        made.append(name)
        return name

    yield make
    for name in made:
        local_kueue.cluster.kubectl("delete", "clusterqueue", name, "--ignore-not-found", "--wait=false", check=False)
        local_kueue.cluster.kubectl("delete", "resourceflavor", name, "--ignore-not-found", "--wait=false", check=False)
        local_kueue.cluster.kubectl("delete", "workloadpriorityclass", f"{name}-high", "--ignore-not-found", "--wait=false", check=False)
    if request.node.stash.get(_FAILED, False):
        print("---- Kueue log tail ----\n" + local_kueue.tail())
