"""Helpers for operator tests on the real control plane: manifests, reads, and observation windows."""

from __future__ import annotations

import time
from typing import Any, Callable

from railtrain.cli.controlplane import ANNOTATION_KWOK_MESSAGE, LABEL_KWOK_EXIT
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


def phase_is(custom, ns, name, phase):
    """The job's status when its phase is ``phase``, else False (a ``wait_for`` check)."""
    return (s := job_status(custom, ns, name)).get("phase") == phase and s


def refused(custom, ns, name, reason="Unschedulable"):
    """The job's Scheduled condition when it is False with ``reason``, else None (a ``wait_for`` check)."""
    c = condition(job_status(custom, ns, name), "Scheduled")
    return c if c and c["status"] == "False" and c["reason"] == reason else None


def events(core, ns, name, field="involvedObject.name"):
    """The Events in ``ns`` whose ``field`` is ``name`` (by default: about the object named ``name``)."""
    return core.list_namespaced_event(ns, field_selector=f"{field}={name}").items


def events_with(core, ns, name, *reasons, timeout=30.0, where=lambda e: True):
    """Poll until the object ``name`` in ``ns`` has an Event of each of ``reasons`` (for which ``where(event)``
    holds); return ``{reason: [those Events, oldest first]}`` for every reason seen.

    The operator writes a change's Events after the status write they announce (operator/controller.py
    ``_announce``), so a test that has just seen the status must wait for them, not read them once.

    Raises:
        AssertionError: ``timeout`` seconds passed first (the message names the reasons seen).
    """
    from tests.polling import wait_for

    def seen():
        found: dict[str, list] = {}
        for e in sorted(events(core, ns, name), key=lambda e: (e.metadata.creation_timestamp, e.metadata.name)):
            if where(e):
                found.setdefault(e.reason, []).append(e)
        return found if set(reasons) <= set(found) else None

    return wait_for(seen, timeout, f"the Events {sorted(reasons)} on {ns}/{name}")


def all_running(core, ns, name, count, old_uids=frozenset()):
    """The job's pods when exactly ``count`` exist, all Running, none terminating and none from ``old_uids``, else None."""
    pods = pods_of(core, ns, name)
    ok = len(pods) == count and all(p.status.phase == "Running" and p.metadata.uid not in old_uids and not p.metadata.deletion_timestamp for p in pods)
    return pods if ok else None


def end_pod(core, ns, pod, code=0, message=None):
    """End a Running pod as the kubelet would report its container exiting with ``code`` (and ``message`` as the
    termination message): KWOK's stages (cli/controlplane/stages.yaml) act on this label and annotation."""
    meta = {"labels": {LABEL_KWOK_EXIT: str(code)}} | ({"annotations": {ANNOTATION_KWOK_MESSAGE: message}} if message is not None else {})
    core.patch_namespaced_pod(pod, ns, {"metadata": meta})


def finish(core, ns, name):
    """End every pod of the job with exit code 0."""
    for p in pods_of(core, ns, name):
        end_pod(core, ns, p.metadata.name)


def unreleased(pods) -> bool:
    """Every pod still gated, without a node pin and unbound: nothing of the gang holds capacity (True for no pods, a gang not admitted yet)."""
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


def start_running(core, custom, ns, name, count, **spec):
    """Create job ``name`` (``job_body(name, nodes=count, **spec)``) and wait until its ``count`` pods and its phase are Running; returns the pods."""
    from tests.polling import wait_for

    custom.create_namespaced_custom_object(G, V, ns, P, job_body(name, nodes=count, **spec))
    pods = wait_for(lambda: all_running(core, ns, name, count), 90, f"{name} Running")
    wait_for(lambda: phase_is(custom, ns, name, "Running"), 30, "phase Running")
    return pods
