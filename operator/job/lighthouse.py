"""The Lighthouse of a job with replica groups (pure): its pod and Service as rendered, and what a pass does about them.

torchft's replica groups agree a quorum at every step through one Lighthouse server
(``torchft_lighthouse``, PyPI ``torchft``). The operator creates it for a job with
``spec.faultTolerance`` as a **pod** ``<job>-lighthouse`` running the job's own image, plus a
Service ``<job>-lighthouse`` on :data:`~railtrain.crds.replica_groups.LIGHTHOUSE_PORT` that the
groups reach it by (``TORCHFT_LIGHTHOUSE``), both owned by the job (deleted with it by the
garbage collector).

A pod, not a Deployment: the operator already watches pods and reconciles the job on their
events, so a Lighthouse pod that is deleted, evicted or lost is recreated by the next reconcile
(milliseconds after the event), the same owner and verbs as the gang's pods, and no apps/v1 RBAC
or ReplicaSet hop. A crashed ``torchft_lighthouse`` process is restarted in place by the kubelet
(``restartPolicy: Always``). What a Deployment would add, recreation while no operator leads, is
bounded by the Lease (a standby leads within ``--lease-seconds``).

The Lighthouse pod does not carry the job's ``railtrain.dev/job-name`` label, so it is never read
as a rank, counted by the admission ledger as a gang pod, or listed among the job's pods; it
carries :data:`~railtrain.crds.replica_groups.LABEL_LIGHTHOUSE` (the job's name) instead, which the
operator's pod watch follows too.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from railtrain.crds import contract, replica_groups
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render

LIGHTHOUSE_CONTAINER = "lighthouse"
"""The Lighthouse pod's one container."""
LIGHTHOUSE_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
"""What the Lighthouse pod requests (a small Rust server: it holds the quorum's state, not the model)."""


@dataclass(frozen=True)
class LighthouseSeen:
    """A job's Lighthouse objects as read in this pass.

    Attributes:
        pod: the pod ``<job>-lighthouse`` as read (None: absent).
        service: the Service ``<job>-lighthouse`` as read (None: absent).
    """

    pod: dict[str, Any] | None = None
    service: dict[str, Any] | None = None


def lighthouse_labels(name: str) -> dict[str, str]:
    """Labels of a job's Lighthouse pod and Service: :data:`~railtrain.crds.replica_groups.LABEL_LIGHTHOUSE` = the job's name, and managed-by."""
    return {replica_groups.LABEL_LIGHTHOUSE: name, contract.LABEL_MANAGED_BY: contract.MANAGED_BY}


def render_lighthouse_pod(job: TrainingJob, namespace: str, uid: str) -> dict[str, Any]:
    """The Lighthouse pod of a job with ``spec.faultTolerance``: ``torchft_lighthouse --min_replicas M --bind [::]:29510``.

    It runs the job's image (which carries torchft, as its trainer needs it), tolerates what the gang's pods tolerate
    (:func:`railtrain.operator.job.render.gang_tolerations`, and the template's tolerations, nodeSelector and image
    pull secrets, so it can run where the gang can), is left to kube-scheduler (not part of the gang's placement) and
    is restarted in place by the kubelet when the process exits (``restartPolicy: Always``).

    Args:
        job: the validated job (``spec.faultTolerance`` set); namespace: its namespace; uid: its uid (the ownerReference).

    Returns:
        The v1 Pod manifest.

    Raises:
        ValueError: the job has no ``spec.faultTolerance``.
    """
    ft = job.spec.fault_tolerance
    if ft is None:
        raise ValueError("a Lighthouse is rendered only for a job with spec.faultTolerance")
    name = job.metadata.name
    spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "enableServiceLinks": False,
        "tolerations": render.gang_tolerations(job.spec),
        "containers": [
            {
                "name": LIGHTHOUSE_CONTAINER,
                "image": job.spec.image,
                "command": replica_groups.lighthouse_command(ft),
                "ports": [{"name": "lighthouse", "containerPort": replica_groups.LIGHTHOUSE_PORT}],
                "resources": {"requests": dict(LIGHTHOUSE_REQUESTS)},
            }
        ],
    }
    template = job.spec.template.spec.model_dump(by_alias=True, exclude_none=True) if job.spec.template is not None else {}
    if template.get("tolerations"):
        spec["tolerations"] = spec["tolerations"] + list(template["tolerations"])
    for key in ("nodeSelector", "imagePullSecrets"):
        if template.get(key):
            spec[key] = template[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": replica_groups.lighthouse_name(name),
            "namespace": namespace,
            "labels": lighthouse_labels(name),
            "ownerReferences": [render.owner_reference(name, uid)],
        },
        "spec": spec,
    }


def render_lighthouse_service(job: TrainingJob, namespace: str, uid: str) -> dict[str, Any]:
    """The Service ``<job>-lighthouse`` (ClusterIP, port :data:`~railtrain.crds.replica_groups.LIGHTHOUSE_PORT`) selecting the job's Lighthouse pod."""
    name = job.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica_groups.lighthouse_name(name),
            "namespace": namespace,
            "labels": lighthouse_labels(name),
            "ownerReferences": [render.owner_reference(name, uid)],
        },
        "spec": {
            "selector": {replica_groups.LABEL_LIGHTHOUSE: name},
            "ports": [{"name": "lighthouse", "port": replica_groups.LIGHTHOUSE_PORT, "targetPort": replica_groups.LIGHTHOUSE_PORT}],
        },
    }


def owned(pod: dict[str, Any] | None, uid: str) -> bool:
    """Whether ``pod`` is the job's own: its controller ownerReference names ``uid`` (a pod someone else owns, e.g. one
    left by an earlier job of the same name, is never touched)."""
    return pod is not None and any(r.get("controller") and r.get("uid") == uid for r in pod["metadata"].get("ownerReferences") or [])


def usable(pod: dict[str, Any] | None, uid: str) -> bool:
    """Whether ``pod`` is a Lighthouse pod the job can go on with: its own (controller ownerReference ``uid``), not being
    deleted, and not ended (phase Failed or Succeeded: evicted, or its node lost)."""
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    return owned(pod, uid) and (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")


def lighthouse_actions(job: TrainingJob | None, meta: dict[str, Any], seen: LighthouseSeen | None, wanted: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """What a pass does about a job's Lighthouse (pure).

    Args:
        job: the parsed job (None: its spec does not parse: nothing is created).
        meta: the job's metadata (name, namespace, uid).
        seen: the Lighthouse objects read in this pass (None: not read, nothing is decided).
        wanted: whether the Lighthouse should run now: the job has replica groups, is active and not suspended,
            and its gang is admitted or has pods.

    Returns:
        ``(create, delete)``: objects to create (the pod and/or the Service), and pod name → uid to delete (an
        ended or unwanted Lighthouse pod of the job's own; a pod someone else owns is never touched).
    """
    if seen is None:
        return [], {}
    uid = meta.get("uid", "")
    pod = seen.pod
    delete: dict[str, str] = {}
    if owned(pod, uid) and not pod["metadata"].get("deletionTimestamp") and (not wanted or not usable(pod, uid)):
        delete[pod["metadata"]["name"]] = pod["metadata"].get("uid", "")
    create: list[dict[str, Any]] = []
    if wanted and job is not None and job.spec.fault_tolerance is not None:
        ns = meta.get("namespace", "")
        if pod is None:  # an ended one is deleted first; its replacement follows on the pass that sees it gone
            create.append(render_lighthouse_pod(job, ns, uid))
        if seen.service is None:
            create.append(render_lighthouse_service(job, ns, uid))
    return create, delete
