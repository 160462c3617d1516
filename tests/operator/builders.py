"""Fixture builders for operator unit tests: plain API dicts, as the server returns them."""

from __future__ import annotations

from typing import Any

from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render


def job_obj(name="llm", ns="team", nodes=2, gpus=8, procs=8, status=None, **spec) -> dict[str, Any]:
    body = {
        "apiVersion": "railtrain.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "generation": 1},
        "spec": {"image": "img:1", "nodes": nodes, "procsPerNode": procs, "resources": {"gpus": gpus}} | spec,
    }
    if status is not None:
        body["status"] = status
    return body


def gang(obj, restarts=0, phase=None, gated=True, nodes=None) -> list[dict[str, Any]]:
    """The rendered pods of a job, optionally bound to nodes and in a phase."""
    job = TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": obj["metadata"]["name"]}})
    pods = render.render_gang(job, obj["metadata"]["namespace"], obj["metadata"]["uid"], restarts)
    for i, p in enumerate(pods):
        if not gated:
            p["spec"].pop("schedulingGates")
        if nodes:
            p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": nodes[i]}
            if not gated:
                p["spec"]["nodeName"] = nodes[i]
        p["status"] = {"phase": phase or "Pending"}
    return pods


def fail(pod, code=1, message="boom"):
    pod["status"] = {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": code, "message": message}}}]}
    return pod


def node(name, gpus=8, ready=True, labels=None, unschedulable=False, taints=None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name} | (labels or {})},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def other_pod(node_name, gpus, phase="Running", pinned=False) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if pinned:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    else:
        spec["nodeName"] = node_name
    return {"metadata": {"name": f"x-{node_name}"}, "spec": spec, "status": {"phase": phase}}


RANK = contract.LABEL_NODE_RANK


BLOCK, RACK, HOST = "railtrain.dev/block", "railtrain.dev/rack", "kubernetes.io/hostname"


def fabric(blocks=2, racks=2, per_rack=4, gpus=8, used=None, rails=None, extra=None, down=()):
    """Node dicts of a block/rack/node tree: node ``b{b}r{r}n{i}`` in rack ``b{b}-r{r}`` of block ``b{b}``.

    Args:
        used: node name → GPUs held by a non-railtrain pod (returned as pods).
        rails: node name → value of the ``railtrain.dev/rails`` label.
        extra: node name → extra labels (override the defaults; ``None`` values remove a label).
        down: names of nodes to report NotReady.

    Returns:
        ``(nodes, pods)`` for :func:`railtrain.operator.scheduling.snapshot.snapshot`.
    """
    nodes = []
    for b in range(blocks):
        for r in range(racks):
            for i in range(per_rack):
                name = f"b{b}r{r}n{i}"
                labels = {BLOCK: f"b{b}", RACK: f"b{b}-r{r}"}
                if rails and name in rails:
                    labels["railtrain.dev/rails"] = str(rails[name])
                labels |= (extra or {}).get(name, {})
                n = node(name, gpus=gpus, ready=name not in down, labels=labels)
                n["metadata"]["labels"] = {k: v for k, v in n["metadata"]["labels"].items() if v is not None}
                nodes.append(n)
    pods = [other_pod(name, g) for name, g in (used or {}).items()]
    for i, p in enumerate(pods):
        p["metadata"]["name"] = f"x-{i}"
    return nodes, pods
