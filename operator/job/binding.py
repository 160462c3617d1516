"""How a rendered gang pod is bound to its node (pure): the pin, and whether the operator binds it itself.

The operator decides where every rank runs (:mod:`railtrain.operator.scheduling.placement`);
these functions turn that decision into the pod it creates or patches: a
``kubernetes.io/hostname`` node selector always, and ``spec.nodeName`` at create
time where kube-scheduler has no binding work to do (docs/scheduling.md,
"Binding: direct unless a plugin is needed").

May import: ``railtrain.crds`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds.labels import HOSTNAME


def pin_to_node(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """Return a copy of ``pod`` whose nodeSelector pins it to ``node`` (by kubernetes.io/hostname).

    The operator decides; whoever binds the pod enforces the pin: kube-scheduler
    for a gated pod released by patch or a pod :func:`binds_directly` refuses,
    the kubelet's admission for a pod created bound (:func:`admitted_pod`).
    """
    out = {**pod, "spec": {**pod["spec"]}}
    out["spec"]["nodeSelector"] = {**pod["spec"].get("nodeSelector", {}), HOSTNAME: node}
    return out


SCHEDULER_VOLUMES = ("persistentVolumeClaim", "ephemeral")
"""Volume sources only kube-scheduler can bind a pod with: its VolumeBinding plugin provisions a
``WaitForFirstConsumer`` claim for the chosen node and checks a bound volume's node affinity."""


def binds_directly(pod: dict[str, Any]) -> bool:
    """Whether the operator binds ``pod`` itself, by creating it with ``spec.nodeName`` set, instead of leaving the binding to kube-scheduler.

    A pod whose node is set at creation is never seen by kube-scheduler; the
    kubelet still runs its admission (resources, node affinity, NoExecute
    taints) and refuses the pod (``OutOf<resource>``) if the node cannot hold it.
    That is safe here because placement already checked every resource of the
    pod against the ledger (:mod:`railtrain.operator.scheduling.snapshot`), and it saves the
    scheduler's queue, filter and Binding round trip on every rank of every
    start and restart (issue 16's start-up goal; docs/scheduling.md,
    "Binding: direct unless a plugin is needed").

    Args:
        pod: a rendered v1 Pod manifest (template merged).

    Returns:
        False when kube-scheduler has work to do at binding time that the
        operator does not model: a PersistentVolumeClaim or generic ephemeral
        volume (:data:`SCHEDULER_VOLUMES`) or a DRA ``resourceClaims`` entry
        (allocation, e.g. the NVLink ComputeDomain's IMEX channel); True otherwise.
    """
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return False
    return not any(source in (volume or {}) for volume in spec.get("volumes") or [] for source in SCHEDULER_VOLUMES)


def admitted_pod(pod: dict[str, Any], node: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A copy of the gated ``pod`` as it is created for an admitted gang: pinned to ``node``, ``annotations`` added, no scheduling gate.

    One create per rank, nothing to patch afterwards (docs/scheduling.md, "Admit before creating").
    The pin is always the ``kubernetes.io/hostname`` node selector; where
    :func:`binds_directly` allows, ``spec.nodeName`` is set too, so the pod is
    bound by its create and kube-scheduler never handles it.
    """
    out = pin_to_node(pod, node)
    out["spec"].pop("schedulingGates", None)
    if binds_directly(out):
        out["spec"]["nodeName"] = node
    out["metadata"] = {**pod["metadata"], "annotations": {**(pod["metadata"].get("annotations") or {}), **annotations}}
    return out
