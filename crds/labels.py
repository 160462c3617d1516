"""Node label keys railtrain reads or writes that are not its pod contract: Kubernetes' well-known labels, the
topology labels of railtrain's own local clusters, and NVIDIA's (one spelling each; railtrain's pod labels and
annotations are in :mod:`railtrain.crds.contract`).

Used by the operator (placement pins a rank by :data:`HOSTNAME`; topology presets), the command line's local
clusters (the labels their fake nodes carry) and the views.

May import: nothing (pure constants; ``crds`` is the floor every wing imports).
"""

HOSTNAME = "kubernetes.io/hostname"
"""The node's name as a label (Kubernetes' well-known label): placement pins each rank with a nodeSelector on it."""
OS = "kubernetes.io/os"
ARCH = "kubernetes.io/arch"

RAILTRAIN_BLOCK = "railtrain.dev/block"
"""Topology label of railtrain's own preset: the network block (spine domain) a node sits in."""
RAILTRAIN_RACK = "railtrain.dev/rack"
"""Topology label of railtrain's own preset: the rack (leaf switch) a node sits in."""

NVIDIA_CLIQUE = "nvidia.com/gpu.clique"
"""The GPU operator's NVLink clique of a node (``<cluster uuid>.<clique id>``)."""
NVIDIA_ACCELERATOR = "network.topology.nvidia.com/accelerator"
"""NVIDIA Topograph's accelerator (NVLink) domain, set on nodes without :data:`NVIDIA_CLIQUE`."""
