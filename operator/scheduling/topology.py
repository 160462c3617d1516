"""Topology levels: which node labels describe the network, widest first (pure).

The operator is configured with an ordered list of node label keys, from the
widest network domain (a block or spine group) to the narrowest (a rack, an
NVLink domain) and usually ending with ``kubernetes.io/hostname``. Nodes that
share the value of a level *and of every wider level* form one domain of that
level, as in Kueue's Topology API: levels are expected to nest, and grouping by
the whole path keeps the model safe when a rack name repeats in two blocks.

A level may list alternatives separated by ``|`` (``nvidia.com/gpu.clique|
network.topology.nvidia.com/accelerator``): a node's value is that of the first
key it carries. NVIDIA's Topograph does exactly this, leaving its accelerator
label unset on nodes that already have the GPU operator's clique label.

Presets (documented with their sources in ``docs/topology.md``) name the label
keys clouds and NVIDIA tooling put on nodes. The configuration comes from the
operator's flags ``--topology-preset``/``--topology-levels`` or, when those are
absent, the environment variables :data:`ENV_PRESET`/:data:`ENV_LEVELS`.

May import: ``railtrain.crds`` and this wing (``operator/scheduling``) only; never kopf, the kubernetes client or another wing.
"""

from __future__ import annotations

import re
from typing import Mapping

from railtrain.crds.labels import HOSTNAME, NVIDIA_ACCELERATOR, NVIDIA_CLIQUE, RAILTRAIN_BLOCK, RAILTRAIN_RACK

PRESETS: Mapping[str, tuple[str, ...]] = {
    "railtrain": (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME),
    "gke": (
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gce-topology-subblock",
        "cloud.google.com/gce-topology-host",
        HOSTNAME,
    ),
    "aws": (
        "topology.k8s.aws/network-node-layer-1",
        "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-3",
        HOSTNAME,
    ),
    "oci": (
        "oci.oraclecloud.com/host.network_block_id",
        "oci.oraclecloud.com/host.rack_id",
        HOSTNAME,
    ),
    "nvidia": (
        "network.topology.nvidia.com/core",
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/leaf",
        f"{NVIDIA_CLIQUE}|{NVIDIA_ACCELERATOR}",
        HOSTNAME,
    ),
}
"""Preset name → levels, widest first."""

DEFAULT_PRESET = "railtrain"
DEFAULT_LEVELS: tuple[str, ...] = PRESETS[DEFAULT_PRESET]

ENV_PRESET = "RAILTRAIN_TOPOLOGY_PRESET"
"""Environment variable read when ``--topology-preset`` is not given."""
ENV_LEVELS = "RAILTRAIN_TOPOLOGY_LEVELS"
"""Environment variable read when ``--topology-levels`` is not given (comma-separated keys)."""

# A qualified label key: optional DNS-subdomain prefix and '/', then a name of
# at most 63 characters (Kubernetes "Labels and Selectors", syntax and charset).
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def parse_levels(text: str) -> tuple[str, ...]:
    """Parse ``--topology-levels``: comma-separated label keys, widest first.

    Args:
        text: e.g. ``"railtrain.dev/block,railtrain.dev/rack,kubernetes.io/hostname"``;
            a level may be ``"a|b"`` (first key the node carries).

    Returns:
        The levels as a tuple of strings, whitespace stripped.

    Raises:
        ValueError: empty, a key that is not a valid label key, or a repeated level.
    """
    levels = tuple(part.strip() for part in text.split(",") if part.strip())
    if not levels:
        raise ValueError("--topology-levels: give at least one node label key, e.g. railtrain.dev/rack,kubernetes.io/hostname")
    for level in levels:
        for key in level.split("|"):
            if not _LABEL_KEY.match(key.strip()) or len(key.strip()) > 317:
                raise ValueError(f"--topology-levels: {key.strip()!r} is not a valid node label key")
    if len(set(levels)) != len(levels):
        raise ValueError(f"--topology-levels: a level is listed twice in {text!r}")
    return levels


def resolve_levels(preset: str | None = None, levels: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The topology levels the operator runs with.

    Precedence: ``levels``, then ``preset``, then the environment variables
    :data:`ENV_LEVELS` and :data:`ENV_PRESET`, then :data:`DEFAULT_PRESET`.

    Args:
        preset: a key of :data:`PRESETS`, or None.
        levels: text for :func:`parse_levels`, or None.
        environ: usually ``os.environ``; None means empty.

    Returns:
        Levels, widest first.

    Raises:
        ValueError: an unknown preset or malformed levels; the message names
            the flag and the allowed values.
    """
    env = environ or {}
    if levels:
        return parse_levels(levels)
    name = preset or None
    if name is None and env.get(ENV_LEVELS):
        return parse_levels(env[ENV_LEVELS])
    name = name or env.get(ENV_PRESET) or DEFAULT_PRESET
    if name not in PRESETS:
        raise ValueError(f"--topology-preset: unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


NVLINK_DOMAIN_KEYS = (NVIDIA_CLIQUE, NVIDIA_ACCELERATOR)
"""Node label keys that name an NVLink domain (the GPU operator's clique, Topograph's accelerator domain); a level
listing one of them is the NVLink-domain level that ``spec.topology.nvlinkDomain`` places a gang inside."""


def nvlink_level(levels: tuple[str, ...]) -> str | None:
    """The level of ``levels`` marked as the NVLink domain (one of its ``|`` keys is in :data:`NVLINK_DOMAIN_KEYS`), else None."""
    return next((lv for lv in levels if any(k.strip() in NVLINK_DOMAIN_KEYS for k in lv.split("|"))), None)


def level_value(labels: Mapping[str, str], level: str) -> str | None:
    """The value of ``level`` on a node: its first ``|`` alternative present in ``labels``, else None."""
    for key in level.split("|"):
        value = labels.get(key.strip())
        if value:
            return value
    return None


def level_name(level: str) -> str:
    """A short name of a level for messages: the part after the last ``/`` of its first key (``rack``)."""
    return level.split("|")[0].rsplit("/", 1)[-1]
