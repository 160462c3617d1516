"""Replica groups with a per-step quorum (``spec.faultTolerance``): the API model, its rules and the pod contract.

A job with ``spec.faultTolerance.replicaGroups: R`` splits its data-parallel
degree (DDP, or the replicate dimension of HSDP) into R independent replica
groups. Each group is a gang of its own: ``nodes / R`` nodes, its own
rendezvous and torchrun world (tensor, pipeline, context and FSDP shard stay
inside it). Across groups, gradients are all-reduced by torchft's Manager
(PyPI ``torchft``), which agrees a quorum of live groups at every step through
one Lighthouse server; when a group dies the others go on stepping at
(R − 1)/R of the batch, and a replacement heals from a live peer's weights and
joins the quorum (torchft's design: github.com/pytorch/torchft, README and
``torchft/manager.py``).

Split brain: torchft's quorum is decided by the one Lighthouse, not by a vote
among the groups, so two disjoint quorums cannot both commit a step; any
``minReplicas`` from 1 to R is therefore safe. ``minReplicas`` is the fewest
live groups a step commits with (torchft's ``min_replica_size``); below it
training waits, and past ``quorumTimeoutSeconds`` of waiting the job fails.

The pod contract uses torchft's own environment names where torchft reads
them (``TORCHFT_LIGHTHOUSE``; ``REPLICA_GROUP_ID`` and ``NUM_REPLICA_GROUPS``
as in torchft's examples), so a training program written for torchft runs
unchanged; the ``RAILTRAIN_*`` names carry the rest.

The operator's side (the end of this module): each group's rendezvous host and
node-rank label, the Lighthouse's DNS name and command, and the per-group record
of ``status.replicaGroups`` (:class:`ReplicaGroupStatus`); docs/operator.md,
"Replica groups".

May import: the standard library, pydantic and ``railtrain.crds`` only (neither kopf nor torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import Field

from railtrain.crds.base import Model as _Model
from railtrain.crds.contract_errors import ContractError

ENV_LIGHTHOUSE = "TORCHFT_LIGHTHOUSE"
"""The Lighthouse's address, ``http://HOST:PORT`` (torchft's Manager reads this variable itself)."""
ENV_REPLICA_GROUP = "REPLICA_GROUP_ID"
"""This pod's replica group, 0 … R − 1 (the name torchft's examples use)."""
ENV_REPLICA_GROUPS = "NUM_REPLICA_GROUPS"
"""R, the number of replica groups (the name torchft's examples use)."""
ENV_MIN_REPLICAS = "RAILTRAIN_MIN_REPLICAS"
"""The fewest live groups a step commits with (torchft's ``min_replica_size``)."""
ENV_QUORUM_TIMEOUT = "RAILTRAIN_QUORUM_TIMEOUT_SECONDS"
"""Seconds a group may wait for a quorum of ``minReplicas`` before it gives up (the job then fails)."""

REPLICA_GROUP_VARIABLES = (ENV_LIGHTHOUSE, ENV_REPLICA_GROUP, ENV_REPLICA_GROUPS, ENV_MIN_REPLICAS, ENV_QUORUM_TIMEOUT)
"""Every variable :func:`replica_group_env` writes, in order."""

LABEL_REPLICA_GROUP = "railtrain.dev/replica-group"
"""Label on every pod of a replica group: the group's index, 0 … R − 1."""
LABEL_LIGHTHOUSE = "railtrain.dev/lighthouse"
"""Label on the job's Lighthouse pod (value: the job's name)."""
ANNOTATION_GROUP_REPLACEMENT = "railtrain.dev/group-replacement"
"""Annotation on a replica group's pod: how many times its group had been replaced when the pod was made (absent: 0,
the gang's first pods). A pod of an earlier replacement than its group's ``status.replicaGroups[].replacements`` was
already decided on (it is being deleted), so its failure is never counted again (as ``restart_of`` keeps a gang's
pods of an earlier restart out of the gang)."""


def replacement_of(pod: Mapping[str, Any]) -> int:
    """The :data:`ANNOTATION_GROUP_REPLACEMENT` of ``pod`` (a dict as read): 0 when absent or not a number."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_GROUP_REPLACEMENT, "0")
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 0

LIGHTHOUSE_PORT = 29510
"""The Lighthouse's port, torchft's default (``torchft_lighthouse --bind [::]:29510``)."""

TORCHFT_VERSION = "0.2.0"
"""The torchft release railtrain is verified against (the ``ft`` extra pins it)."""


class FaultTolerance(_Model):
    """Replica groups with a per-step quorum (torchft): losing a node costs its replica group, not the job.

    The data-parallel degree (``spec.parallelism.data``, or the world size over
    the inner degrees when parallelism is omitted) is split into
    ``replicaGroups`` groups of ``nodes / replicaGroups`` nodes each.
    """

    replica_groups: int = Field(
        ge=2,
        le=1024,
        description=(
            "Independent replica groups the data-parallel degree is split into (torchft): each group is a gang of nodes / replicaGroups nodes with its own "
            "rendezvous; gradients are all-reduced across the groups that are alive at each step, so a group's loss stops that group, not the job. "
            "Must divide nodes and spec.parallelism.data."
        ),
    )
    min_replicas: int = Field(
        1,
        ge=1,
        le=1024,
        description=(
            "Fewest live replica groups a training step commits with (torchft's min_replica_size); below it training waits. "
            "Any value from 1 to replicaGroups is safe: the quorum is decided by one Lighthouse, so two quorums cannot split."
        ),
    )
    quorum_timeout_seconds: int = Field(
        300,
        ge=1,
        le=86400,
        description="Seconds training may wait for minReplicas live groups before the job fails with reason QuorumLost.",
    )


def data_degree(spec: Any) -> int:
    """The job's data-parallel degree: ``spec.parallelism.data``, or the world size when parallelism is omitted (pure data parallel).

    Args:
        spec: a :class:`railtrain.crds.api.TrainingJobSpec` (anything with ``parallelism``, ``nodes`` and ``procs_per_node``).

    Returns:
        the degree, ≥ 1.
    """
    return spec.parallelism.data if spec.parallelism is not None else spec.nodes * spec.procs_per_node


def groups_divide_nodes(spec: Any) -> bool:
    """True when ``spec.faultTolerance`` is absent or ``replicaGroups`` divides ``nodes`` (each group owns whole nodes)."""
    ft = spec.fault_tolerance
    return ft is None or spec.nodes % ft.replica_groups == 0


def groups_divide_data(spec: Any) -> bool:
    """True when ``spec.faultTolerance`` is absent or ``replicaGroups`` divides the data-parallel degree (the only replicated dimension)."""
    ft = spec.fault_tolerance
    return ft is None or data_degree(spec) % ft.replica_groups == 0


def min_within_groups(spec: Any) -> bool:
    """True when ``spec.faultTolerance`` is absent or ``minReplicas`` ≤ ``replicaGroups``."""
    ft = spec.fault_tolerance
    return ft is None or ft.min_replicas <= ft.replica_groups


def not_elastic(spec: Any) -> bool:
    """True when the job does not combine replica groups with ``spec.elastic`` (a group's size is fixed; groups come and go instead)."""
    return spec.fault_tolerance is None or spec.elastic is None


DIVIDE_NODES = (
    "!has(self.faultTolerance) || self.nodes % self.faultTolerance.replicaGroups == 0",
    "spec.faultTolerance.replicaGroups must divide spec.nodes: each replica group is a gang of nodes / replicaGroups whole nodes",
    ".faultTolerance.replicaGroups",
)
"""(CEL, message, field path) of the rule :func:`groups_divide_nodes` checks."""
DIVIDE_DATA = (
    "!has(self.faultTolerance) || !has(self.parallelism) || self.parallelism.data % self.faultTolerance.replicaGroups == 0",
    "spec.faultTolerance.replicaGroups must divide spec.parallelism.data: replica groups split the data-parallel (replicated) dimension only; "
    "fsdp, tensor, pipeline and context stay inside each group",
    ".faultTolerance.replicaGroups",
)
"""(CEL, message, field path) of the rule :func:`groups_divide_data` checks (without parallelism, dividing nodes is enough)."""
MIN_WITHIN = (
    "!has(self.faultTolerance) || !has(self.faultTolerance.minReplicas) || self.faultTolerance.minReplicas <= self.faultTolerance.replicaGroups",
    "spec.faultTolerance.minReplicas must not exceed spec.faultTolerance.replicaGroups (the quorum cannot need more groups than exist)",
    ".faultTolerance.minReplicas",
)
"""(CEL, message, field path) of the rule :func:`min_within_groups` checks."""
NOT_ELASTIC = (
    "!has(self.faultTolerance) || !has(self.elastic)",
    "spec.faultTolerance and spec.elastic cannot be combined: with replica groups the job shrinks and grows by whole groups through the quorum, not by nodes",
    ".faultTolerance",
)
"""(CEL, message, field path) of the rule :func:`not_elastic` checks."""


@dataclass(frozen=True)
class GroupLayout:
    """Where replica group ``group`` sits in the job: its node indices and its own torchrun world.

    Attributes:
        group: the group's index, 0 … groups − 1.
        groups: R.
        first_node: the job-wide index of the group's first node; the group owns
            ``first_node … first_node + nodes − 1``.
        nodes: nodes in the group (spec.nodes / R).
        world_size: processes in the group (nodes × procsPerNode).
    """

    group: int
    groups: int
    first_node: int
    nodes: int
    world_size: int

    def node_rank(self, job_node: int) -> int:
        """The torchrun node rank inside the group of job-wide node index ``job_node``.

        Raises:
            ValueError: the node is not in this group.
        """
        if not self.first_node <= job_node < self.first_node + self.nodes:
            raise ValueError(f"node {job_node} is not in replica group {self.group} (nodes {self.first_node}–{self.first_node + self.nodes - 1})")
        return job_node - self.first_node


def layout(nodes: int, procs_per_node: int, groups: int) -> list[GroupLayout]:
    """Split ``nodes`` into ``groups`` consecutive replica groups of equal size.

    Args:
        nodes: the job's node count (spec.nodes).
        procs_per_node: processes per node.
        groups: R (spec.faultTolerance.replicaGroups).

    Returns:
        one :class:`GroupLayout` per group, in group order.

    Raises:
        ValueError: ``groups`` < 1 or does not divide ``nodes`` (the spec rule :data:`DIVIDE_NODES`).
    """
    if groups < 1 or nodes % groups:
        raise ValueError(f"replicaGroups {groups} must be at least 1 and divide nodes {nodes}")
    per = nodes // groups
    return [GroupLayout(group=g, groups=groups, first_node=g * per, nodes=per, world_size=per * procs_per_node) for g in range(groups)]


def group_of(node: int, nodes: int, groups: int) -> int:
    """The replica group of job-wide node index ``node`` (0 … nodes − 1) when ``nodes`` are split into ``groups``.

    Raises:
        ValueError: as :func:`layout`, or ``node`` out of range.
    """
    if groups < 1 or nodes % groups or not 0 <= node < nodes:
        raise ValueError(f"node {node} of {nodes} cannot be placed in {groups} replica groups")
    return node // (nodes // groups)


def lighthouse_address(host: str, port: int = LIGHTHOUSE_PORT) -> str:
    """The Lighthouse URL torchft expects in ``TORCHFT_LIGHTHOUSE``: ``http://HOST:PORT``."""
    return f"http://{host}:{port}"


def lighthouse_name(job: str) -> str:
    """The name of a job's Lighthouse pod and Service: ``<job>-lighthouse`` (a DNS-1035 label when the job's name leaves room)."""
    return f"{job}-lighthouse"


@dataclass(frozen=True)
class ReplicaGroupEnv:
    """What one pod of a replica group reads from its environment.

    Attributes:
        lighthouse: the Lighthouse URL (``http://HOST:PORT``).
        group: this pod's group, 0 … groups − 1.
        groups: R.
        min_replicas: the quorum's lower bound.
        quorum_timeout_seconds: how long a step may wait for the quorum.
    """

    lighthouse: str
    group: int
    groups: int
    min_replicas: int
    quorum_timeout_seconds: int


def replica_group_env(ft: FaultTolerance, group: int, lighthouse: str) -> dict[str, str]:
    """The environment a pod of replica group ``group`` gets (every name in :data:`REPLICA_GROUP_VARIABLES`).

    Args:
        ft: the job's spec.faultTolerance.
        group: the pod's group, 0 … R − 1.
        lighthouse: the Lighthouse URL (:func:`lighthouse_address`).

    Raises:
        ValueError: ``group`` out of range.
    """
    if not 0 <= group < ft.replica_groups:
        raise ValueError(f"replica group {group} is out of range 0…{ft.replica_groups - 1}")
    return {
        ENV_LIGHTHOUSE: lighthouse,
        ENV_REPLICA_GROUP: str(group),
        ENV_REPLICA_GROUPS: str(ft.replica_groups),
        ENV_MIN_REPLICAS: str(ft.min_replicas),
        ENV_QUORUM_TIMEOUT: str(ft.quorum_timeout_seconds),
    }


def read_replica_group_env(env: Mapping[str, str]) -> ReplicaGroupEnv | None:
    """Read a pod's replica-group variables back; None when the job has no replica groups (``NUM_REPLICA_GROUPS`` unset).

    Raises:
        ContractError: a variable is missing or not a number, or the group is out of range (one sentence naming it).
    """
    if ENV_REPLICA_GROUPS not in env:
        return None

    def number(name: str, default: int | None = None) -> int:
        raw = env.get(name)
        if raw is None:
            if default is None:
                raise ContractError(f"{name} is unset, but {ENV_REPLICA_GROUPS} is set: a replica group's pod needs both")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ContractError(f"{name}={raw!r} is not a whole number") from None

    groups = number(ENV_REPLICA_GROUPS)
    group = number(ENV_REPLICA_GROUP)
    if groups < 1 or not 0 <= group < groups:
        raise ContractError(f"{ENV_REPLICA_GROUP}={group} must be between 0 and {ENV_REPLICA_GROUPS} − 1 = {groups - 1}")
    lighthouse = env.get(ENV_LIGHTHOUSE, "")
    if not lighthouse:
        raise ContractError(f"{ENV_LIGHTHOUSE} is unset: a replica group's pod needs the Lighthouse's address (http://HOST:PORT)")
    return ReplicaGroupEnv(
        lighthouse=lighthouse,
        group=group,
        groups=groups,
        min_replicas=number(ENV_MIN_REPLICAS, 1),
        quorum_timeout_seconds=number(ENV_QUORUM_TIMEOUT, 300),
    )


# --- the operator's side (issue 31): per-group rendezvous, the Lighthouse's address and command, per-group status ---

LABEL_GROUP_NODE_RANK = "railtrain.dev/replica-group-node-rank"
"""Label on every pod of a replica group: its node rank inside the group (0 … nodes/R − 1). The rendezvous Service of a
job with replica groups selects ``0``, so every group's first pod, its own rendezvous host, has a DNS record."""

GROUP_RUNNING, GROUP_REPLACING, GROUP_LOST = "Running", "Replacing", "Lost"
"""Phases of one replica group in ``status.replicaGroups``: its pods run (or are being created with the gang); its pods
are being replaced alone; it spent its restart budget and is not replaced again."""
GROUP_RELOCATING = "Relocating"
"""Phase of a replica group that must leave a node: its pods are gone and it waits for the admission pass to place it
again beside the other groups' nodes (then it is Replacing)."""


def group_rdzv_host(job: str, namespace: str, group: GroupLayout) -> str:
    """DNS name of replica group ``group``'s rendezvous host: its first pod behind the job's headless Service.

    ``<job>-<first node>.<job>.<namespace>.svc`` (pod hostname + subdomain, the Kubernetes DNS convention the
    whole-gang rendezvous already uses for node rank 0, :func:`railtrain.crds.contract.rdzv_host`).
    """
    return f"{job}-{group.first_node}.{job}.{namespace}.svc"


def lighthouse_host(job: str, namespace: str) -> str:
    """DNS name of a job's Lighthouse Service: ``<job>-lighthouse.<namespace>.svc``."""
    return f"{lighthouse_name(job)}.{namespace}.svc"


LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS = 1000
"""The operator's Lighthouse: a group silent this long is out of the next quorum (torchft's default 5000 ms). The same
value ``railtrain run --local`` gives its Lighthouse, where a survivor's stall after a group's loss was measured."""
LIGHTHOUSE_JOIN_TIMEOUT_MS = 500
"""The operator's Lighthouse: how long it waits for heartbeating groups to join before it forms a quorum without them
(torchft's default 60000 ms, which would stall the survivors while a replacement group loads; as ``run --local``)."""
LIGHTHOUSE_QUORUM_TICK_MS = 50
"""The operator's Lighthouse: how often it re-checks a pending quorum (torchft's default 100 ms; as ``run --local``)."""


def lighthouse_command(ft: FaultTolerance) -> list[str]:
    """The Lighthouse container's command: torchft's own server, ``torchft_lighthouse --min_replicas M --bind [::]:PORT ...``.

    ``torchft_lighthouse`` is the console script of PyPI ``torchft`` (:data:`TORCHFT_VERSION`; its flags as its
    ``--help`` lists them); ``--min_replicas`` is the fewest groups a quorum is formed with (torchft's
    ``min_replica_size``), ``--bind`` its listening address, then :data:`LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS`,
    :data:`LIGHTHOUSE_JOIN_TIMEOUT_MS` and :data:`LIGHTHOUSE_QUORUM_TICK_MS`.
    """
    return [
        "torchft_lighthouse", "--min_replicas", str(ft.min_replicas), "--bind", f"[::]:{LIGHTHOUSE_PORT}",
        "--heartbeat_timeout_ms", str(LIGHTHOUSE_HEARTBEAT_TIMEOUT_MS), "--join_timeout_ms", str(LIGHTHOUSE_JOIN_TIMEOUT_MS),
        "--quorum_tick_ms", str(LIGHTHOUSE_QUORUM_TICK_MS),
    ]  # fmt: skip


class ReplicaGroupStatus(_Model):
    """One replica group as the operator last saw it (``status.replicaGroups[]``)."""

    group: int = Field(ge=0, description="The group's index, 0 … replicaGroups − 1.")
    phase: str = Field(GROUP_RUNNING, description="Running (its pods run, or are created with the gang), Relocating (it must leave a node and waits to be placed again), Replacing (its pods are being replaced alone) or Lost (it spent its restart budget).")
    members: list[str] = Field(default_factory=list, description="Names of the group's pods.")
    nodes: list[str] = Field(default_factory=list, description="Nodes of the group's pods, by node rank inside the group ('' for a pod not bound yet).")
    replacements: int = Field(0, ge=0, description="Times this group's pods were replaced alone (the other groups untouched).")
    job_restarts: int = Field(0, ge=0, description="Replacements caused by the job (retryable and hang verdicts); they spend runPolicy.backoffLimit, counted for this group alone.")
    infrastructure_restarts: int = Field(0, ge=0, description="Replacements caused by the infrastructure (a pod deleted or evicted); they spend runPolicy.maxInfrastructureRestarts, counted for this group alone.")
    gang: int = Field(0, ge=0, description="The job's restart count (status.restarts) this record belongs to; a whole-gang restart starts every group Running again.")
    last_replacement_time: str | None = Field(None, description="When the group's pods were last replaced (RFC 3339).")
    replace_after: str | None = Field(None, description="The group's new pods are not created before this time (the restart backoff, counted for this group).")
    absent_seconds: float = Field(0, ge=0, description="Seconds this group was out of training in absences that ended (Replacing, Relocating; an absence a whole-gang restart ended counts to that restart); status.goodput.degradedSeconds is computed from it.")
    absent_since: str | None = Field(None, description="When the group's current absence began (RFC 3339): it left Running then and has not trained since; None while it trains.")
    reason: str | None = Field(None, description="Reason of the group's last replacement or loss.")
    message: str | None = Field(None, description="What happened, in one sentence.")
    step: int | None = Field(None, ge=0, description="The group's last finished step, read by the operator from its rank 0's metrics (railtrain_step) while the job runs.")
    quorum: int | None = Field(None, ge=0, description="Replica groups in the quorum of that step (railtrain_replica_group_quorum): fewer than replicaGroups while a group is away.")
    heals: int = Field(0, ge=0, description="Times the group healed from a live peer (loaded its model, optimizer and step) since its pods were last launched (railtrain_replica_group_heals).")
    retried_steps: int = Field(0, ge=0, description="Steps the group ran again since its pods were last launched because the quorum did not commit them: a peer died mid-step (railtrain_replica_group_retried_steps).")
    progress_time: str | None = Field(None, description="When step, quorum, heals and retriedSteps were read (RFC 3339).")
