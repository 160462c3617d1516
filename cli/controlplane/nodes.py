"""Fake GPU nodes for the local cluster: pure manifest builders and checks.

KWOK (``--manage-all-nodes``) adopts every Node object and reports it Ready;
nothing runs on it. A node is an ordinary ``v1.Node`` whose ``status`` carries
the capacity the scheduler fits pods against; the API server keeps the status
a client sets on create (only Nodes allow that).
"""

from __future__ import annotations

from typing import Any, Mapping

from railtrain.crds import labels as wellknown

LABEL_BLOCK = wellknown.RAILTRAIN_BLOCK
"""Topology label: the network block (spine domain) a node sits in."""
LABEL_RACK = wellknown.RAILTRAIN_RACK
"""Topology label: the rack (leaf switch) a node sits in."""
LABEL_HOSTNAME = wellknown.HOSTNAME
GPU_RESOURCE = "nvidia.com/gpu"
"""Extended resource name of the NVIDIA device plugin."""
TAINT_NOT_READY = "node.kubernetes.io/not-ready"


def gpu_node(
    name: str,
    index: int,
    *,
    gpus: int = 8,
    labels: Mapping[str, str] | None = None,
    topology_prefix: str = "",
    nodes_per_rack: int = 4,
    racks_per_block: int = 2,
    cpu: str = "192",
    memory: str = "2Ti",
    pods: str = "110",
    internal_ip: str | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Build the manifest of one fake GPU node.

    Args:
        name: ``metadata.name`` and the ``kubernetes.io/hostname`` label.
        index: the node's position in its group; it picks the rack
            (``<topology_prefix>rack-<index // nodes_per_rack>``) and the block
            (``<topology_prefix>block-<index // (nodes_per_rack * racks_per_block)>``).
        gpus: ``nvidia.com/gpu`` capacity and allocatable.
        labels: extra labels; they override the defaults above.
        internal_ip: reported as the node's ``InternalIP`` address (KWOK keeps
            addresses it finds and then uses them as the pods' ``hostIP``).
        taints: ``spec.taints`` the node is created with (``key``, ``value``, ``effect``), so that no watcher ever
            sees it without them (a taint patched on afterwards races a controller's cache).

    Returns:
        A ``v1.Node`` as a dict, with ``status.capacity`` = ``status.allocatable``.

    Raises:
        ValueError: ``gpus`` < 0, ``index`` < 0 or a topology size < 1.
    """
    if gpus < 0 or index < 0 or nodes_per_rack < 1 or racks_per_block < 1:
        raise ValueError(
            f"need gpus >= 0, index >= 0, nodes_per_rack >= 1, racks_per_block >= 1; "
            f"got {gpus}, {index}, {nodes_per_rack}, {racks_per_block}"
        )
    resources = {"cpu": cpu, "memory": memory, "pods": pods, GPU_RESOURCE: str(gpus)}
    node_labels = {
        LABEL_HOSTNAME: name,
        wellknown.OS: "linux",
        wellknown.ARCH: "amd64",
        "type": "kwok",
        LABEL_RACK: f"{topology_prefix}rack-{index // nodes_per_rack}",
        LABEL_BLOCK: f"{topology_prefix}block-{index // (nodes_per_rack * racks_per_block)}",
        **(labels or {}),
    }
    status: dict[str, Any] = {"capacity": resources, "allocatable": dict(resources)}
    if internal_ip:
        status["addresses"] = [
            {"type": "InternalIP", "address": internal_ip},
            {"type": "Hostname", "address": name},
        ]
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": status,
    }
    if taints:
        node["spec"] = {"taints": [dict(t) for t in taints]}
    return node


def ordinal_ip(ordinal: int) -> str:
    """A distinct address in 10.64.0.0/10 for the ``ordinal``-th node (0-based)."""
    n = ordinal + 1
    return f"10.{64 + (n >> 16 & 63)}.{n >> 8 & 255}.{n & 255}"


def node_schedulable(node: Any) -> bool:
    """Whether a ``V1Node`` is Ready and no longer carries the not-ready taint.

    Admission puts ``node.kubernetes.io/not-ready:NoSchedule`` on every new
    node; only kube-controller-manager's node lifecycle controller removes it,
    after the node reports ``Ready=True``. Until then nothing schedules there.
    """
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    taints = (node.spec.taints if node.spec else None) or []
    tainted = any(t.key == TAINT_NOT_READY for t in taints)
    return ready and not tainted
