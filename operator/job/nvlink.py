"""NVLink domains that span nodes (GB200 NVL72): the ComputeDomain of a job and how its pods claim the IMEX channel (pure).

A job with ``spec.topology.nvlinkDomain: true`` is placed inside one NVLink
domain (:func:`railtrain.operator.scheduling.topology.nvlink_level`), and the operator
creates for it one ComputeDomain of the NVIDIA DRA driver for GPUs
(``resource.nvidia.com/v1beta1``): the driver then runs IMEX daemons on the
domain's nodes and generates a ResourceClaimTemplate of the name the
ComputeDomain gives, whose claim puts an IMEX channel into every container
that references it. The schema and the claim wiring follow the driver's
documentation and CRD (DRA Driver for GPUs v25.3.0 and later, docs/fabric.md);
only the fields railtrain sets are used. The ComputeDomain is owned by the
job (ownerReference), so deleting the job deletes it.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds.api import TrainingJob
from railtrain.crds.computedomain import CLAIM, GROUP, KIND, PLURAL, VERSION

__all__ = ["CLAIM", "GROUP", "KIND", "PLURAL", "VERSION", "claim_template", "compute_domain", "container_claims", "domain_name", "pod_claims", "wants"]



def domain_name(job: str) -> str:
    """The ComputeDomain of job ``job``: ``<job>-nvlink``."""
    return f"{job}-nvlink"


def claim_template(job: str) -> str:
    """The ResourceClaimTemplate the driver generates for the job's ComputeDomain: ``<job>-imex-channel``."""
    return f"{job}-imex-channel"


def wants(job: TrainingJob) -> bool:
    """Whether the job asks to be placed inside one NVLink domain (``spec.topology.nvlinkDomain``)."""
    return bool(job.spec.topology.nvlink_domain)


def compute_domain(job: TrainingJob, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    """The ComputeDomain manifest of a job.

    Args:
        job: the parsed job; namespace: its namespace; owner: the job's controller ownerReference.

    Returns:
        A ``resource.nvidia.com/v1beta1`` ComputeDomain: ``numNodes`` = ``spec.nodes`` (the driver
        uses it for its status; older drivers wait for that many IMEX daemons), one channel per pod
        (``allocationMode`` Single, the driver's default) through the ResourceClaimTemplate
        :func:`claim_template`.
    """
    name = job.metadata.name
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": domain_name(name), "namespace": namespace, "ownerReferences": [owner]},
        "spec": {"numNodes": job.spec.nodes, "channel": {"resourceClaimTemplate": {"name": claim_template(name)}}},
    }


def pod_claims(job: str) -> list[dict[str, str]]:
    """``spec.resourceClaims`` of every pod of the job: the IMEX channel, from the driver's ResourceClaimTemplate."""
    return [{"name": CLAIM, "resourceClaimTemplateName": claim_template(job)}]


def container_claims() -> list[dict[str, str]]:
    """``resources.claims`` of the training container: the pod's IMEX channel claim."""
    return [{"name": CLAIM}]
