"""``spec.checkpoint``: the checkpoint tiers' API models, and the tier configs they become for the trainer.

The models (:class:`Checkpoint` for the persistent tier, :class:`MemoryTier`,
:class:`LocalTier`) are the single source of every tier's defaults (interval,
keep). The pod contract (:class:`railtrain.crds.contract.PodEnvironment`) and the
trainer's flags read them through :func:`default_tier` and never restate a
number; a pod hands its tiers to the trainer as :class:`TierConfig` values
(:meth:`railtrain.crds.contract.PodEnvironment.checkpoint_tiers`), the type the
trainer's :class:`~railtrain.trainer.checkpoint.Checkpointer` takes.

:mod:`railtrain.crds.api` re-exports the models under their old names
(``api.Checkpoint``), which the CRD schema is generated from.

Imports: the standard library, pydantic, :mod:`railtrain.crds.base` and
:mod:`railtrain.crds.quantity`; never :mod:`~railtrain.crds.api` or
:mod:`~railtrain.crds.contract` (both import this module).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pydantic import Field

from railtrain.crds.base import Model as _Model
from railtrain.crds.quantity import BYTES_EXAMPLE, BytesQuantity, quantity_field

RUN_ID_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
"""``spec.checkpoint.runId``: one path segment (a uid fits), never ``.``/``..`` or a ``/``."""


class TierVolume(str, Enum):
    """Which volume holds a node-local checkpoint tier."""

    NODE = "node"
    POD = "pod"


class MemoryTier(_Model):
    """The fastest tier: each rank's shard in node RAM (tmpfs), plus a copy in the RAM of the next node, so losing one node loses nothing."""

    interval: int = Field(10, ge=1, description="Training steps between saves to memory.")
    keep: int = Field(1, ge=1, le=16, description="Newest complete memory checkpoints kept (each costs its shards plus the previous node's copies in RAM).")
    volume: TierVolume = Field(
        TierVolume.NODE,
        description="node: a directory under hostPath on the node's tmpfs, which outlives the pod, so a gang restarted on the same nodes finds it (needs hostPath to be allowed); pod: a memory-backed emptyDir, which survives container restarts only. Either way the pages count toward the writing container's memory.",
    )
    host_path: str = Field("/dev/shm/railtrain", pattern=r"^/", description="tmpfs directory on the node (volume node); the run's shards go to <hostPath>/<namespace>/<job>/<run id> (spec.checkpoint.runId, else the job's uid).")
    size_limit: BytesQuantity | None = quantity_field("spec.checkpoint.memory.sizeLimit", BYTES_EXAMPLE, "sizeLimit of the emptyDir (volume pod), a Kubernetes quantity such as \"32Gi\".")


class LocalTier(_Model):
    """A node-local disk tier (e.g. NVMe): each rank's shard on its own node."""

    interval: int = Field(50, ge=1, description="Training steps between saves to the node-local disk.")
    keep: int = Field(2, ge=1, le=64, description="Newest complete local checkpoints kept.")
    volume: TierVolume = Field(TierVolume.NODE, description="node: a directory under hostPath, which outlives the pod (needs hostPath to be allowed); pod: an emptyDir on the node's ephemeral storage, which survives container restarts only.")
    host_path: str = Field("/var/lib/railtrain/checkpoints", pattern=r"^/", description="Directory on the node's local disk (volume node); the run's shards go to <hostPath>/<namespace>/<job>/<run id> (spec.checkpoint.runId, else the job's uid).")
    size_limit: BytesQuantity | None = quantity_field("spec.checkpoint.local.sizeLimit", BYTES_EXAMPLE, "sizeLimit of the emptyDir (volume pod), a Kubernetes quantity.")


class Checkpoint(_Model):
    """Periodic checkpoints of model and optimizer state in up to three tiers.

    interval, location, keep and volumeClaim describe the persistent tier
    (shared storage, reshardable to another world size); memory and local add
    the node-local tiers, which belong to one run (runId, else the job's uid).
    On start the trainer loads the newest complete and valid step from the
    fastest tier that has it.
    """

    interval: int = Field(100, ge=1, description="Training steps between checkpoints to the persistent location.")
    location: str | None = Field(None, min_length=1, description="Persistent tier: a directory every pod sees, or an fsspec URI (s3://, gs://); omitted disables it (an empty string is refused: omit the field instead).")
    keep: int = Field(2, ge=0, description="Newest complete persistent checkpoints kept (0 keeps all).")
    volume_claim: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="PersistentVolumeClaim (ReadWriteMany) mounted at location in every pod; location must then be an absolute path.")
    memory: MemoryTier | None = Field(None, description="In-memory tier with a copy on the neighbouring node; omitted means off.")
    local: LocalTier | None = Field(None, description="Node-local disk tier; omitted means off.")
    run_id: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=RUN_ID_PATTERN,
        description="Identity of the run that owns the node-local tiers (memory, local): their directory on a node is <hostPath>/<namespace>/<job>/<runId>, and the trainer resumes only shards saved under this id. Omitted: the TrainingJob's uid, so a job deleted and submitted again starts its node-local tiers empty (the persistent location is shared as written). Set the same value in a new job to resume an earlier job's node-local tiers on purpose (a job that set none used its uid). At most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit.",
    )


TIERS = ("memory", "local", "persistent")
"""Tier names, fastest first."""


@dataclass(frozen=True)
class TierConfig:
    """One checkpoint tier of a job, as the trainer runs it.

    Attributes:
        name: one of :data:`TIERS`.
        location: the tier's directory in the container (memory, local) or a path or fsspec URI
            (persistent); ``""`` means the tier is off.
        interval: training steps between saves, >= 1.
        keep: newest complete checkpoints kept (persistent: 0 keeps all).
    """

    name: str
    location: str
    interval: int
    keep: int

    @property
    def enabled(self) -> bool:
        """Whether the tier is on (it has a location)."""
        return bool(self.location)


def default_tier(name: str) -> TierConfig:
    """The API's defaults of tier ``name``, off (no location): interval and keep as the model fields declare them.

    Raises:
        ValueError: ``name`` is not one of :data:`TIERS`.
    """
    models = {"memory": MemoryTier, "local": LocalTier, "persistent": Checkpoint}
    if name not in models:
        raise ValueError(f"checkpoint tier must be one of {', '.join(TIERS)}, got {name!r}")
    fields = models[name].model_fields
    return TierConfig(name, "", fields["interval"].default, fields["keep"].default)
