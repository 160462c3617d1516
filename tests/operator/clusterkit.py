"""Helpers for operator tests on the real control plane: manifests, reads, and observation windows."""

from __future__ import annotations

import time
from typing import Any, Callable

from railtrain.crds import contract

G, V, P = contract.API_GROUP, contract.API_VERSION, contract.PLURAL


def job_body(name, nodes=2, gpus=8, procs=8, **spec) -> dict[str, Any]:
    """A TrainingJob manifest with the trainer image and ``spec`` merged over the defaults."""
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"image": "ghcr.io/railtrain/trainer:0.1.0", "command": ["torchrun", "-m", "railtrain.trainer"],
                 "nodes": nodes, "procsPerNode": procs, "resources": {"gpus": gpus}} | spec,
    }


def foreign_pod(name, node, gpus=8) -> dict[str, Any]:
    """A pod that is not railtrain's, bound straight to ``node`` (nodeName), holding ``gpus`` GPUs."""
    amounts = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {"requests": amounts, "limits": amounts}}]}}


def pods_of(core, ns, name):
    return core.list_namespaced_pod(ns, label_selector=f"{contract.LABEL_JOB_NAME}={name}").items


def job_obj(custom, ns, name):
    return custom.get_namespaced_custom_object(G, V, ns, P, name)


def job_status(custom, ns, name):
    return job_obj(custom, ns, name).get("status") or {}


def condition(status, type_):
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def all_running(core, ns, name, count):
    pods = pods_of(core, ns, name)
    return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None


def unreleased(pods) -> bool:
    """Every pod still gated, without a node pin and unbound: nothing of the gang holds capacity."""
    return all(p.spec.scheduling_gates and not p.spec.node_name and not (p.spec.node_selector or {}) for p in pods)


def observe(sample: Callable[[], Any], seconds: float, interval: float = 0.25) -> list[Any]:
    """Sample ``sample()`` for an observation window; returns the distinct values in order of appearance.

    Used to show that something does *not* happen (no churn) over several
    operator resync periods; it never waits for something to happen.
    """
    seen: list[Any] = []
    deadline = time.monotonic() + seconds
    while True:
        value = sample()
        if value not in seen:
            seen.append(value)
        if time.monotonic() >= deadline:
            return seen
        time.sleep(interval)
