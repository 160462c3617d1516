"""``railtrain dev up|down``: a local GPU cluster that outlives the Python process.

The components run detached (each in its own session, with a pidfile under
``~/.cache/railtrain/clusters/<name>/pids``), so the cluster keeps running after
``railtrain dev up`` returns; ``railtrain dev down`` kills them by those
pidfiles from any later process. Nothing here prints: the CLI does the talking.
"""

from __future__ import annotations

from pathlib import Path

from .binaries import ensure_binaries
from .cluster import ClusterError, LocalCluster

DEV_NODE_PREFIX = "gpu-node"


def _crd_files() -> list[Path]:
    import railtrain.crds

    return sorted(Path(railtrain.crds.__file__).parent.glob("*.yaml"))


def dev_up(nodes: int = 4, gpus_per_node: int = 8, name: str = "railtrain") -> Path:
    """Start (or reuse) the local cluster ``name`` with ``nodes`` fake GPU nodes.

    Nodes are ``gpu-node-0 .. gpu-node-<nodes-1>``, each with ``gpus_per_node``
    ``nvidia.com/gpu``, four to a rack (``railtrain.dev/rack=rack-<k>``) and two
    racks to a block (``railtrain.dev/block=block-<k>``). railtrain's CRDs
    (every ``*.yaml`` shipped in ``railtrain.crds``) are installed and
    Established. If the cluster is already running with the same number of
    nodes it is reused as it is.

    Returns:
        Path of the cluster's admin kubeconfig (pass it as ``KUBECONFIG``).

    Raises:
        ValueError: ``nodes`` < 1 or ``gpus_per_node`` < 0.
        ClusterError: the cluster did not start, or it is already running
            with a different number of nodes (run :func:`dev_down` first).
        railtrain.cli.controlplane.binaries.BinariesError: the binaries are
            missing and could not be built (a cold build needs Go).
    """
    if nodes < 1 or gpus_per_node < 0:
        raise ValueError(f"nodes must be >= 1 and gpus_per_node >= 0, got {nodes}, {gpus_per_node}")
    cluster = LocalCluster(name, bin_dir=ensure_binaries(quiet=True))
    if cluster.is_running():
        existing = _dev_node_count(cluster)
        if existing != nodes:
            raise ClusterError(
                f"cluster {name!r} is already running with {existing} nodes, not {nodes}; "
                "run `railtrain dev down` first"
            )
        return cluster.kubeconfig
    cluster.start()
    try:
        cluster.add_gpu_nodes(nodes, gpus_per_node, name_prefix=DEV_NODE_PREFIX, topology_prefix="")
        cluster.install_crds(_crd_files())
    except BaseException:
        cluster.stop()
        raise
    return cluster.kubeconfig


def dev_down(name: str = "railtrain") -> bool:
    """Stop the local cluster ``name`` and delete its state (certificates, etcd data, logs).

    Returns:
        Whether there was anything to stop.
    """
    cluster = LocalCluster(name)
    existed = cluster.state_dir.exists()
    cluster.stop()
    return existed


def _dev_node_count(cluster: LocalCluster) -> int:
    from kubernetes import client

    with cluster.api_client() as api:
        items = client.CoreV1Api(api).list_node().items
    return sum(1 for n in items if n.metadata.name.startswith(f"{DEV_NODE_PREFIX}-"))
