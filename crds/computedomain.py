"""The API coordinates of the NVIDIA DRA driver's ComputeDomain (pure constants, no imports).

Read by the operator's API edge (to create and delete ComputeDomains) and by
its job wing (to render them and the pods' IMEX channel claims): they live
here so that the edge needs no domain module. Group and version follow the DRA
Driver for GPUs v25.3.0 and later (docs/fabric.md).
"""

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
KIND = "ComputeDomain"
PLURAL = "computedomains"
CLAIM = "imex-channel"
"""Name of the pod's resource claim (``spec.resourceClaims[].name``) and of the trainer container's ``resources.claims`` entry."""
