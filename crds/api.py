"""The TrainingJob API (``railtrain.dev/v1alpha1``): pydantic models, the single source of truth.

The CRD in ``crds/trainingjob.yaml`` is generated from these models by
:mod:`railtrain.crds.schema`; field descriptions become ``kubectl explain``
text, and every cross-field rule in :data:`SPEC_RULES` is both checked here (for
``railtrain validate`` and local runs) and emitted as a CEL
``x-kubernetes-validations`` rule that kube-apiserver enforces.

Conventions follow the Kubernetes API conventions: camelCase JSON names,
``status.conditions`` of type/status/reason/message/lastTransitionTime/
observedGeneration, and phases as a coarse summary next to conditions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Callable, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from railtrain.crds import contract, parallel
from railtrain.crds.base import Model as _Model
from railtrain.crds.meta import DNS_1035, MAX_NAME_LENGTH, ObjectMeta, qualified_name_error  # noqa: F401  (DNS_1035 and MAX_NAME_LENGTH re-exported)
from railtrain.crds.goodput import Goodput, Progress
from railtrain.crds.failure_policy import CleanPodPolicy, FailurePolicy, InPlaceRecord, NodeFailureRecord, QuarantineRecord, SuspectRecord, unique_verdicts
from railtrain.crds.podtemplate import PodTemplate, template_problems
from railtrain.crds import launcher, supervisor
from railtrain.crds.precision import FLOAT8_ONLY_WITH_FP8, FP8_NEEDS_GPUS, Precision, float8_only_with_fp8, fp8_has_gpus
from railtrain.crds.quantity import BYTES_EXAMPLE, CPU_EXAMPLE, BytesQuantity, CpuQuantity, quantity_field  # noqa: F401  (BytesQuantity, CpuQuantity re-exported)
from railtrain.crds import replica_groups
from railtrain.crds.replica_groups import FaultTolerance  # noqa: F401  (spec.faultTolerance's model, re-exported)
from railtrain.crds.replica_groups import ReplicaGroupStatus  # noqa: F401  (status.replicaGroups' model, re-exported)
from railtrain.crds.checkpoint import RUN_ID_PATTERN, Checkpoint, LocalTier, MemoryTier, TierVolume  # noqa: F401  (spec.checkpoint's models, re-exported)


@dataclass(frozen=True)
class Rule:
    """A cross-field rule written once and enforced in two places.

    Attributes:
        cel: the CEL expression (Kubernetes ``x-kubernetes-validations``), evaluated
            with ``self`` bound to the object the rule is attached to.
        check: the same rule in Python over the pydantic object; returns True when valid.
        message: one sentence naming the field and what is allowed.
        field_path: JSONPath-style path, relative to the object, that the error points at.
        detail: the numbers behind a failure (e.g. the product and the world
            size), appended to ``message`` after ": " by ``railtrain validate``;
            None adds nothing. The API server gives ``message`` alone: a CEL
            ``messageExpression`` with ``string(int)`` parts exceeds the CRD's
            estimated cost budget (kube-apiserver refuses the CRD).
    """

    cel: str
    check: Callable[[Any], bool]
    message: str
    field_path: str
    detail: Callable[[Any], str] | None = None

    def sentence(self, obj: Any) -> str:
        """The error sentence for ``obj`` (which failed :attr:`check`): the message, plus the detail when there is one."""
        return f"{self.message}: {self.detail(obj)}" if self.detail else self.message




class EnvVar(_Model):
    """One environment variable for the training container (a subset of core/v1 EnvVar)."""

    name: str = Field(description="Name of the environment variable; must be a C identifier.", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = Field("", description="Value of the environment variable.")


class Resources(_Model):
    """Resources of one node's pod (all processes of that node together)."""

    gpus: int = Field(0, ge=0, description="Accelerators per pod, requested as the extended resource gpuResourceName.")
    gpu_resource_name: str = Field("nvidia.com/gpu", description="Extended resource name of the accelerator (device plugin).")
    cpu: CpuQuantity | None = quantity_field("spec.resources.cpu", CPU_EXAMPLE, "CPU request and limit per pod as a Kubernetes quantity, e.g. 16 or \"500m\".")
    memory: BytesQuantity | None = quantity_field("spec.resources.memory", BYTES_EXAMPLE, "Memory request and limit per pod as a Kubernetes quantity, e.g. \"64Gi\".")
    shm: BytesQuantity | None = quantity_field("spec.resources.shm", BYTES_EXAMPLE, "Size of a memory-backed /dev/shm mounted in the training container (PyTorch data loaders and NCCL need far more than the container default of 64Mi), e.g. \"32Gi\"; its pages count toward the pod's memory.")


class Parallelism(_Model):
    """Parallel degrees; their product must equal nodes × procsPerNode (the world size).

    Omitted degrees are 1. Tensor parallel must fit inside one node, because its
    all-reduce runs at every layer and needs NVLink bandwidth (Megatron-LM,
    Shoeybi et al. 2019); so must a context-parallel group with its tensor
    ranks, which passes key/value blocks at every attention layer (ring
    attention, Liu et al. 2023). See docs/parallelism.md.
    """

    data: int = Field(1, ge=1, description="Data-parallel replicas (gradients all-reduced, DDP or the replicate dimension of HSDP).")
    fsdp: int = Field(1, ge=1, description="Fully sharded data-parallel degree (FSDP2 / ZeRO-3 shard dimension).")
    tensor: int = Field(1, ge=1, description="Tensor-parallel degree; must divide procsPerNode so a TP group never crosses a node, or, with topology.nvlinkDomain, be a multiple of it (a group of whole nodes of one NVLink domain).")
    pipeline: int = Field(1, ge=1, description="Pipeline-parallel stages.")
    context: int = Field(1, ge=1, description="Context-parallel degree: ranks that split every sequence and run ring attention over it; context × tensor must divide procsPerNode so a CP group never crosses a node (or, with topology.nvlinkDomain, be a multiple of it), and the trainer's --seq-len must be a multiple of 2 × context × tensor.")

    @property
    def product(self) -> int:
        """data × fsdp × tensor × pipeline × context."""
        return parallel.product(self)

    @property
    def inner(self) -> int:
        """fsdp × tensor × pipeline × context: the degrees an elastic job keeps fixed while data scales."""
        return parallel.inner(self)


LABEL_KEY_CEL = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
"""A Kubernetes label key (qualified name, :func:`railtrain.crds.meta.qualified_name_error`) as a CEL regular expression; the prefix's 253-character bound is a separate test."""
LABEL_KEY_MAX_LENGTH = 253 + 1 + 63
LEVEL_MESSAGE = ("spec.topology.level must be a Kubernetes label key: an optional DNS subdomain prefix and '/', then at most 63 letters, "
                 "digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. railtrain.dev/rack)")


class TopologyPolicy(str, Enum):
    """How strictly the gang must stay inside one topology domain."""

    NONE = "none"
    PREFERRED = "preferred"
    REQUIRED = "required"


class Topology(_Model):
    """Topology-aware placement of the gang."""

    policy: TopologyPolicy = Field(TopologyPolicy.PREFERRED, description="none: any nodes; preferred: tightest domain first, then wider; required: the whole gang inside one domain of level.")
    level: str | None = Field(
        None,
        max_length=LABEL_KEY_MAX_LENGTH,
        description="Node label key naming the topology level for policy required or preferred, e.g. railtrain.dev/rack; must be one of the levels the operator is configured with (see docs/topology.md).",
        json_schema_extra={"x-kubernetes-validations": [{"rule": f"self == '' || (self.matches('{LABEL_KEY_CEL}') && self.indexOf('/') <= 253)", "message": LEVEL_MESSAGE, "reason": "FieldValueInvalid"}]},
    )
    nvlink_domain: bool = Field(
        False,
        description=(
            "Place the whole gang inside one NVLink domain (the operator's topology level naming nvidia.com/gpu.clique, "
            "e.g. a GB200 NVL72 rack) and give every pod an IMEX channel from an NVIDIA DRA driver ComputeDomain the "
            "operator creates and deletes with the job; lets parallelism.tensor be a multiple of procsPerNode (docs/fabric.md)."
        ),
    )

    @field_validator("level")
    @classmethod
    def _level_is_a_label_key(cls, level: str | None) -> str | None:
        if level and qualified_name_error(level):
            raise ValueError(f"{json.dumps(level)} is not a Kubernetes label key; use an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. railtrain.dev/rack)")
        return level


class RunPolicy(_Model):
    """Lifecycle limits of the job (mirrors batch/v1 Job semantics)."""

    backoff_limit: int = Field(3, ge=0, description="Gang restarts allowed after retryable failures before the job is Failed.")
    active_deadline_seconds: int | None = Field(None, ge=1, description="Seconds the job may run, counted from status.startTime (when the gang was first fully Running), after which it is Failed with reason DeadlineExceeded. As for batch/v1 Job, suspending stops the timer and resuming restarts it.")
    suspend: bool = Field(False, description="When true, no pods exist; setting it back to false admits the job again.")
    gang_timeout_seconds: int = Field(
        300,
        ge=1,
        description="Seconds after the gang is released to its nodes within which every rank must be Running; otherwise every pod is deleted, the nodes are freed and the job is re-queued with exponential backoff.",
    )
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy, description="What a failed gang's verdict leads to (fail, restart, restart without spending backoffLimit, quarantine or avoid the named nodes); see docs/operator.md for the defaults.")
    clean_pod_policy: CleanPodPolicy = Field(CleanPodPolicy.RUNNING, description="Pods of a finished job (Succeeded or Failed): Running deletes the pods still running and keeps the finished ones, with their logs and termination messages, for inspection; All deletes every pod. No pod of a finished job keeps running either way.")
    node_lost_grace_seconds: int = Field(30, ge=0, le=3600, description="Seconds a node under the gang may be NotReady before it counts as lost: then the whole gang restarts on other nodes (reason NodeLost) and the job's pods on that node are force-deleted. A deleted Node is lost at once.")
    ttl_seconds_after_finished: int | None = Field(None, ge=0, description="Seconds after completionTime (Succeeded or Failed) after which the operator deletes the job and, through ownerReferences, its pods; omitted keeps it.")
    max_infrastructure_restarts: int = Field(10, ge=0, le=1000, description="Infrastructure restarts (a node lost, quarantined or avoided, a rank evicted or refused by its node, a rank's pod deleted, an elastic grow) allowed before the job is Failed with reason InfrastructureRestartLimitExceeded; they do not spend backoffLimit.")
    infrastructure_backoff_seconds: int = Field(10, ge=0, le=3600, description="Wait before the second infrastructure restart; each further one waits twice as long, at most 300 s (or this value when larger). The first is immediate.")
    restart_backoff_seconds: int = Field(10, ge=0, le=3600, description="Wait before the second job restart (one that spends backoffLimit); each further one waits twice as long, at most 300 s (or this value when larger). The first is immediate; 0 restarts at once. As batch/v1 Job's pod failure backoff (10 s doubling).")
    restart_in_place: bool = Field(False, description="When true, a restart that needs no node out (a retryable crash, a hang or straggler whose node is neither quarantined nor avoided, a data fault whose rule restarts) restarts the training processes inside the running pods (the pod-side supervisor, python -m railtrain.crds.supervisor, is the container's entry); a node out, or an in-place restart whose attempt fails again, restarts the whole gang. Both spend the same backoffLimit and maxInfrastructureRestarts.")


class Elastic(_Model):
    """Elastic admission: the gang may start with fewer nodes than spec.nodes (the maximum)."""

    min_nodes: int = Field(ge=1, le=4096, description="Fewest nodes the job may be admitted with; the operator admits the largest count between minNodes and nodes that fits now.")
    grow_interval_seconds: int = Field(300, ge=0, le=86400, description="Least time between the start of a gang smaller than nodes and a restart that grows it back when capacity returns (each grow restarts the whole gang).")


SPEC_RULES: tuple[Rule, ...] = (
    Rule(
        cel="!has(self.parallelism) || self.parallelism.data * self.parallelism.fsdp * self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.context == self.nodes * self.procsPerNode",
        check=lambda s: s.parallelism is None or parallel.fills_world(s.parallelism, s.nodes * s.procs_per_node),
        message="spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode (the world size)",
        field_path=".parallelism",
        detail=lambda s: (f"data {s.parallelism.data} × fsdp {s.parallelism.fsdp} × tensor {s.parallelism.tensor} × pipeline {s.parallelism.pipeline} "
                          f"× context {s.parallelism.context} = {s.parallelism.product}, but nodes {s.nodes} × procsPerNode {s.procs_per_node} = {s.world_size}"),
    ),
    Rule(
        cel=(
            "!has(self.parallelism) || self.procsPerNode % self.parallelism.tensor == 0 || "
            "(has(self.topology) && has(self.topology.nvlinkDomain) && self.topology.nvlinkDomain && self.parallelism.tensor % self.procsPerNode == 0)"
        ),
        check=lambda s: s.parallelism is None or parallel.tensor_fits(s.parallelism.tensor, s.procs_per_node, s.topology.nvlink_domain),
        message=(
            "spec.parallelism.tensor must divide procsPerNode: a tensor-parallel group must fit inside one node, "
            "unless spec.topology.nvlinkDomain is true and tensor is a multiple of procsPerNode (the group then spans whole nodes of one NVLink domain)"
        ),
        field_path=".parallelism.tensor",
        detail=lambda s: f"tensor {s.parallelism.tensor}, procsPerNode {s.procs_per_node}, nvlinkDomain {str(s.topology.nvlink_domain).lower()}",
    ),
    Rule(
        cel=(
            "!has(self.parallelism) || self.procsPerNode % self.parallelism.tensor != 0 || self.procsPerNode % (self.parallelism.context * self.parallelism.tensor) == 0 || "
            "(has(self.topology) && has(self.topology.nvlinkDomain) && self.topology.nvlinkDomain && (self.parallelism.context * self.parallelism.tensor) % self.procsPerNode == 0)"
        ),
        check=lambda s: (s.parallelism is None or not parallel.tensor_fits_node(s.parallelism.tensor, s.procs_per_node)
                         or parallel.context_fits(s.parallelism.context, s.parallelism.tensor, s.procs_per_node, s.topology.nvlink_domain)),
        message=(
            "spec.parallelism.context × tensor must divide procsPerNode: a context-parallel group and its tensor-parallel ranks must fit inside one node, "
            "unless spec.topology.nvlinkDomain is true and context × tensor is a multiple of procsPerNode (the group then spans whole nodes of one NVLink domain)"
        ),
        field_path=".parallelism.context",
        detail=lambda s: f"context {s.parallelism.context} × tensor {s.parallelism.tensor} = {s.parallelism.context * s.parallelism.tensor}, procsPerNode {s.procs_per_node}",
    ),
    Rule(
        cel="!has(self.parallelism) || self.parallelism.context == 1 || self.parallelism.pipeline == 1",
        check=lambda s: s.parallelism is None or parallel.context_without_pipeline(s.parallelism.context, s.parallelism.pipeline),
        message="spec.parallelism.context must be 1 when spec.parallelism.pipeline is above 1: context parallelism runs without pipeline stages",
        field_path=".parallelism.context",
    ),
    Rule(
        cel="self.resources.gpus == 0 || self.procsPerNode <= self.resources.gpus",
        check=lambda s: s.resources.gpus == 0 or s.procs_per_node <= s.resources.gpus,
        message="spec.procsPerNode must not exceed spec.resources.gpus when the job requests GPUs (one process per GPU at most)",
        field_path=".procsPerNode",
    ),
    Rule(
        cel="self.topology.policy != 'required' || (has(self.topology.level) && self.topology.level != '')",
        check=lambda s: s.topology.policy != TopologyPolicy.REQUIRED.value or bool(s.topology.level),
        message="spec.topology.level is required when spec.topology.policy is required (the level the whole gang must stay inside)",
        field_path=".topology.level",
    ),
    Rule(
        cel="!has(self.elastic) || self.elastic.minNodes <= self.nodes",
        check=lambda s: s.elastic is None or s.elastic.min_nodes <= s.nodes,
        message="spec.elastic.minNodes must not exceed spec.nodes (nodes is the largest gang the job may be admitted with)",
        field_path=".elastic.minNodes",
    ),
    Rule(
        cel="!has(self.elastic) || !has(self.parallelism) || (self.elastic.minNodes * self.procsPerNode) % (self.parallelism.fsdp * self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.context) == 0",
        check=lambda s: s.elastic is None or s.parallelism is None or (s.elastic.min_nodes * s.procs_per_node) % s.parallelism.inner == 0,
        message="spec.elastic.minNodes × procsPerNode must be a multiple of fsdp × tensor × pipeline × context: an elastic job scales only its data-parallel degree",
        field_path=".elastic.minNodes",
    ),
    Rule(
        cel="!has(self.runPolicy) || !has(self.runPolicy.failurePolicy) || !has(self.runPolicy.failurePolicy.rules) || self.runPolicy.failurePolicy.rules.all(r, self.runPolicy.failurePolicy.rules.exists_one(o, o.verdict == r.verdict))",
        check=lambda s: unique_verdicts(s.run_policy.failure_policy),
        message="spec.runPolicy.failurePolicy.rules may hold at most one rule per verdict",
        field_path=".runPolicy.failurePolicy.rules",
    ),
    Rule(
        cel="!has(self.checkpoint.volumeClaim) || (has(self.checkpoint.location) && self.checkpoint.location.startsWith('/'))",
        check=lambda s: s.checkpoint.volume_claim is None or (s.checkpoint.location or "").startswith("/"),
        message="spec.checkpoint.location must be an absolute path when spec.checkpoint.volumeClaim is set (the claim is mounted there)",
        field_path=".checkpoint.location",
    ),
    Rule(cel=FLOAT8_ONLY_WITH_FP8[0], check=float8_only_with_fp8, message=FLOAT8_ONLY_WITH_FP8[1], field_path=FLOAT8_ONLY_WITH_FP8[2]),
    Rule(cel=FP8_NEEDS_GPUS[0], check=fp8_has_gpus, message=FP8_NEEDS_GPUS[1], field_path=FP8_NEEDS_GPUS[2]),
    # torchrun's own restarts hang a gang; restarts are the operator's (crds/launcher.py)
    Rule(cel=launcher.ENV_CEL, check=launcher.no_restart_env, message=launcher.ENV_MESSAGE, field_path=".env", detail=launcher.env_detail),
    Rule(cel=launcher.IN_PLACE_CEL, check=launcher.in_place_has_command, message=launcher.IN_PLACE_MESSAGE, field_path=".runPolicy.restartInPlace"),
    Rule(cel=launcher.SPARES_CEL, check=launcher.spares_restart_in_place, message=launcher.SPARES_MESSAGE, field_path=".spares"),
    Rule(cel=launcher.SPARES_GROUPS_CEL, check=launcher.spares_without_groups, message=launcher.SPARES_GROUPS_MESSAGE, field_path=".spares"),
    # replica groups (torchft) split only the data-parallel dimension (crds/replica_groups.py)
    Rule(cel=replica_groups.DIVIDE_NODES[0], check=replica_groups.groups_divide_nodes, message=replica_groups.DIVIDE_NODES[1], field_path=replica_groups.DIVIDE_NODES[2],
         detail=lambda s: f"replicaGroups {s.fault_tolerance.replica_groups}, nodes {s.nodes}"),
    Rule(cel=replica_groups.DIVIDE_DATA[0], check=replica_groups.groups_divide_data, message=replica_groups.DIVIDE_DATA[1], field_path=replica_groups.DIVIDE_DATA[2],
         detail=lambda s: f"replicaGroups {s.fault_tolerance.replica_groups}, data {replica_groups.data_degree(s)}"),
    Rule(cel=replica_groups.MIN_WITHIN[0], check=replica_groups.min_within_groups, message=replica_groups.MIN_WITHIN[1], field_path=replica_groups.MIN_WITHIN[2],
         detail=lambda s: f"minReplicas {s.fault_tolerance.min_replicas}, replicaGroups {s.fault_tolerance.replica_groups}"),
    Rule(cel=replica_groups.NOT_ELASTIC[0], check=replica_groups.not_elastic, message=replica_groups.NOT_ELASTIC[1], field_path=replica_groups.NOT_ELASTIC[2]),
)


MODEL_RULES: tuple[Rule, ...] = (
    Rule(cel="", check=launcher.no_torchrun_restarts, message=launcher.FLAG_MESSAGE, field_path=".command", detail=launcher.flag_detail),
    Rule(cel="", check=supervisor.tunables_valid, message=supervisor.TUNABLE_MESSAGE, field_path=".env", detail=supervisor.tunables_detail),
)
"""Rules the models check (``railtrain validate``, ``submit`` and the operator: a stored job breaking one is Failed with
InvalidSpec) but the CRD does not: a CEL regular expression over every word of command and args exceeds the CRD's
estimated cost budget unless both are bounded far below what pods accept (crds/launcher.py); so does one over the
supervisor's variables in ``spec.env``, whose values are unbounded (crds/supervisor.py)."""


LIST_MAP_KEYS: dict[str, str] = {"env": "name"}
"""Spec lists that are maps keyed by one field (``x-kubernetes-list-type: map``): the key must be unique."""


class TrainingJobSpec(_Model):
    """Desired state of a TrainingJob: what to run and how to place it."""

    image: str = Field(min_length=1, description="Container image of every training pod.")
    command: list[str] = Field(default_factory=list, description="Container entrypoint, e.g. [torchrun, -m, railtrain.trainer]; torchrun reads the gang layout from the pod environment (its own restarts, --max-restarts, are refused: restarts are the operator's). Omitted or empty: the image's ENTRYPOINT, as for any Kubernetes container (run --local needs a command, since it does not run the image).")
    args: list[str] = Field(default_factory=list, description="Arguments to the entrypoint.")
    env: list[EnvVar] = Field(default_factory=list, max_length=launcher.MAX_ENV_ITEMS, description="Extra environment variables for the training container (at most 256).")
    resources: Resources = Field(default_factory=Resources, description="Resources of each node's pod.")
    nodes: int = Field(1, ge=1, le=4096, description="Number of pods (torchrun nodes) in the gang; each lands on its own Kubernetes node. Omitted (or null): 1, as Kubeflow's and JobSet's replicas default to 1.")
    procs_per_node: int = Field(1, ge=1, le=64, description="Training processes per pod, usually one per GPU. Omitted (or null): 1.")
    parallelism: Parallelism | None = Field(None, description="Parallel degrees; omitted means pure data parallel over the world size.")
    precision: Precision | None = Field(None, description="Number formats of training: compute bf16, fp8 (float8 matrix products in the transformer blocks' linear layers) or fp32; omitted means bf16 on GPUs and fp32 on CPUs (docs/parallelism.md, FP8).")
    topology: Topology = Field(default_factory=Topology, description="Topology-aware placement policy.")
    priority: int = Field(0, ge=-(2**31), le=2**31 - 1, description="Admission order: jobs with higher priority are admitted first; equal priorities go by creationTimestamp. No preemption.")
    elastic: Elastic | None = Field(None, description="Admit the job with any node count between elastic.minNodes and nodes, the largest that fits now; omitted means exactly nodes.")
    fault_tolerance: FaultTolerance | None = Field(None, description="Replica groups with a per-step quorum (torchft): the data-parallel degree is split into independent groups, each a gang of its own, so a lost node stops its group while the others keep training (docs/fault-tolerance.md); omitted means one gang.")
    spares: int = Field(0, ge=0, le=64, description="Hot spare pods placed in the gang's domain beside its nodes (counted as the job's): each starts the image and waits, outside the world, until a node of the gang is lost; then it takes exactly that node's rank and the others restart in place, no pod recreated (docs/operator.md, Hot spares). Needs runPolicy.restartInPlace. Omitted: 0.")
    checkpoint: Checkpoint = Field(default_factory=Checkpoint, description="Checkpoint interval and location.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Restart, deadline and suspend policy.")
    managed_by: Literal["railtrain.dev/trainingjob-controller", "kueue.x-k8s.io/multikueue"] | None = Field(  # type: ignore[valid-type]
        None,
        description="The controller that runs this job (immutable). Omitted or railtrain.dev/trainingjob-controller: this cluster's railtrain operator. kueue.x-k8s.io/multikueue: Kueue's MultiKueue dispatches the job to a worker cluster (the job must carry kueue.x-k8s.io/queue-name); this cluster's operator keeps its Workload and creates no pods, and the status is the worker's, copied back (docs/kueue.md, MultiKueue).",
    )
    template: PodTemplate | None = Field(None, description="Pod template merged into every pod of the gang: volumes, env from Secrets, sidecars, nodeSelector, affinity, tolerations, ServiceAccount, image pull secrets, security contexts, extra resources (docs/template.md).")

    @field_validator("env")
    @classmethod
    def _env_names_unique(cls, env: list[EnvVar]) -> list[EnvVar]:
        # env is a list-map keyed by name in the CRD (LIST_MAP_KEYS): the server refuses duplicates.
        names = [e.name for e in env]
        dup = next((i for i, n in enumerate(names) if n in names[:i]), None)
        if dup is not None:
            raise ValueError(f"spec.env[{dup}]: duplicate name {names[dup]} (each environment variable may appear once)")
        return env

    @model_validator(mode="after")
    def _cross_field_rules(self) -> "TrainingJobSpec":
        failed = [r.sentence(self) for r in (*SPEC_RULES, *MODEL_RULES) if not r.check(self)] + template_problems(self)
        if failed:
            raise ValueError("; ".join(failed))
        return self

    @property
    def world_size(self) -> int:
        """nodes × procsPerNode."""
        return self.nodes * self.procs_per_node

    def effective_parallelism(self, nodes: int | None = None) -> Parallelism:
        """The parallelism of a gang of ``nodes`` pods (default ``spec.nodes``).

        Omitted parallelism is pure data parallel over the world size. An
        elastic gang admitted with fewer nodes keeps fsdp, tensor, pipeline and
        context and scales data to ``nodes × procsPerNode / (fsdp × tensor × pipeline × context)``.

        Raises:
            ValueError: ``nodes`` is not one of :meth:`node_counts`.
        """
        n = self.nodes if nodes is None else nodes
        if n != self.nodes and n not in self.node_counts():
            raise ValueError(f"a gang of {n} nodes is not admissible for this spec; admissible: {self.node_counts()}")
        if self.parallelism is None:
            return Parallelism(data=n * self.procs_per_node)
        if n == self.nodes:
            return self.parallelism
        return self.parallelism.model_copy(update={"data": n * self.procs_per_node // self.parallelism.inner})

    def node_counts(self) -> list[int]:
        """Gang sizes the job may be admitted with, ascending.

        Returns:
            ``[nodes]`` for a fixed-size job; for an elastic job every count in
            ``[elastic.minNodes, nodes]`` whose world size is a multiple of
            fsdp × tensor × pipeline × context (so only the data-parallel degree changes).
        """
        if self.elastic is None:
            return [self.nodes]
        inner = self.parallelism.inner if self.parallelism else 1
        return [n for n in range(self.elastic.min_nodes, self.nodes + 1) if (n * self.procs_per_node) % inner == 0]


class ConditionStatus(str, Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """One observation of the job's state (metav1.Condition)."""

    type: str = Field(description="Condition type in CamelCase, e.g. Admitted, Running, Succeeded, Failed.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word explaining the last transition.")
    message: str = Field("", description="Human-readable details of the last transition.")
    last_transition_time: datetime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(None, description="metadata.generation the condition was computed from.")


class RankPlacement(_Model):
    """Where one node rank of the gang runs."""

    rank: int = Field(ge=0, description="Node rank.")
    node: str = Field(description="Kubernetes node name.")
    domains: dict[str, str] = Field(default_factory=dict, description="The node's topology domain at each configured level, keyed by the level's label key (levels the node has no label for are absent).")


class TopologySummary(_Model):
    """How the operator placed the gang, and why, in terms of the topology levels it was configured with."""

    policy: TopologyPolicy = Field(description="spec.topology.policy the placement honoured.")
    level: str = Field("", description="spec.topology.level asked for (empty when none).")
    domain_level: str = Field("", description="The narrowest level at which the whole gang sits in one domain; empty when it spans the whole cluster.")
    domain: str = Field("", description="The value of that domain's label, e.g. the rack name.")
    spread: dict[str, int] = Field(default_factory=dict, description="Number of distinct domains the gang uses at each level.")
    rails: int | None = Field(None, ge=0, description="Rails (NICs on separate leaf switches) per node when every node of the gang has the same count.")
    rail_aligned: bool | None = Field(None, description="True when local rank i of every pod sits on rail i and data-parallel peers share a local rank; absent when the job requests no GPUs.")
    reason: str = Field("", description="The placement decision in words: which domain, why it was chosen, and what could not be met.")


class AdmissionRecord(_Model):
    """The placement the admission pass promised the current gang, written before any of its pods is created (docs/scheduling.md)."""

    restarts: int = Field(ge=0, description="The restart count (status.restarts) of the gang this placement was admitted for; a record of another count is void.")
    nodes: list[str] = Field(description="Node of every rank, by rank; its length is the admitted gang size.")
    created: bool = Field(False, description="True once every rank's pod has been seen; until then the operator creates missing ranks pinned to these nodes and the admission pass counts them as taken.")


class HoldRecord(_Model):
    """The nodes a restarting gang keeps until it is admitted again (docs/scheduling.md, "Restarts keep their nodes")."""

    restarts: int = Field(ge=0, description="The restart count (status.restarts) of the gang the nodes are held for; a record of another count is void.")
    nodes: list[str] = Field(description="The nodes the failed gang ran on, in placement order (rank r ran on nodes[(r + rankShift) % n]); empty where the node is not held (lost, avoided, quarantined or unknown).")
    until: datetime = Field(description="When the hold lapses if the gang has not been admitted again: the restart's backoff plus runPolicy.gangTimeoutSeconds.")


JobPhase = Literal["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]


class TrainingJobStatus(_Model):
    """Observed state of a TrainingJob, written by the operator once per reconcile."""

    phase: JobPhase | None = Field(None, description="Summary: Pending, Running, Restarting, Succeeded, Failed or Suspended.")
    conditions: list[Condition] = Field(default_factory=list, description="Latest observations, one per type.")
    placement: list[RankPlacement] = Field(default_factory=list, description="Node chosen for every rank.")
    topology: TopologySummary | None = Field(None, description="Summary of the latest placement: domain chosen at each level and the reason.")
    admitted_nodes: int | None = Field(None, ge=1, description="Gang size the current gang was admitted with (below spec.nodes only for elastic jobs).")
    admission: AdmissionRecord | None = Field(None, description="The placement admitted for the current gang, recorded before its pods are created (the ledger entry that survives an operator restart).")
    hold: HoldRecord | None = Field(None, description="Nodes a restarting gang keeps for its next admission, so smaller jobs do not take them while its old pods end; its ranks go back to them (node-local checkpoints stay reachable).")
    requeues: int = Field(0, ge=0, description="Times the gang was released and re-queued because it was not fully Running within runPolicy.gangTimeoutSeconds.")
    requeue_after: datetime | None = Field(None, description="The job is not admitted again before this time (exponential backoff after a gang timeout).")
    restarts: int = Field(0, ge=0, description="Times the gang was restarted, for any cause (the restart count pods carry).")
    job_restarts: int = Field(0, ge=0, description="Restarts caused by the job (retryable and hang verdicts, a failed rank without verdict); only these spend runPolicy.backoffLimit.")
    infrastructure_restarts: int = Field(0, ge=0, description="Restarts caused by the infrastructure (node lost, node quarantined or avoided, a rank's pod deleted, evicted or preempted); they do not spend backoffLimit.")
    in_place_restarts: int = Field(0, ge=0, description="Restarts made inside the running pods (runPolicy.restartInPlace), counted in jobRestarts or infrastructureRestarts like gang restarts.")
    in_place: InPlaceRecord | None = Field(None, description="The current gang's in-place restarts counted so far (the attempt every rank agrees on).")
    quarantines: list[QuarantineRecord] = Field(default_factory=list, description="Nodes this job quarantined, with the verdict and time (bounded by runPolicy.failurePolicy.maxQuarantinesPerHour).")
    suspects: list[SuspectRecord] = Field(default_factory=list, description="Nodes named by this job's verdicts, with counts per verdict (for quarantineAfter).")
    avoid_nodes: list[str] = Field(default_factory=list, description="Nodes this job's next gangs avoid (named by a verdict whose rule has avoidNodes, or lost).")
    spent_faults: list[Literal[contract.FAULT_VARIABLES]] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=len(contract.FAULT_VARIABLES),
        description="Fault-injection variables of spec.env (RAILTRAIN_FAULT_*, for tests and drills) that a failed gang met; the next gangs' pods go without them (a fault is an event, not a property of the job: a restarted gang that met it again at the same step would never finish).",
    )  # fmt: skip
    node_failures: list[NodeFailureRecord] = Field(default_factory=list, description="Nodes on which this job lost pods to the infrastructure (evicted for the node's sake, refused by the kubelet, node lost), with counts; a node counted twice is avoided.")
    rank_shift: int = Field(0, ge=0, description="How far the ranks of the next gang are rotated over its nodes (raised by a hang or straggler verdict, so the named rank lands on another node and the fault can be told apart from the node).")
    succeeded_ranks: list[int] = Field(default_factory=list, description="Ranks of the current gang whose trainer exited 0; they stay complete even when their pods are deleted (drain, pod garbage collection).")
    start_time: datetime | None = Field(None, description="When every rank of the gang first ran (cleared when the job is suspended, set again when the resumed gang runs); runPolicy.activeDeadlineSeconds counts from it.")
    last_resize_time: datetime | None = Field(None, description="When an elastic gang was last restarted to grow.")
    completion_time: datetime | None = Field(None, description="When the job reached Succeeded or Failed.")
    observed_generation: int | None = Field(None, description="metadata.generation last reconciled.")
    progress: Progress | None = Field(None, description="Step, loss, tokens/s and ETA as rank 0 last reported them.")
    goodput: Goodput | None = Field(None, description="Wall time since creation split into queued, starting, training and lost by cause; ratio = training / wall.")
    replica_groups: list[ReplicaGroupStatus] = Field(
        default_factory=list, description="Each replica group of a job with spec.faultTolerance: its pods and nodes, phase (Running, Replacing, Lost) and replacements, counted per group."
    )


class TrainingJob(_Model):
    """A TrainingJob manifest: apiVersion, kind, metadata, spec and (optional) status."""

    api_version: Literal["railtrain.dev/v1alpha1"] = Field(f"{contract.API_GROUP}/{contract.API_VERSION}", alias="apiVersion")
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None

