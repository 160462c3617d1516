"""Stock Kueue (sigs.k8s.io/kueue) as a local process beside railtrain on one local control plane, for the benchmark.

The process, certificates, CRDs and webhooks are
:mod:`railtrain.cli.controlplane.kueue`'s (shared with the cluster-tier tests);
this module adds the benchmark's queue objects: a Topology (block, rack,
hostname), a TAS ResourceFlavor over the KWOK nodes, one ClusterQueue with the
GPUs as quota, a LocalQueue per namespace, and the plain-pod groups
(:func:`pod_group`). Kueue runs with the ``batch/job`` and ``pod`` integrations;
its pod webhook sees only namespaces labelled :data:`NS_LABEL`.

Nothing of Kueue is changed: its fixed 1 s TAS batching wait
(``constants.UpdatesBatchPeriod``) stays and is reported by the benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from railtrain.cli.controlplane import LocalCluster
from railtrain.cli.controlplane import kueue as shared
from railtrain.cli.controlplane.kueue import GROUP, NS_LABEL, cached_root, ensure_kueue, free_port  # noqa: F401 (the bench scripts import them from here)
from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK

QUEUE = "bench"
TOPOLOGY_LEVELS = (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME)


class LocalKueue(shared.LocalKueue):
    """Kueue's manager against ``cluster``, with the TAS objects for its KWOK nodes.

    Args:
        cluster: the running local control plane.
        root: the Kueue cache folder (:func:`ensure_kueue`).
        gpus: the ClusterQueue's ``nvidia.com/gpu`` quota (all GPUs of the cluster).
        log_path: where the manager's output goes.
    """

    def __init__(self, cluster: LocalCluster, root: Path, gpus: int, log_path: Path):
        super().__init__(cluster, root, log_path, frameworks=("batch/job", "pod"), external_frameworks=(shared.TRAININGJOB_FRAMEWORK,))
        self.gpus = gpus

    def start(self, timeout: float = 180) -> None:
        """The manager (:meth:`railtrain.cli.controlplane.kueue.LocalKueue.start`), then the TAS queue objects.

        Raises:
            TimeoutError: the manager was not ready, or its webhooks did not
                answer, within ``timeout`` s (the log tail is in the message).
        """
        super().start(timeout)
        self.apply([
            shared.topology("railtrain", TOPOLOGY_LEVELS),
            shared.resource_flavor("tas", {"type": "kwok"}, "railtrain"),
            shared.cluster_queue(QUEUE, "tas", {"nvidia.com/gpu": self.gpus}),
        ], timeout)

    def enrol(self, namespace: str, pods: bool = True) -> None:
        """Give ``namespace`` a LocalQueue named :data:`QUEUE`; with ``pods``, label it for Kueue's pod webhook too
        (plain pod groups; TrainingJobs admitted through railtrain's integration need no pod webhook)."""
        if pods:
            self.cluster.kubectl("label", "namespace", namespace, f"{NS_LABEL}=true", "--overwrite")
        self.apply([shared.local_queue(QUEUE, namespace, QUEUE)])


def pod_group(pods: list[dict[str, Any]], group: str, topology: str = RAILTRAIN_RACK, mode: str = "preferred") -> list[dict[str, Any]]:
    """Turn railtrain's rendered ``pods`` of one gang into a Kueue plain-pod group (in place; returned).

    Each pod gets the queue and group labels, the group's total count and the
    TAS annotation ``kueue.x-k8s.io/podset-<mode>-topology: <topology>``.
    """
    for pod in pods:
        meta = pod["metadata"]
        meta.setdefault("labels", {}).update({f"{GROUP}/queue-name": QUEUE, f"{GROUP}/pod-group-name": group})
        meta.setdefault("annotations", {}).update({
            f"{GROUP}/pod-group-total-count": str(len(pods)), f"{GROUP}/podset-{mode}-topology": topology})
    return pods
