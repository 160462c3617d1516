"""The configuration ``LocalCluster`` hands to ``kwokctl create cluster --config``.

One multi-document YAML: a ``KwokctlConfiguration`` (binary runtime, local
binaries, loopback, fixed free ports, long node-monitor grace period, etcd
without fsync) followed by the KWOK Stages. kwokctl replaces its default
Stages as soon as it is given any, so kwok's own defaults (copied out of the
kwok module by ``install.sh``) come first, then railtrain's ``stages.yaml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .binaries import kwok_stages_dir
from .processes import free_ports

RAILTRAIN_STAGES = Path(__file__).with_name("stages.yaml")
KWOK_DEFAULT_STAGES = (  # what kwokctl v0.8 loads for a binary cluster given no Stage
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-complete.yaml",
    "pod-delete.yaml",
)
HEARTBEAT_FACTOR = 5
"""kwokctl multiplies every heartbeat-related period by this (its default, set explicitly)."""
PORT_OPTIONS = (
    "etcdPort",
    "etcdPeerPort",
    "kubeApiserverPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)


def kwokctl_config(bin_dir: Path, node_monitor_grace_period_s: int) -> list[dict[str, Any]]:
    """Build the documents of a kwokctl ``--config`` file.

    Args:
        bin_dir: folder of the binaries (see ``ensure_binaries``); kwok's
            default Stages are read from ``<bin_dir>/../kwok-stages``.
        node_monitor_grace_period_s: the effective
            ``--node-monitor-grace-period`` of kube-controller-manager.

    Returns:
        ``[KwokctlConfiguration, Stage, ...]`` as dicts. Every port is picked
        by the kernel (kwokctl would count down from 32767 and hand two
        clusters started at once the same ports).

    Raises:
        OSError: a Stage file is missing (rerun ``install.sh``).
    """
    stages_dir = kwok_stages_dir(bin_dir)
    stages = [yaml.safe_load((stages_dir / name).read_text()) for name in KWOK_DEFAULT_STAGES]
    stages += [doc for doc in yaml.safe_load_all(RAILTRAIN_STAGES.read_text()) if doc]
    options: dict[str, Any] = {
        "runtime": "binary",
        "bindAddress": "127.0.0.1",
        **dict(zip(PORT_OPTIONS, free_ports(len(PORT_OPTIONS)))),
        "etcdBinary": str(bin_dir / "etcd"),
        "kubeApiserverBinary": str(bin_dir / "kube-apiserver"),
        "kubeControllerManagerBinary": str(bin_dir / "kube-controller-manager"),
        "kubeSchedulerBinary": str(bin_dir / "kube-scheduler"),
        "kubectlBinary": str(bin_dir / "kubectl"),
        "kwokControllerBinary": str(bin_dir / "kwok"),
        "heartbeatFactor": HEARTBEAT_FACTOR,
        "kubeControllerManagerNodeMonitorGracePeriodMilliseconds": node_monitor_grace_period_s * 1000 // HEARTBEAT_FACTOR,
        "disableQPSLimits": True,
    }
    config = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": options,
        "componentsPatches": [{"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]}],
    }
    return [config, *stages]
