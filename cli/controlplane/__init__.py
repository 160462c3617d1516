"""A real local Kubernetes control plane for tests and ``railtrain dev``.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local
processes, started by kwokctl's binary runtime; KWOK simulates GPU nodes and
the lifecycle of their pods. No Docker is needed: ``install.sh`` builds every
binary from the Go module proxy once into ``~/.cache/railtrain``.

Public surface:
    :class:`~.cluster.LocalCluster` - start/stop one cluster, add GPU nodes.
    :func:`~.binaries.ensure_binaries` - build (cached) and locate the binaries.
    :func:`~.dev.dev_up` / :func:`~.dev.dev_down` - a cluster that outlives the
    Python process, for ``railtrain dev up|down``.
"""

from .binaries import BinariesError, ensure_binaries
from .cluster import ANNOTATION_KWOK_MESSAGE, KWOK_REFUSING_NODES, LABEL_KWOK_EVICT, LABEL_KWOK_EXIT, LABEL_KWOK_NOT_READY, LABEL_KWOK_TRAINER_EXIT, ClusterError, LocalCluster, wait_until
from .nodes import GPU_RESOURCE, LABEL_BLOCK, LABEL_HOSTNAME, LABEL_RACK

__all__ = [
    "ANNOTATION_KWOK_MESSAGE",
    "GPU_RESOURCE",
    "LABEL_BLOCK",
    "LABEL_HOSTNAME",
    "KWOK_REFUSING_NODES",
    "LABEL_KWOK_EVICT",
    "LABEL_KWOK_EXIT",
    "LABEL_KWOK_NOT_READY",
    "LABEL_KWOK_TRAINER_EXIT",
    "LABEL_RACK",
    "BinariesError",
    "ClusterError",
    "LocalCluster",
    "ensure_binaries",
    "wait_until",
]
