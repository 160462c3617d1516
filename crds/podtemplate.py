"""``spec.template``: the pod template of a TrainingJob, and the rule for merging it with what the operator owns.

A real job needs more than an image: its dataset on a PersistentVolumeClaim,
credentials from a Secret, a nodeSelector for the GPU product, tolerations of
the GPU taint, a ServiceAccount, an image pull secret, RDMA devices. The
template takes those as real core/v1 pod fields; their schemas come from the
Kubernetes release (:mod:`railtrain.crds.corev1`), so the API server checks
their types as it checks a pod's.

The merge rule (``docs/template.md``):

* the template's ``metadata.labels``/``annotations`` and every pod field it
  sets go into every pod of the gang as written;
* the container named ``trainer`` in ``template.spec.containers`` is merged
  into the training container: its env, envFrom, volumeMounts, ports,
  securityContext, extra resources, probes, workingDir ... are added to what
  the operator renders; any other container or init container is a sidecar,
  copied as written;
* the operator always owns, and a template setting them is refused with one
  sentence naming both fields: the gang's scheduling gate and node pin
  (``schedulingGates``, ``nodeName``, ``nodeSelector[kubernetes.io/hostname]``),
  ``restartPolicy`` (Never: the operator restarts the whole gang), the
  rendezvous DNS name (``hostname``/``subdomain``) and ports, the
  ``railtrain.dev/`` labels and annotations, the pod-environment contract
  variables, the training container's image/command/args (``spec.image``,
  ``spec.command``, ``spec.args``), its termination message (the trainer's
  verdict), the resources ``spec.resources`` sets, and the checkpoint-tier and
  ``/dev/shm`` mounts.

Every conflict is a :class:`TemplateRule`: a CEL expression kube-apiserver
enforces at apply time and the same check in Python for ``railtrain validate``,
which names the exact entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pydantic import Field, model_validator

from railtrain.crds import contract, corev1
from railtrain.crds.labels import HOSTNAME
from railtrain.crds.base import Model as _Model

if TYPE_CHECKING:
    from railtrain.crds.api import TrainingJobSpec

TRAINER = "trainer"
"""Name of the training container; a template container of this name is merged into it."""
SHM_MOUNT = "/dev/shm"
SHM_VOLUME = "railtrain-shm"
TIER_VOLUMES = ("checkpoint-memory", "checkpoint-local", "checkpoint-persistent")
RESERVED_VOLUMES = (*TIER_VOLUMES, SHM_VOLUME)
"""Volume names the operator renders (checkpoint tiers, shared memory)."""
RESERVED_PREFIX = f"{contract.API_GROUP}/"
CORE_V1 = "x-railtrain-corev1"
"""JSON-schema key naming the core/v1 PodSpec property a field's schema comes from (read by :mod:`railtrain.crds.schema`)."""
CONTRACT_ENV = tuple(sorted(contract.pod_env(contract.PodEnvironment("j", "n", 1, 0, 1, "a")).keys()))
"""Variables of the pod-environment contract; the operator sets them in the training container."""
OPERATOR_PORTS = (contract.DEFAULT_RDZV_PORT, contract.DEFAULT_METRICS_PORT)


def _k8s(name: str, default: Any = None, owned: str = "") -> Any:
    """A field whose schema is core/v1 PodSpec property ``name``; ``owned`` explains why setting it is refused."""
    extra = {CORE_V1: name}
    if owned:
        return Field(default, description=f"Owned by the operator; setting it is refused: {owned}.", json_schema_extra=extra)
    return Field(default, json_schema_extra=extra)


class TemplateMetadata(_Model):
    """Labels and annotations added to every pod of the gang."""

    labels: dict[str, str] = Field(default_factory=dict, max_length=64, description="Labels of every pod; keys under railtrain.dev/ and app.kubernetes.io/managed-by are the operator's.")
    annotations: dict[str, str] = Field(default_factory=dict, max_length=64, description="Annotations of every pod; keys under railtrain.dev/ are the operator's.")


class TemplatePodSpec(_Model):
    """The core/v1 PodSpec fields a training job may set (types and documentation as in the Kubernetes release)."""

    volumes: list[dict[str, Any]] = _k8s("volumes", [])
    containers: list[dict[str, Any]] = _k8s("containers", [])
    init_containers: list[dict[str, Any]] = _k8s("initContainers", [])
    node_selector: dict[str, str] = _k8s("nodeSelector", {})
    affinity: dict[str, Any] | None = _k8s("affinity")
    tolerations: list[dict[str, Any]] = _k8s("tolerations", [])
    topology_spread_constraints: list[dict[str, Any]] = _k8s("topologySpreadConstraints", [])
    priority_class_name: str | None = _k8s("priorityClassName")
    service_account_name: str | None = _k8s("serviceAccountName")
    automount_service_account_token: bool | None = _k8s("automountServiceAccountToken")
    image_pull_secrets: list[dict[str, Any]] = _k8s("imagePullSecrets", [])
    security_context: dict[str, Any] | None = _k8s("securityContext")
    host_network: bool | None = _k8s("hostNetwork")
    host_ipc: bool | None = _k8s("hostIPC")
    dns_policy: str | None = _k8s("dnsPolicy")
    dns_config: dict[str, Any] | None = _k8s("dnsConfig")
    runtime_class_name: str | None = _k8s("runtimeClassName")
    termination_grace_period_seconds: int | None = _k8s("terminationGracePeriodSeconds")
    restart_policy: str | None = _k8s("restartPolicy", owned="pods run with restartPolicy Never and the operator restarts the whole gang (spec.runPolicy.backoffLimit)")
    node_name: str | None = _k8s("nodeName", owned="the operator pins each rank to the node placement chose (status.placement)")
    scheduling_gates: list[dict[str, Any]] | None = _k8s("schedulingGates", owned="the operator holds the gang's gate until every rank has a node")
    hostname: str | None = _k8s("hostname", owned="each pod is named <job>-<rank> for the rendezvous DNS name")
    subdomain: str | None = _k8s("subdomain", owned="the job's headless rendezvous Service")

    @model_validator(mode="before")
    @classmethod
    def _core_v1_types(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        problems = [
            p
            for key, value in data.items()
            if key in corev1.POD_SPEC_FIELDS
            for p in corev1.check(value, corev1.property_schema(key), f"spec.template.spec.{key}")
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return data

    def container(self, name: str = TRAINER) -> dict[str, Any] | None:
        """The template container called ``name`` (default: the training container's entry), or None."""
        return next((c for c in self.containers if c.get("name") == name), None)


class PodTemplate(_Model):
    """spec.template: pod metadata and PodSpec fields merged into every pod of the gang (docs/template.md)."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata, description="Labels and annotations of every pod.")
    spec: TemplatePodSpec = Field(default_factory=TemplatePodSpec, description="PodSpec fields of every pod; the container named trainer is merged into the training container, others are sidecars.")


@dataclass(frozen=True)
class TemplateRule:
    """One conflict between the template and what the operator owns, enforced in two places.

    Attributes:
        cel: CEL expression over the TrainingJob spec (``self``); true when there is no conflict.
        message: one sentence naming both fields (the API server's refusal).
        field_path: where the API server points the error, relative to the spec.
        problems: the same check in Python; returns one sentence per offending
            entry, naming it (``railtrain validate``).
    """

    cel: str
    message: str
    field_path: str
    problems: Callable[["TrainingJobSpec"], list[str]]


_T = "self.template.spec"


def _has(*fields: str) -> str:
    """CEL guard: true when ``self.template.spec.<fields...>`` is absent."""
    parts = ["!has(self.template)", f"!has({_T})"]
    path = _T
    for f in fields:
        path += f".{f}"
        parts.append(f"!has({path})")
    return " || ".join(parts)


def _cel_list(items: tuple[Any, ...]) -> str:
    return "[" + ", ".join(repr(i) if isinstance(i, str) else str(i) for i in items) + "]"


def _trainer(spec: "TrainingJobSpec") -> dict[str, Any]:
    return (spec.template.spec.container() if spec.template else None) or {}


def _each_trainer(cel: str) -> str:
    """CEL: ``cel`` (over ``c``, the container) holds for the template's trainer container."""
    return f"{_has('containers')} || {_T}.containers.all(c, c.name != '{TRAINER}' || ({cel}))"


def _owned_pod_field(field: str, alias: str) -> TemplateRule:
    why = TemplatePodSpec.model_fields[field].description or ""
    return TemplateRule(
        cel=_has(alias),
        message=f"spec.template.spec.{alias} is set by the operator: {why.split(': ', 1)[-1].rstrip('.')}",
        field_path=f".template.spec.{alias}",
        problems=lambda s: [] if s.template is None or getattr(s.template.spec, field) is None else [f"spec.template.spec.{alias} is set by the operator: {why.split(': ', 1)[-1].rstrip('.')}"],
    )


def _trainer_field(key: str, owner: str, why: str) -> TemplateRule:
    msg = f"spec.template.spec.containers[{TRAINER}].{key} conflicts with {owner}: {why}"
    return TemplateRule(_each_trainer(f"!has(c.{key})"), msg, f".template.spec.containers", lambda s: [msg] if key in _trainer(s) else [])


def _env_problems(spec: "TrainingJobSpec") -> list[str]:
    mine = {v.name for v in spec.env}
    out = []
    for var in _trainer(spec).get("env") or []:
        name = var.get("name")
        if name in CONTRACT_ENV:
            out.append(f"spec.template.spec.containers[{TRAINER}].env[{name}] is a pod-environment contract variable the operator sets (from spec.nodes, spec.procsPerNode, spec.parallelism, spec.precision and spec.checkpoint)")
        elif name in mine:
            out.append(f"spec.template.spec.containers[{TRAINER}].env[{name}] conflicts with spec.env[{name}]: set each variable in one place")
    return out


def _resource_problems(spec: "TrainingJobSpec") -> list[str]:
    res = _trainer(spec).get("resources") or {}
    owned = {spec.resources.gpu_resource_name: "spec.resources.gpus"}
    if spec.resources.cpu is not None:  # as CEL's has(): a quantity of 0 is set too
        owned["cpu"] = "spec.resources.cpu"
    if spec.resources.memory is not None:
        owned["memory"] = "spec.resources.memory"
    return [
        f"spec.template.spec.containers[{TRAINER}].resources.{kind}[{name}] conflicts with {owned[name]}: request it in one place"
        for kind in ("requests", "limits")
        for name in (res.get(kind) or {})
        if name in owned
    ]


def _mount_problems(spec: "TrainingJobSpec") -> list[str]:
    out = []
    for m in _trainer(spec).get("volumeMounts") or []:
        path = str(m.get("mountPath", "")).rstrip("/") or "/"
        where = f"spec.template.spec.containers[{TRAINER}].volumeMounts[{path}]"
        if path in (contract.MEMORY_TIER_MOUNT, contract.LOCAL_TIER_MOUNT):
            out.append(f"{where} conflicts with spec.checkpoint.memory/local: that path is a checkpoint tier's mount")
        elif path == SHM_MOUNT and spec.resources.shm is not None:
            out.append(f"{where} conflicts with spec.resources.shm, which mounts a memory-backed /dev/shm; use one of them")
        elif spec.checkpoint.volume_claim and spec.checkpoint.location and path == spec.checkpoint.location.rstrip("/"):
            out.append(f"{where} conflicts with spec.checkpoint.volumeClaim, which is mounted at spec.checkpoint.location")
    return out


def _unknown_volume_problems(spec: "TrainingJobSpec") -> list[str]:
    """Mounts that name no volume: neither one of ``spec.template.spec.volumes`` nor one the operator renders (:data:`RESERVED_VOLUMES`)."""
    if spec.template is None:
        return []
    known = set(_names(spec, "volumes")) | set(RESERVED_VOLUMES)
    out = []
    for field, alias in (("containers", "containers"), ("init_containers", "initContainers")):
        for c in getattr(spec.template.spec, field):
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in known:
                    out.append(
                        f"spec.template.spec.{alias}[{c.get('name')}].volumeMounts[{m.get('mountPath', '')}] names volume "
                        f"{m.get('name')!r}, which spec.template.spec.volumes does not define"
                    )
    return out


def _names(spec: "TrainingJobSpec", field: str) -> list[str]:
    return [str(c.get("name")) for c in getattr(spec.template.spec, field)] if spec.template else []


def _ports_problems(spec: "TrainingJobSpec") -> list[str]:
    out = []
    for field, alias in (("containers", "containers"), ("init_containers", "initContainers")):
        for c in getattr(spec.template.spec, field) if spec.template else []:
            for p in c.get("ports") or []:
                if p.get("containerPort") in OPERATOR_PORTS or (c.get("name") == TRAINER and p.get("name") in ("rendezvous", "metrics")):
                    out.append(f"spec.template.spec.{alias}[{c.get('name')}].ports: port {p.get('containerPort')} ({p.get('name', 'unnamed')}) conflicts with the operator's rendezvous port {contract.DEFAULT_RDZV_PORT} and metrics port {contract.DEFAULT_METRICS_PORT}")
    return out


SCHEDULER_ONLY = "kube-scheduler enforces it against other pods' places, which railtrain's gang placement does not model, so a placed gang could be refused binding"
"""Why the template may not carry a hard scheduling rule placement cannot honour (issue 15, kind 8)."""


def _inter_pod_problems(spec: "TrainingJobSpec") -> list[str]:
    affinity = (spec.template.spec.affinity if spec.template else None) or {}
    return [
        f"spec.template.spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution is not supported: {SCHEDULER_ONLY} "
        f"(use {kind}.preferredDuringSchedulingIgnoredDuringExecution, or spec.topology to pack or spread the gang)"
        for kind in ("podAffinity", "podAntiAffinity")
        if "requiredDuringSchedulingIgnoredDuringExecution" in (affinity.get(kind) or {})
    ]


def _spread_problems(spec: "TrainingJobSpec") -> list[str]:
    return [
        f"spec.template.spec.topologySpreadConstraints[{i}].whenUnsatisfiable DoNotSchedule is not supported: {SCHEDULER_ONLY} "
        "(use ScheduleAnyway, or spec.topology to pack or spread the gang)"
        for i, t in enumerate(spec.template.spec.topology_spread_constraints if spec.template else [])
        if t.get("whenUnsatisfiable") == "DoNotSchedule"
    ]


def _host_port_problems(spec: "TrainingJobSpec") -> list[str]:
    return [
        f"spec.template.spec.{alias}[{c.get('name')}].ports: hostPort {p.get('hostPort')} is not supported: {SCHEDULER_ONLY} "
        "(use a containerPort: with hostNetwork the container ports are the node's)"
        for field, alias in (("containers", "containers"), ("init_containers", "initContainers"))
        for c in (getattr(spec.template.spec, field) if spec.template else [])
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def _meta_problems(spec: "TrainingJobSpec") -> list[str]:
    if spec.template is None:
        return []
    meta = spec.template.metadata
    bad = [f"spec.template.metadata.labels[{k}]" for k in meta.labels if k.startswith(RESERVED_PREFIX) or k == contract.LABEL_MANAGED_BY]
    bad += [f"spec.template.metadata.annotations[{k}]" for k in meta.annotations if k.startswith(RESERVED_PREFIX)]
    return [f"{b} is the operator's: keys under {RESERVED_PREFIX} (and {contract.LABEL_MANAGED_BY}) are set from the job" for b in bad]


_CONTAINERS = f"{_T}.containers"
_MOUNTS_KNOWN = (
    f"!has(c.volumeMounts) || c.volumeMounts.all(m, m.name in {_cel_list(RESERVED_VOLUMES)} "
    f"|| (has({_T}.volumes) && {_T}.volumes.exists(v, v.name == m.name)))"
)
_PORTS_OK = f"!has(c.ports) || c.ports.all(p, !(p.containerPort in {_cel_list(OPERATOR_PORTS)}))"
_PINNED_BY_HOSTNAME = (
    f"spec.template.spec.nodeSelector[{HOSTNAME}] conflicts with the operator's placement (status.placement), which pins each rank by that key; "
    "select nodes by another label"
)

TEMPLATE_RULES: tuple[TemplateRule, ...] = (
    *(_owned_pod_field(f, a) for f, a in (("restart_policy", "restartPolicy"), ("node_name", "nodeName"), ("scheduling_gates", "schedulingGates"), ("hostname", "hostname"), ("subdomain", "subdomain"))),
    _trainer_field("image", "spec.image", "the training container's image is set by spec.image"),
    _trainer_field("command", "spec.command", "the training container's command is set by spec.command"),
    _trainer_field("args", "spec.args", "the training container's arguments are set by spec.args"),
    _trainer_field("terminationMessagePath", "the trainer's verdict", f"the operator reads the trainer's verdict from {contract.TERMINATION_MESSAGE_PATH}"),
    _trainer_field("terminationMessagePolicy", "the trainer's verdict", "the operator sets FallbackToLogsOnError"),
    TemplateRule(
        cel=_each_trainer(f"!has(c.env) || c.env.all(e, !(e.name in {_cel_list(CONTRACT_ENV)}))"),
        message=f"spec.template.spec.containers[{TRAINER}].env conflicts with the pod-environment contract: the operator sets the RAILTRAIN_*/PET_* variables from spec.nodes, spec.procsPerNode, spec.parallelism, spec.precision and spec.checkpoint",
        field_path=".template.spec.containers",
        problems=_env_problems,
    ),
    TemplateRule(
        cel=_each_trainer(
            "!has(c.resources) || [has(c.resources.requests) ? c.resources.requests : {}, has(c.resources.limits) ? c.resources.limits : {}].all(r, "
            "!(self.resources.gpuResourceName in r) && (!has(self.resources.cpu) || !('cpu' in r)) && (!has(self.resources.memory) || !('memory' in r)))"
        ),
        message=f"spec.template.spec.containers[{TRAINER}].resources conflicts with spec.resources: the accelerator, cpu and memory that spec.resources sets are requested there only; the template adds other resources (e.g. rdma/*, hugepages-*)",
        field_path=".template.spec.containers",
        problems=_resource_problems,
    ),
    TemplateRule(
        cel=_each_trainer(
            f"!has(c.volumeMounts) || c.volumeMounts.all(m, !(m.mountPath in {_cel_list((contract.MEMORY_TIER_MOUNT, contract.LOCAL_TIER_MOUNT))}) "
            f"&& (!has(self.resources.shm) || m.mountPath != '{SHM_MOUNT}') && (!has(self.checkpoint.volumeClaim) || !has(self.checkpoint.location) || m.mountPath != self.checkpoint.location))"
        ),
        message=f"spec.template.spec.containers[{TRAINER}].volumeMounts conflicts with spec.checkpoint or spec.resources.shm: the checkpoint tiers, spec.checkpoint.location (with volumeClaim) and /dev/shm (with spec.resources.shm) are mounted by the operator",
        field_path=".template.spec.containers",
        problems=_mount_problems,
    ),
    TemplateRule(
        cel=f"{_has('volumes')} || {_T}.volumes.all(v, !(v.name in {_cel_list(RESERVED_VOLUMES)}))",
        message=f"spec.template.spec.volumes conflicts with spec.checkpoint and spec.resources.shm: the volume names {', '.join(RESERVED_VOLUMES)} are the operator's",
        field_path=".template.spec.volumes",
        problems=lambda s: [f"spec.template.spec.volumes[{n}] conflicts with spec.checkpoint and spec.resources.shm: that volume name is the operator's" for n in _names(s, "volumes") if n in RESERVED_VOLUMES],
    ),
    # One rule per list: together they exceed the API server's CEL cost budget for one rule.
    TemplateRule(
        cel=f"{_has('containers')} || {_CONTAINERS}.all(c, {_MOUNTS_KNOWN})",
        message="spec.template.spec.containers[].volumeMounts names a volume that spec.template.spec.volumes does not define (each mount's name must be one of its volumes, or a volume the operator renders)",
        field_path=".template.spec.containers",
        problems=lambda s: [p for p in _unknown_volume_problems(s) if p.startswith("spec.template.spec.containers")],
    ),
    TemplateRule(
        cel=f"{_has('initContainers')} || {_T}.initContainers.all(c, {_MOUNTS_KNOWN})",
        message="spec.template.spec.initContainers[].volumeMounts names a volume that spec.template.spec.volumes does not define (each mount's name must be one of its volumes, or a volume the operator renders)",
        field_path=".template.spec.initContainers",
        problems=lambda s: [p for p in _unknown_volume_problems(s) if p.startswith("spec.template.spec.initContainers")],
    ),
    TemplateRule(
        cel=f"{_has('initContainers')} || {_T}.initContainers.all(c, c.name != '{TRAINER}')",
        message=f"spec.template.spec.initContainers[{TRAINER}] conflicts with spec.image: the name {TRAINER} is the training container's",
        field_path=".template.spec.initContainers",
        problems=lambda s: [f"spec.template.spec.initContainers[{TRAINER}] conflicts with spec.image: the name {TRAINER} is the training container's"] if TRAINER in _names(s, "init_containers") else [],
    ),
    TemplateRule(
        cel=f"({_has('containers')} || {_CONTAINERS}.all(c, c.name == '{TRAINER}' || has(c.image))) && ({_has('initContainers')} || {_T}.initContainers.all(c, has(c.image)))",
        message="spec.template.spec.containers[].image is required for every sidecar and init container (only the trainer entry takes its image from spec.image)",
        field_path=".template.spec",
        problems=lambda s: [
            f"spec.template.spec.{alias}[{c.get('name')}].image is required for a sidecar or init container"
            for field, alias in (("containers", "containers"), ("init_containers", "initContainers"))
            for c in (getattr(s.template.spec, field) if s.template else [])
            if c.get("name") != TRAINER and not c.get("image")
        ],
    ),
    TemplateRule(
        cel=f"({_has('containers')} || {_CONTAINERS}.all(c, {_PORTS_OK})) && ({_has('initContainers')} || {_T}.initContainers.all(c, {_PORTS_OK}))",
        message=f"spec.template.spec.containers[].ports conflicts with the operator's rendezvous port {contract.DEFAULT_RDZV_PORT} and metrics port {contract.DEFAULT_METRICS_PORT}",
        field_path=".template.spec",
        problems=_ports_problems,
    ),
    TemplateRule(
        cel=f"{_has('nodeSelector')} || !('{HOSTNAME}' in {_T}.nodeSelector)",
        message=_PINNED_BY_HOSTNAME,
        field_path=".template.spec.nodeSelector",
        problems=lambda s: [_PINNED_BY_HOSTNAME] if s.template and HOSTNAME in s.template.spec.node_selector else [],
    ),
    TemplateRule(
        cel=f"({_has('affinity', 'podAffinity', 'requiredDuringSchedulingIgnoredDuringExecution')}) && ({_has('affinity', 'podAntiAffinity', 'requiredDuringSchedulingIgnoredDuringExecution')})",
        message=f"spec.template.spec.affinity.podAffinity/podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution is not supported: {SCHEDULER_ONLY} (use the preferred form, or spec.topology to pack or spread the gang)",
        field_path=".template.spec.affinity",
        problems=_inter_pod_problems,
    ),
    TemplateRule(
        cel=f"{_has('topologySpreadConstraints')} || {_T}.topologySpreadConstraints.all(t, t.whenUnsatisfiable != 'DoNotSchedule')",
        message=f"spec.template.spec.topologySpreadConstraints[].whenUnsatisfiable DoNotSchedule is not supported: {SCHEDULER_ONLY} (use ScheduleAnyway, or spec.topology to pack or spread the gang)",
        field_path=".template.spec.topologySpreadConstraints",
        problems=_spread_problems,
    ),
    TemplateRule(
        cel=(
            f"({_has('containers')} || {_CONTAINERS}.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))) && "
            f"({_has('initContainers')} || {_T}.initContainers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)))"
        ),
        message=f"spec.template.spec.containers[].ports[].hostPort is not supported: {SCHEDULER_ONLY} (use a containerPort: with hostNetwork the container ports are the node's)",
        field_path=".template.spec",
        problems=_host_port_problems,
    ),
    TemplateRule(
        cel=(
            f"!has(self.template) || !has(self.template.metadata) || ((!has(self.template.metadata.labels) || self.template.metadata.labels.all(k, !k.startsWith('{RESERVED_PREFIX}') && k != '{contract.LABEL_MANAGED_BY}')) "
            f"&& (!has(self.template.metadata.annotations) || self.template.metadata.annotations.all(k, !k.startsWith('{RESERVED_PREFIX}'))))"
        ),
        message=f"spec.template.metadata conflicts with the operator's labels and annotations: keys under {RESERVED_PREFIX} (and the label {contract.LABEL_MANAGED_BY}) are set from the job",
        field_path=".template.metadata",
        problems=_meta_problems,
    ),
)


def template_problems(spec: "TrainingJobSpec") -> list[str]:
    """Every conflict of ``spec.template`` with what the operator owns, one sentence each naming both fields (empty when none)."""
    if spec.template is None:
        return []
    return [p for rule in TEMPLATE_RULES for p in rule.problems(spec)]
