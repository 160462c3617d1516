"""Fabric profiles: the environment NCCL (and libfabric) needs on each platform, and what a rank got (pure).

railtrain places data-parallel peers on the same rail and tensor-parallel
groups inside a node; a fabric profile tells NCCL the same story, so that the
placement's benefit is not lost on the wire. A profile is chosen by the
operator's administrator, like the topology presets (``--fabric-profile`` /
``$RAILTRAIN_FABRIC_PROFILE`` / the chart's ``fabricProfile``), and holds

* literal variables written into every rank's training container
  (``NCCL_CROSS_NIC=0`` where rails must not be crossed, ``NCCL_SOCKET_IFNAME``
  for bootstrap, ``FI_PROVIDER=efa`` on AWS ...);
* per-node variables (``NCCL_IB_HCA``): the value depends on the node the rank
  lands on, which is known only at placement, after the pod exists and its
  container env can no longer change. So the container reads the variable
  from a pod annotation through the Downward API (``valueFrom.fieldRef``), and
  the operator sets that annotation from the node's own annotation in the
  same patch that pins and ungates the pod, before any container starts (the
  mechanism the elastic gang size already uses);
* the RDMA device a multi-node job needs on that platform (a resource, a pod
  annotation, or ``hostNetwork``), checked against the job's template.

What the user writes in ``spec.env`` or in the template's ``trainer``
container env wins: the profile leaves those names out. Every value and its
source is listed in ``docs/fabric.md``; none was verified on real hardware.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from railtrain.crds.contract import API_GROUP

if TYPE_CHECKING:
    from railtrain.crds.api import TrainingJobSpec

TRAINER = "trainer"
NODE_HCAS = f"{API_GROUP}/hcas"
"""Node annotation an administrator sets: the node's RDMA HCAs in GPU order, comma-separated
(``mlx5_0,mlx5_1,...``; a device may carry ``:port``), or NCCL's own ``NCCL_IB_HCA`` syntax with a leading
``=`` (exact names) or ``^`` (exclude these). An annotation, not a label: label values allow no commas or colons."""
ANNOTATION_PROFILE = f"{API_GROUP}/fabric-profile"
"""Pod annotation: the fabric profile the operator rendered the pod with."""
ENV_PROFILE = "RAILTRAIN_FABRIC_PROFILE"
"""Environment variable the operator reads when ``--fabric-profile`` is not given."""
SETTING_PREFIXES = ("NCCL_", "FI_", "OFI_NCCL_")
"""Variables :func:`rank_settings` reports: NCCL's own, libfabric's, and the aws-ofi-nccl plugin's."""

_HCA = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]+)?$")


@dataclass(frozen=True)
class NodeValue:
    """A variable whose value comes from the node a rank is placed on.

    Attributes:
        env: the variable, e.g. ``NCCL_IB_HCA``.
        node_annotation: the Node annotation holding the node's value.
        prefix: put before the node's value (``=`` asks NCCL for exact device names).
    """

    env: str
    node_annotation: str
    prefix: str = ""

    @property
    def pod_annotation(self) -> str:
        """The pod annotation the operator copies the value into (``railtrain.dev/fabric-nccl-ib-hca``)."""
        return f"{API_GROUP}/fabric-{self.env.lower().replace('_', '-')}"


@dataclass(frozen=True)
class Requirement:
    """The RDMA device a multi-node GPU job needs on a platform: any one of these satisfies it.

    Attributes:
        what: the device in words, for the sentence.
        resources: extended resource names of the trainer container; a name ending in ``/``
            matches every resource with that prefix (``rdma/``).
        annotations: pod annotation keys (``spec.template.metadata.annotations``).
        host_network: ``spec.template.spec.hostNetwork: true`` also satisfies it.
    """

    what: str
    resources: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    host_network: bool = False

    def ways(self) -> str:
        """The ways to satisfy it, in words."""
        parts = [f"resource {r}{'*' if r.endswith('/') else ''} in the trainer container" for r in self.resources]
        parts += [f"annotation {a} in spec.template.metadata.annotations" for a in self.annotations]
        parts += ["spec.template.spec.hostNetwork: true"] if self.host_network else []
        return " or ".join(parts)


@dataclass(frozen=True)
class FabricProfile:
    """One platform's fabric settings (sources in ``docs/fabric.md``).

    Attributes:
        name: the profile's name (``--fabric-profile``).
        summary: one line for help texts and logs.
        env: literal variables of every rank's training container.
        per_node: variables read from the rank's node (:class:`NodeValue`).
        pod_network_only: variables left out when the pod uses ``hostNetwork``
            (an interface name that is the pod's, not the host's).
        requires: the RDMA device a multi-node GPU job needs, or None.
    """

    name: str
    summary: str
    env: Mapping[str, str] = field(default_factory=dict)
    per_node: tuple[NodeValue, ...] = ()
    pod_network_only: frozenset[str] = frozenset()
    requires: Requirement | None = None


_IB_HCA = NodeValue("NCCL_IB_HCA", NODE_HCAS, "=")

PROFILES: Mapping[str, FabricProfile] = {
    "railtrain": FabricProfile(
        "railtrain",
        "rail-optimized fabric described by railtrain's own node labels; no RDMA device required",
        env={"NCCL_CROSS_NIC": "0", "NCCL_SOCKET_IFNAME": "=eth0"},
        per_node=(_IB_HCA,),
        pod_network_only=frozenset({"NCCL_SOCKET_IFNAME"}),
    ),
    "gke": FabricProfile(
        "gke",
        "GKE A3 Mega (GPUDirect-TCPXO) and A3 Ultra (GPUDirect RDMA) with multi-networking",
        env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_CROSS_NIC": "0"},
        pod_network_only=frozenset({"NCCL_SOCKET_IFNAME"}),
        requires=Requirement("the GPU NICs attached to the pod through GKE multi-networking", annotations=("networking.gke.io/interfaces",)),
    ),
    "aws": FabricProfile(
        "aws",
        "EKS P5/P6 with EFA through libfabric and the aws-ofi-nccl plugin",
        env={"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "=eth0"},
        pod_network_only=frozenset({"NCCL_SOCKET_IFNAME"}),
        requires=Requirement("EFA devices", resources=("vpc.amazonaws.com/efa",)),
    ),
    "oci": FabricProfile(
        "oci",
        "OKE bare-metal GPU shapes on the RoCE v2 cluster network",
        env={
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_IB_GID_INDEX": "3",
            "NCCL_IB_TC": "41",
            "NCCL_IB_SL": "0",
            "NCCL_IB_TIMEOUT": "22",
            "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
        },
        per_node=(_IB_HCA,),
        requires=Requirement("RDMA NICs", resources=("nvidia.com/rdma-vf",), host_network=True),
    ),
    "infiniband": FabricProfile(
        "infiniband",
        "on-premises rail-optimized InfiniBand or RoCE with the NVIDIA Network Operator's RDMA devices",
        env={"NCCL_CROSS_NIC": "0", "NCCL_SOCKET_IFNAME": "=eth0"},
        per_node=(_IB_HCA,),
        pod_network_only=frozenset({"NCCL_SOCKET_IFNAME"}),
        requires=Requirement("RDMA devices", resources=("rdma/",), host_network=True),
    ),
    "none": FabricProfile("none", "write no fabric variables (the image or the job sets them)"),
}
"""Profile name → profile; values and their sources in ``docs/fabric.md``."""

DEFAULT_PROFILE = "railtrain"


def resolve_profile(name: str | None = None, environ: Mapping[str, str] | None = None) -> FabricProfile:
    """The profile the operator runs with: ``name``, else :data:`ENV_PROFILE`, else :data:`DEFAULT_PROFILE`.

    Raises:
        ValueError: an unknown name; the message names the flag and the allowed values.
    """
    chosen = name or (environ or {}).get(ENV_PROFILE) or DEFAULT_PROFILE
    if chosen not in PROFILES:
        raise ValueError(f"--fabric-profile: unknown profile {chosen!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[chosen]


def _template(spec: "TrainingJobSpec") -> tuple[dict[str, Any], dict[str, str], bool]:
    """``(trainer entry, template annotations, hostNetwork)`` of a spec's template (empties when it has none)."""
    template = spec.template
    if template is None:
        return {}, {}, False
    return template.spec.container(TRAINER) or {}, dict(template.metadata.annotations), bool(template.spec.host_network)


def user_names(spec: "TrainingJobSpec") -> set[str]:
    """Variable names the user sets: ``spec.env`` and the template's ``trainer`` container env."""
    trainer, _, _ = _template(spec)
    return {v.name for v in spec.env} | {e.get("name", "") for e in trainer.get("env") or []}


def container_env(profile: FabricProfile | None, spec: "TrainingJobSpec") -> list[dict[str, Any]]:
    """The profile's variables for the training container of a job (the user's names left out).

    Args:
        profile: the operator's profile; None renders nothing (``railtrain run --local``).
        spec: the job spec (its ``env``, template env and ``hostNetwork`` are read).

    Returns:
        Container ``env`` entries: literal ``value`` for :attr:`FabricProfile.env`,
        ``valueFrom.fieldRef`` on the pod annotation for :attr:`FabricProfile.per_node`
        (an empty string until the operator sets it, which NCCL treats as unset).
    """
    if profile is None:
        return []
    mine = user_names(spec)
    _, _, host_network = _template(spec)
    out: list[dict[str, Any]] = [
        {"name": k, "value": v} for k, v in profile.env.items() if k not in mine and not (host_network and k in profile.pod_network_only)
    ]
    out += [
        {"name": n.env, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{n.pod_annotation}']"}}}
        for n in profile.per_node
        if n.env not in mine
    ]
    return out


NCCL_PREFIXES = ("^=", "^", "=")
"""The list prefixes NCCL's ``NCCL_IB_HCA`` syntax allows (NCCL's environment-variable docs): ``^`` excludes the
devices listed, ``=`` matches their names exactly (without it ``mlx5_1`` also selects ``mlx5_10``), ``^=`` both."""


def split_node_value(raw: str | None) -> tuple[str, list[str]] | None:
    """A node's HCA list split into NCCL's prefix and the device names (pure).

    Args:
        raw: the node annotation's value: ``mlx5_0,mlx5_1:1`` (railtrain's form) or NCCL's own
            ``=mlx5_0,...`` / ``^mlx5_4,...`` / ``^=mlx5_4,...`` (:data:`NCCL_PREFIXES`).

    Returns:
        ``(prefix, names)``: the prefix the value was written with ("" for none) and the names,
        whitespace and empty items dropped; None when absent or empty.
    """
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    given = next((p for p in NCCL_PREFIXES if text.startswith(p)), "")
    return given, [p.strip() for p in text[len(given):].split(",") if p.strip()]


def node_value_problem(raw: str | None) -> str | None:
    """Why a node's HCA annotation cannot become ``NCCL_IB_HCA`` (pure); None when it can or is absent.

    A value is refused when it lists no device, more than 64, or a name other than letters, digits,
    ``_ . -`` with an optional ``:port``, after an optional NCCL prefix (:data:`NCCL_PREFIXES`).
    """
    parts = split_node_value(raw)
    if parts is None:
        return None
    _, names = parts
    if not names:
        return "it lists no device"
    if len(names) > 64:
        return f"it lists {len(names)} devices (at most 64)"
    bad = [n for n in names if not _HCA.match(n)]
    if bad:
        return f"{bad[0]!r} is not a device name (letters, digits, _ . - and an optional :port; NCCL's ^ and = prefixes go first)"
    return None


def node_value(raw: str | None, prefix: str = "") -> str | None:
    """The NCCL value of a node's HCA list, or None when absent or malformed (:func:`node_value_problem`).

    Args:
        raw: the node annotation's value, e.g. ``"mlx5_0, mlx5_1:1"``, or in NCCL's own syntax
            ``"=mlx5_0,mlx5_1"`` / ``"^mlx5_4"`` / ``"^=mlx5_4"``.
        prefix: put before a list written without a prefix (``=`` for exact device names: NCCL matches
            prefixes otherwise, so ``mlx5_1`` would also select ``mlx5_10``). A list written with NCCL's
            own prefix keeps it: an exclusion (``^``) stays an exclusion.

    Returns:
        The value for ``NCCL_IB_HCA``: the prefix, then the names joined by commas.
    """
    parts = split_node_value(raw)
    if parts is None or node_value_problem(raw) is not None:
        return None
    given, names = parts
    return (given or prefix) + ",".join(names)


def rank_annotations(profile: FabricProfile | None, node: Mapping[str, Any] | None) -> dict[str, str]:
    """Pod annotations of a rank placed on ``node``: the profile's per-node values read from the node.

    Args:
        profile: the operator's profile (None: nothing).
        node: the v1 Node as read (its ``metadata.annotations``), or None when unknown.

    Returns:
        Pod annotation → value, only for values the node gives and that are
        well-formed (:func:`node_value`); a node without them leaves NCCL's default.
        A malformed one is reported by :func:`node_value_problems`.
    """
    if profile is None or not node:
        return {}
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    out: dict[str, str] = {}
    for n in profile.per_node:
        value = node_value(annotations.get(n.node_annotation), n.prefix)
        if value is not None:
            out[n.pod_annotation] = value
    return out




def node_value_problems(profile: FabricProfile | None, node: Mapping[str, Any] | None) -> list[str]:
    """One sentence per per-node annotation of ``node`` that the profile reads and cannot use (pure).

    Each names the node, the annotation, its value and why, and says what NCCL does instead
    (the variable is left unset: every device). Empty when there is no profile, no node, or nothing wrong.
    """
    if profile is None or not node:
        return []
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    out = []
    for n in profile.per_node:
        raw = annotations.get(n.node_annotation)
        why = node_value_problem(raw)
        if why is not None:
            out.append(
                f"node {meta.get('name', '?')}: annotation {n.node_annotation}={raw!r} is not used ({why}), so {n.env} is left unset "
                f"and NCCL uses every device; write the devices comma-separated, optionally after NCCL's ^ (exclude) or = (exact) prefix"
            )
    return out


def _requests(trainer: Mapping[str, Any]) -> set[str]:
    resources = trainer.get("resources") or {}
    return {k for kind in ("requests", "limits") for k in (resources.get(kind) or {})}


def device_problem(profile: FabricProfile | None, spec: "TrainingJobSpec") -> str | None:
    """One sentence when the profile needs an RDMA device for this job and its template asks for none.

    Only a job that spans nodes and requests GPUs needs one; a single node
    talks over NVLink and shared memory.

    Returns:
        The sentence (naming the profile, the device and the ways to request
        it), or None when the job has one or needs none.
    """
    need = profile.requires if profile is not None else None
    if need is None or spec.resources.gpus == 0 or spec.nodes < 2:
        return None
    trainer, annotations, host_network = _template(spec)
    have = _requests(trainer)
    if any(h == r or (r.endswith("/") and h.startswith(r)) for r in need.resources for h in have):
        return None
    if any(a in annotations for a in need.annotations) or (need.host_network and host_network):
        return None
    return (
        f"spec.template: the operator's fabric profile {profile.name} expects {need.what} for a multi-node GPU job "
        f"({need.ways()}), and this job requests none, so NCCL will fall back to slower transports such as TCP sockets"
    )


def _annotation_ref(item: Mapping[str, Any]) -> str | None:
    path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
    match = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
    return match.group(1) if match else None


def rank_settings(pod: Mapping[str, Any]) -> dict[str, str]:
    """The NCCL/libfabric settings a rank got, as its training container will see them (for ``get``/``describe``).

    Args:
        pod: a rank's v1 Pod as read from the API server.

    Returns:
        Variable → value for every ``NCCL_*``, ``FI_*`` and ``OFI_NCCL_*``
        variable of the ``trainer`` container, in its env order (a later entry
        of the same name wins, as in the kubelet): literal values as written,
        values read from the pod's annotations resolved (``""`` when the
        annotation is not set), other sources as ``<from KIND>``. Variables
        from ``envFrom`` are not visible in the pod and are not listed.
    """
    containers = (pod.get("spec") or {}).get("containers") or []
    trainer = next((c for c in containers if c.get("name") == TRAINER), None)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    out: dict[str, str] = {}
    for item in (trainer or {}).get("env") or []:
        name = item.get("name", "")
        if not name.startswith(SETTING_PREFIXES):
            continue
        if "valueFrom" not in item:
            out[name] = str(item.get("value", ""))
        elif (key := _annotation_ref(item)) is not None:
            out[name] = annotations.get(key, "")
        else:
            out[name] = f"<from {next(iter(item['valueFrom']), 'valueFrom')}>"
    return out
