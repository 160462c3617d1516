"""The pod-environment contract between the railtrain operator and the trainer.

Everything a training pod sees from railtrain is spelled here and nowhere else:
environment variable names, labels, annotations, exit codes and the format of
the termination message. The operator builds pods with :func:`pod_env`; the
trainer (and ``railtrain run --local``) reads them back with :func:`read_env`.
This module imports neither kopf nor torch.

The rendezvous variables use torchrun's own convention: every ``torchrun`` flag
can be given as an environment variable named ``PET_<FLAG>`` (see
``torch.distributed.run``), so a pod whose command is plain ``torchrun -m ...``
joins the right gang with no flags. The same values are also published under
``RAILTRAIN_*`` names for the training program itself.

This module is the facade every caller imports (``from railtrain.crds import contract``);
cohesive parts live in sibling modules and are re-exported here under the same names:
:mod:`railtrain.crds.verdicts` (termination-message verdicts),
:mod:`railtrain.crds.health_settings` (health settings and the heartbeat format),
:mod:`railtrain.crds.faults` (fault-injection variables), :mod:`railtrain.crds.threads` (CPU threads) and
:mod:`railtrain.crds.contract_errors` (:class:`ContractError`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Mapping

from railtrain.crds.checkpoint import TIERS, TierConfig, default_tier
from railtrain.crds.contract_errors import ContractError
from railtrain.crds.faults import (
    ENV_FAULT_BAD_BATCH,
    ENV_FAULT_BITFLIP,
    ENV_FAULT_HANG,
    ENV_FAULT_HOLD_CHECKPOINT_STEP,
    ENV_FAULT_KILL,
    ENV_FAULT_SLOW,
    FAULT_VARIABLES,
    BadBatchFault,
    BitFlipFault,
    Faults,
    HangFault,
    KillFault,
    SlowFault,
    fault_env,
    format_fault,
    parse_fault,
    read_faults,
)
from railtrain.crds.health_settings import (
    ENV_HEALTH,
    ENV_HEALTH_FILE,
    HANG_VERDICT_KEY,
    HEARTBEAT_KEY_PREFIX,
    HealthSettings,
    Heartbeat,
    format_heartbeat,
    health_env,
    health_from_mapping,
    health_variable,
    parse_heartbeat,
    read_health,
)
from railtrain.crds.threads import ENV_CPU_SHARERS, ENV_THREADS  # noqa: F401  (the CPU threads' variables, crds/threads.py)
from railtrain.crds.verdicts import (
    ENV_TERMINATION_MESSAGE_PATH,
    HEALTH_VERDICTS,
    REASON_CHECKPOINT_MISMATCH,
    REASON_DATA_ANOMALY,
    REASON_KNOWN_ANSWER_MISMATCH,
    REASON_NO_PROGRESS,
    REASON_NON_FINITE_UPDATE,
    REASON_PARAMETER_MISMATCH,
    REASON_RERUN_MISMATCH,
    REASON_SLOW_RANK,
    TERMINATION_MESSAGE_MAX_BYTES,
    TERMINATION_MESSAGE_PATH,
    VERDICT_HANG,
    VERDICT_HARDWARE_SUSPECT,
    VERDICT_RETRYABLE,
    VERDICT_STRAGGLER,
    VERDICT_USER_ERROR,
    VERDICTS,
    Verdict,
    format_termination_message,
    parse_termination_message,
    write_termination_message,
)

API_GROUP = "railtrain.dev"
API_VERSION = "v1alpha1"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ("tj",)
NEVER_FITS = "It can never fit"
"""How the operator's Scheduled=False message says the gang cannot fit the cluster's nodes as they are (as opposed to
waiting for capacity); ``railtrain submit --wait`` stops following on it."""
NEVER_STARTS = "It can never start"
"""How the operator's Scheduled=False message says the gang's pods cannot start as the job is written (an image
reference the kubelet refuses), so every re-queue times out again; ``railtrain submit --wait`` stops following on it."""
PERMANENT_MARKERS = (NEVER_FITS, NEVER_STARTS)
"""The sentences that make a Scheduled=False message permanent (``railtrain get`` and ``submit --wait`` read them)."""

# --- labels and annotations (Kubernetes recommended-label style) -----------
LABEL_JOB_NAME = f"{API_GROUP}/job-name"
"""Label on every pod and Service of a job: the TrainingJob's name."""
LABEL_NODE_RANK = f"{API_GROUP}/node-rank"
"""Label on every pod: its node rank, ``0 .. nodes-1``, as a decimal string."""
LABEL_SPARE = f"{API_GROUP}/spare"
"""Label on a hot spare's pod (``spec.spares``): the spare's index; a spare pod has no node rank until it takes one
(then the operator sets :data:`LABEL_NODE_RANK` and removes this label)."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "railtrain"
SCHEDULING_GATE = f"{API_GROUP}/gang"
"""Scheduling gate (KEP-3521) held on every pod until the whole gang is placed."""
ANNOTATION_RESTART = f"{API_GROUP}/restart-count"
"""Annotation on pods: the job restart count the pod belongs to."""
ANNOTATION_NNODES = f"{API_GROUP}/nnodes"
"""Annotation on pods: the gang size. Set to ``spec.nodes`` at creation and to
the admitted count when the gang is released; an elastic job's pods read
:data:`ENV_NNODES`/:data:`ENV_PET_NNODES` from it through the Downward API, so
the count is fixed only at admission, before any container starts."""
ANNOTATION_NODE_UID = f"{API_GROUP}/node-uid"
"""Annotation on pods: the ``metadata.uid`` of the Node the rank was placed on, as the admission pass read it. A Node
deleted and created again under the same name is another machine (or the same one wiped): the operator compares this
uid with the Node's current one and counts a mismatch as the node lost (operator/job/phases/node_loss.py)."""
ANNOTATION_PARALLELISM = f"{API_GROUP}/parallelism"
"""Annotation on pods: :data:`ENV_PARALLELISM` for the admitted gang size
(an elastic job's data-parallel degree scales with it); read like
:data:`ANNOTATION_NNODES`."""

# --- environment: torchrun rendezvous (read by torchrun itself) ------------
ENV_PET_NNODES = "PET_NNODES"
ENV_PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
ENV_PET_NODE_RANK = "PET_NODE_RANK"
ENV_PET_MASTER_ADDR = "PET_MASTER_ADDR"
ENV_PET_MASTER_PORT = "PET_MASTER_PORT"

# --- environment: railtrain ------------------------------------------------
ENV_JOB_NAME = "RAILTRAIN_JOB_NAME"
ENV_NAMESPACE = "RAILTRAIN_NAMESPACE"
ENV_NNODES = "RAILTRAIN_NNODES"
ENV_NODE_RANK = "RAILTRAIN_NODE_RANK"
ENV_PROCS_PER_NODE = "RAILTRAIN_PROCS_PER_NODE"
ENV_RDZV_ADDR = "RAILTRAIN_RDZV_ADDR"
ENV_RDZV_PORT = "RAILTRAIN_RDZV_PORT"
ENV_PARALLELISM = "RAILTRAIN_PARALLELISM"
ENV_CHECKPOINT_DIR = "RAILTRAIN_CHECKPOINT_DIR"
ENV_CHECKPOINT_INTERVAL = "RAILTRAIN_CHECKPOINT_INTERVAL"
ENV_METRICS_PORT = "RAILTRAIN_METRICS_PORT"
ENV_RESTART_COUNT = "RAILTRAIN_RESTART_COUNT"
ENV_CHECKPOINT_KEEP = "RAILTRAIN_CHECKPOINT_KEEP"
ENV_CHECKPOINT_MEMORY_DIR = "RAILTRAIN_CHECKPOINT_MEMORY_DIR"
ENV_CHECKPOINT_MEMORY_INTERVAL = "RAILTRAIN_CHECKPOINT_MEMORY_INTERVAL"
ENV_CHECKPOINT_MEMORY_KEEP = "RAILTRAIN_CHECKPOINT_MEMORY_KEEP"
ENV_CHECKPOINT_LOCAL_DIR = "RAILTRAIN_CHECKPOINT_LOCAL_DIR"
ENV_CHECKPOINT_LOCAL_INTERVAL = "RAILTRAIN_CHECKPOINT_LOCAL_INTERVAL"
ENV_CHECKPOINT_LOCAL_KEEP = "RAILTRAIN_CHECKPOINT_LOCAL_KEEP"
ENV_PRECISION = "RAILTRAIN_PRECISION"
"""``spec.precision.compute``: ``bf16``, ``fp8`` or ``fp32``; empty when the spec omits it (the trainer's default)."""
ENV_FLOAT8_RECIPE = "RAILTRAIN_FLOAT8_RECIPE"
"""``spec.precision.float8.recipe`` under fp8 (``tensorwise`` or ``rowwise``); empty otherwise."""
ENV_FLOAT8_EMULATE = "RAILTRAIN_FLOAT8_EMULATE"
"""``spec.precision.float8.emulate`` under fp8: ``1`` or ``0``; empty otherwise."""
ENV_RUN_ID = "RAILTRAIN_RUN_ID"
"""The run that owns the node-local checkpoint tiers: ``spec.checkpoint.runId``, else the TrainingJob's uid
(``railtrain run --local``: a new id per invocation). The trainer resumes only node-local shards saved under it."""
ENV_NODE_NAME = "RAILTRAIN_NODE_NAME"
"""The Kubernetes node the pod runs on, from the Downward API (``fieldRef: spec.nodeName``,
see :data:`DOWNWARD_API_FIELDS`); ``railtrain run --local`` sets ``local-<node rank>``. Verdicts
name suspect nodes with it."""

ENV_NVLINK_DOMAIN = "RAILTRAIN_NVLINK_DOMAIN"
"""``1`` in the pods of a job placed inside one NVLink domain (``spec.topology.nvlinkDomain``): the trainer
then lets a tensor-parallel group span nodes (the API has checked it spans whole nodes)."""

DOWNWARD_API_FIELDS = {ENV_NODE_NAME: "spec.nodeName"}
"""Variables a pod reads from its own object (Kubernetes Downward API ``fieldRef.fieldPath``), not
from a literal value; :func:`pod_env` renders their local stand-ins, the operator renders ``valueFrom``."""

DEFAULT_RDZV_PORT = 29500
DEFAULT_METRICS_PORT = 9400
MEMORY_TIER_MOUNT = "/var/run/railtrain/checkpoint-memory"
"""Where the memory checkpoint tier's volume is mounted in the training container."""
LOCAL_TIER_MOUNT = "/var/run/railtrain/checkpoint-local"
"""Where the node-local checkpoint tier's volume is mounted in the training container."""

# --- exit codes: the trainer's verdict, read by the operator ---------------
EXIT_OK = 0
EXIT_FAILED = 1
"""A failure the operator may retry (counts against runPolicy.backoffLimit)."""
EXIT_USER_ERROR = 2
"""Bad configuration or data: retrying cannot help, the job fails at once."""

_MEMORY, _LOCAL, _PERSISTENT = (default_tier(name) for name in TIERS)
"""Each tier's API defaults (:mod:`railtrain.crds.checkpoint`): a variable the pod lacks takes them."""


@dataclass(frozen=True)
class PodEnvironment:
    """The values one training pod receives.

    Attributes:
        job_name: the TrainingJob's ``metadata.name``.
        namespace: the TrainingJob's namespace.
        nnodes: number of pods (torchrun nodes) in the gang, >= 1.
        node_rank: this pod's node rank in ``[0, nnodes)``.
        procs_per_node: processes torchrun starts in this pod (world size is
            ``nnodes * procs_per_node``).
        rdzv_addr: host name of node rank 0, reachable from every pod
            (``<job>-0.<job>.<namespace>.svc`` in a cluster, ``127.0.0.1`` locally).
        rdzv_port: TCP port of the rendezvous store on node rank 0.
        parallelism: degrees as ``"data=D,fsdp=F,tensor=T,pipeline=P"`` (plus ``",context=C"`` when above 1; :func:`format_parallelism`).
        checkpoint_dir: persistent tier: path or fsspec URI; ``""`` disables it.
        checkpoint_interval: steps between persistent checkpoints, >= 1.
        checkpoint_keep: persistent checkpoints kept (0 keeps all).
        checkpoint_memory_dir: memory tier directory (tmpfs) in the container; ``""`` disables it.
        checkpoint_memory_interval: steps between memory checkpoints.
        checkpoint_memory_keep: memory checkpoints kept.
        checkpoint_local_dir: node-local disk tier directory in the container; ``""`` disables it.
        checkpoint_local_interval: steps between local checkpoints.
        checkpoint_local_keep: local checkpoints kept.
            The nine ``checkpoint_*`` values are the tiers' variables one by one; read them as
            tier configs with :meth:`checkpoint_tiers`. Their defaults are the API's
            (:func:`railtrain.crds.checkpoint.default_tier`).
        metrics_port: Prometheus port of the local rank 0 process.
        restart_count: how many times the operator restarted this gang.
        node_name: the Kubernetes node of this pod (:data:`ENV_NODE_NAME`); ``""`` if unknown.
        precision: ``bf16``, ``fp8``, ``fp32``, or ``""`` for the trainer's default (:data:`ENV_PRECISION`).
        float8_recipe: ``tensorwise`` or ``rowwise`` under fp8, else ``""`` (:data:`ENV_FLOAT8_RECIPE`).
        float8_emulate: ``"1"`` or ``"0"`` under fp8, else ``""`` (:data:`ENV_FLOAT8_EMULATE`).
        run_id: the run that owns the node-local tiers (:data:`ENV_RUN_ID`); ``""``: no run identity
            (a trainer started by hand), any node-local shard may be resumed.
    """

    job_name: str
    namespace: str
    nnodes: int
    node_rank: int
    procs_per_node: int
    rdzv_addr: str
    rdzv_port: int = DEFAULT_RDZV_PORT
    parallelism: str = ""
    checkpoint_dir: str = ""
    checkpoint_interval: int = _PERSISTENT.interval
    metrics_port: int = DEFAULT_METRICS_PORT
    restart_count: int = 0
    checkpoint_keep: int = _PERSISTENT.keep
    checkpoint_memory_dir: str = ""
    checkpoint_memory_interval: int = _MEMORY.interval
    checkpoint_memory_keep: int = _MEMORY.keep
    checkpoint_local_dir: str = ""
    checkpoint_local_interval: int = _LOCAL.interval
    checkpoint_local_keep: int = _LOCAL.keep
    node_name: str = ""
    precision: str = ""
    float8_recipe: str = ""
    float8_emulate: str = ""
    run_id: str = ""

    @property
    def world_size(self) -> int:
        """Total number of training processes: ``nnodes * procs_per_node``."""
        return self.nnodes * self.procs_per_node

    def checkpoint_tiers(self) -> tuple[TierConfig, TierConfig, TierConfig]:
        """The pod's checkpoint tiers as configs, fastest first (:data:`railtrain.crds.checkpoint.TIERS`).

        Returns:
            memory, local and persistent, each with its location (``""``: the tier is off), interval and keep.
        """
        return (
            TierConfig("memory", self.checkpoint_memory_dir, self.checkpoint_memory_interval, self.checkpoint_memory_keep),
            TierConfig("local", self.checkpoint_local_dir, self.checkpoint_local_interval, self.checkpoint_local_keep),
            TierConfig("persistent", self.checkpoint_dir, self.checkpoint_interval, self.checkpoint_keep),
        )


_RAILTRAIN_NAMES = {
    "job_name": ENV_JOB_NAME,
    "namespace": ENV_NAMESPACE,
    "nnodes": ENV_NNODES,
    "node_rank": ENV_NODE_RANK,
    "procs_per_node": ENV_PROCS_PER_NODE,
    "rdzv_addr": ENV_RDZV_ADDR,
    "rdzv_port": ENV_RDZV_PORT,
    "parallelism": ENV_PARALLELISM,
    "checkpoint_dir": ENV_CHECKPOINT_DIR,
    "checkpoint_interval": ENV_CHECKPOINT_INTERVAL,
    "metrics_port": ENV_METRICS_PORT,
    "restart_count": ENV_RESTART_COUNT,
    "checkpoint_keep": ENV_CHECKPOINT_KEEP,
    "checkpoint_memory_dir": ENV_CHECKPOINT_MEMORY_DIR,
    "checkpoint_memory_interval": ENV_CHECKPOINT_MEMORY_INTERVAL,
    "checkpoint_memory_keep": ENV_CHECKPOINT_MEMORY_KEEP,
    "checkpoint_local_dir": ENV_CHECKPOINT_LOCAL_DIR,
    "checkpoint_local_interval": ENV_CHECKPOINT_LOCAL_INTERVAL,
    "checkpoint_local_keep": ENV_CHECKPOINT_LOCAL_KEEP,
    "node_name": ENV_NODE_NAME,
    "precision": ENV_PRECISION,
    "float8_recipe": ENV_FLOAT8_RECIPE,
    "float8_emulate": ENV_FLOAT8_EMULATE,
    "run_id": ENV_RUN_ID,
}


def pod_env(env: PodEnvironment) -> dict[str, str]:
    """Render a :class:`PodEnvironment` as environment variables.

    Returns:
        A mapping of variable name to string value: every ``RAILTRAIN_*``
        variable plus the ``PET_*`` variables that torchrun reads in place of
        its ``--nnodes/--nproc-per-node/--node-rank/--master-addr/--master-port``
        flags (static rendezvous, see ``torch.distributed.run``).
    """
    out = {name: str(getattr(env, attr)) for attr, name in _RAILTRAIN_NAMES.items()}
    out.update(
        {
            ENV_PET_NNODES: str(env.nnodes),
            ENV_PET_NPROC_PER_NODE: str(env.procs_per_node),
            ENV_PET_NODE_RANK: str(env.node_rank),
            ENV_PET_MASTER_ADDR: env.rdzv_addr,
            ENV_PET_MASTER_PORT: str(env.rdzv_port),
        }
    )
    return out




def read_env(environ: Mapping[str, str]) -> PodEnvironment:
    """Parse the ``RAILTRAIN_*`` variables back into a :class:`PodEnvironment`.

    Args:
        environ: usually ``os.environ``.

    Returns:
        The pod environment; variables with defaults may be absent.

    Raises:
        ContractError: a required variable is missing or an integer one is not
            an integer; the message names the variable.
    """
    kwargs: dict[str, object] = {}
    for f in fields(PodEnvironment):
        name = _RAILTRAIN_NAMES[f.name]
        if name not in environ:
            if f.default is MISSING:  # no default: required
                raise ContractError(f"environment variable {name} is required but not set")
            continue
        raw = environ[name]
        if f.type in ("int", int):
            try:
                kwargs[f.name] = int(raw)
            except ValueError:
                raise ContractError(f"environment variable {name} must be an integer, got {raw!r}") from None
        else:
            kwargs[f.name] = raw
    return PodEnvironment(**kwargs)  # type: ignore[arg-type]


def format_parallelism(data: int, fsdp: int, tensor: int, pipeline: int, context: int = 1) -> str:
    """Encode parallel degrees for :data:`ENV_PARALLELISM` (``"data=D,fsdp=F,tensor=T,pipeline=P"``, then ``",context=C"``).

    ``context`` is written only when it is above 1: a job without context
    parallelism gets the same string as before the degree existed, and a
    trainer image too old to know ``context`` refuses a job that needs it
    (it names the unknown degree) instead of training without it.
    """
    text = f"data={data},fsdp={fsdp},tensor={tensor},pipeline={pipeline}"
    return f"{text},context={context}" if context != 1 else text


def parse_parallelism(text: str) -> dict[str, int]:
    """Decode :func:`format_parallelism` output into ``{"data": D, "fsdp": F, ...}``.

    Raises:
        ContractError: the text is not comma-separated ``name=int`` pairs.
    """
    out: dict[str, int] = {}
    if not text:
        return out
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise ContractError(f"{ENV_PARALLELISM} must look like 'data=2,fsdp=1,tensor=1,pipeline=1', got {text!r}")
        out[key.strip()] = int(value)
    return out


def service_name(job_name: str) -> str:
    """Name of the headless rendezvous Service of a job (the job's own name)."""
    return job_name


def pod_name(job_name: str, node_rank: int) -> str:
    """Name of the pod holding ``node_rank`` of a job: ``<job>-<rank>``."""
    return f"{job_name}-{node_rank}"


def rdzv_host(job_name: str, namespace: str) -> str:
    """DNS name of node rank 0 behind the headless Service (pod hostname + subdomain)."""
    return f"{pod_name(job_name, 0)}.{service_name(job_name)}.{namespace}.svc"
