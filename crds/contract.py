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
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping, TypedDict

API_GROUP = "railtrain.dev"
API_VERSION = "v1alpha1"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ("tj",)

# --- labels and annotations (Kubernetes recommended-label style) -----------
LABEL_JOB_NAME = f"{API_GROUP}/job-name"
"""Label on every pod and Service of a job: the TrainingJob's name."""
LABEL_NODE_RANK = f"{API_GROUP}/node-rank"
"""Label on every pod: its node rank, ``0 .. nodes-1``, as a decimal string."""
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
ENV_NODE_NAME = "RAILTRAIN_NODE_NAME"
"""The Kubernetes node the pod runs on, from the Downward API (``fieldRef: spec.nodeName``,
see :data:`DOWNWARD_API_FIELDS`); ``railtrain run --local`` sets ``local-<node rank>``. Verdicts
name suspect nodes with it."""
ENV_TERMINATION_MESSAGE_PATH = "RAILTRAIN_TERMINATION_MESSAGE_PATH"
"""Optional: where :func:`write_termination_message` writes (default :data:`TERMINATION_MESSAGE_PATH`); tests and local runs."""
ENV_FAULT_HOLD_CHECKPOINT_STEP = "RAILTRAIN_FAULT_HOLD_CHECKPOINT_STEP"
"""Fault injection, for tests only: the background writer of this step's checkpoint stops
after writing its data, before any manifest, and never finishes (the process is then killed)."""

DOWNWARD_API_FIELDS = {ENV_NODE_NAME: "spec.nodeName"}
"""Variables a pod reads from its own object (Kubernetes Downward API ``fieldRef.fieldPath``), not
from a literal value; :func:`pod_env` renders their local stand-ins, the operator renders ``valueFrom``."""

DEFAULT_RDZV_PORT = 29500
DEFAULT_METRICS_PORT = 9400
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
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

# --- termination message: the trainer's verdict in words --------------------
# torchrun reports any failed worker as exit code 1, so a worker's exit code 2
# does not reach the pod; the termination message (a small JSON object the
# kubelet copies into containerStatuses[].state.terminated.message) does.
VERDICT_RETRYABLE = "retryable"
"""Restarting the gang may help (node or network trouble, a crash): counts against backoffLimit."""
VERDICT_USER_ERROR = "user-error"
"""The job's own input is wrong (flags, data, parallel degrees): fail the job now."""
VERDICT_HARDWARE_SUSPECT = "hardware-suspect"
"""The trainer's health checks caught a device computing wrong numbers (silent data corruption:
parameter bytes that disagree across replicas, a known-answer test that disagrees, or a step
whose re-execution gives a different result). ``nodes``/``ranks`` name the suspects; restarting
on the same node is likely to repeat it."""
VERDICT_STRAGGLER = "straggler"
"""A rank was consistently slower than the others for long enough to cost more than the job's
allowed share of throughput (health action ``stop``); ``nodes``/``ranks`` name it."""
VERDICT_HANG = "hang"
"""A rank stopped making progress (no heartbeat for the watchdog's deadline); ``nodes``/``ranks``
name the rank that stopped first."""
VERDICTS = (VERDICT_RETRYABLE, VERDICT_USER_ERROR, VERDICT_HARDWARE_SUSPECT, VERDICT_STRAGGLER, VERDICT_HANG)
HEALTH_VERDICTS = (VERDICT_HARDWARE_SUSPECT, VERDICT_STRAGGLER, VERDICT_HANG)
"""The verdicts of the trainer's health checks (:mod:`railtrain.trainer.health`); each names suspects."""

# reasons the health checks write (CamelCase, as Kubernetes reasons)
REASON_PARAMETER_MISMATCH = "ParameterMismatch"
"""hardware-suspect: parameter fingerprints of ranks that must hold identical bytes disagree."""
REASON_KNOWN_ANSWER_MISMATCH = "KnownAnswerMismatch"
"""hardware-suspect: a rank's known-answer test result differs from the others' or its own re-run."""
REASON_RERUN_MISMATCH = "RerunMismatch"
"""hardware-suspect: re-executing an anomalous step gave a different result on the named rank."""
REASON_DATA_ANOMALY = "DataAnomaly"
"""user-error: a step's loss/gradient is not finite or spikes, and re-execution reproduces it."""
REASON_SLOW_RANK = "SlowRank"
"""straggler: the named rank's robust slowness score stayed over the threshold."""
REASON_NO_PROGRESS = "NoProgress"
"""hang: the named rank's heartbeat is older than the watchdog's deadline."""

TERMINATION_MESSAGE_MAX_BYTES = 4096
"""The kubelet keeps at most this many bytes of a termination message."""
_REASON = re.compile(r"[A-Z][A-Za-z0-9]*\Z")


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
        parallelism: degrees as ``"data=D,fsdp=F,tensor=T,pipeline=P"``.
        checkpoint_dir: persistent tier: path or fsspec URI; ``""`` disables it.
        checkpoint_interval: steps between persistent checkpoints, >= 1.
        checkpoint_keep: persistent checkpoints kept (0 keeps all).
        checkpoint_memory_dir: memory tier directory (tmpfs) in the container; ``""`` disables it.
        checkpoint_memory_interval: steps between memory checkpoints.
        checkpoint_memory_keep: memory checkpoints kept.
        checkpoint_local_dir: node-local disk tier directory in the container; ``""`` disables it.
        checkpoint_local_interval: steps between local checkpoints.
        checkpoint_local_keep: local checkpoints kept.
        metrics_port: Prometheus port of the local rank 0 process.
        restart_count: how many times the operator restarted this gang.
        node_name: the Kubernetes node of this pod (:data:`ENV_NODE_NAME`); ``""`` if unknown.
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
    checkpoint_interval: int = 100
    metrics_port: int = DEFAULT_METRICS_PORT
    restart_count: int = 0
    checkpoint_keep: int = 2
    checkpoint_memory_dir: str = ""
    checkpoint_memory_interval: int = 10
    checkpoint_memory_keep: int = 1
    checkpoint_local_dir: str = ""
    checkpoint_local_interval: int = 50
    checkpoint_local_keep: int = 2
    node_name: str = ""

    @property
    def world_size(self) -> int:
        """Total number of training processes: ``nnodes * procs_per_node``."""
        return self.nnodes * self.procs_per_node


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


class ContractError(ValueError):
    """Raised when the environment lacks a variable or holds a malformed one."""


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


def format_parallelism(data: int, fsdp: int, tensor: int, pipeline: int) -> str:
    """Encode parallel degrees for :data:`ENV_PARALLELISM` (``"data=D,fsdp=F,tensor=T,pipeline=P"``)."""
    return f"data={data},fsdp={fsdp},tensor={tensor},pipeline={pipeline}"


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


class Verdict(TypedDict):
    """The parsed termination message (:func:`parse_termination_message`); every key is always present.

    Keys:
        verdict: one of :data:`VERDICTS`.
        reason: one CamelCase word (Kubernetes ``reason`` convention).
        message: one human-readable sentence.
        nodes: suspect Kubernetes node names (:data:`ENV_NODE_NAME`), ``[]`` if none or unknown.
        ranks: suspect global ranks, ``[]`` if none.
        step: the optimizer step the finding refers to, ``None`` if none.
        evidence: what was measured, e.g. ``{"fingerprints": {...}, "score": 4.2}``;
            JSON values only, ``{}`` if none.
    """

    verdict: str
    reason: str
    message: str
    nodes: list[str]
    ranks: list[int]
    step: int | None
    evidence: dict[str, Any]


def _verdict_json(verdict: str, reason: str, message: str, nodes: list[str], ranks: list[int], step: int | None, evidence: dict[str, Any]) -> str:
    data: dict[str, Any] = {"verdict": verdict, "reason": reason, "message": message}
    if nodes:
        data["nodes"] = nodes
    if ranks:
        data["ranks"] = ranks
    if step is not None:
        data["step"] = step
    if evidence:
        data["evidence"] = evidence
    return json.dumps(data, separators=(",", ":"), sort_keys=False)


def format_termination_message(
    verdict: str,
    reason: str,
    message: str,
    *,
    nodes: list[str] | tuple[str, ...] = (),
    ranks: list[int] | tuple[int, ...] = (),
    step: int | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> str:
    """The termination message as compact JSON: ``{"verdict", "reason", "message"}`` plus, when
    given, ``"nodes"``, ``"ranks"``, ``"step"`` and ``"evidence"`` (see :class:`Verdict`).

    Without the optional fields the text is the original three-key form, so old
    readers keep working.

    Args:
        verdict: one of :data:`VERDICTS`.
        reason: one CamelCase word, e.g. ``InvalidConfiguration``.
        message: one human-readable sentence; shortened so the whole text fits
            :data:`TERMINATION_MESSAGE_MAX_BYTES`.
        nodes, ranks, step, evidence: the suspects, the step and what was measured
            (``evidence`` must be JSON-serialisable; it is replaced by
            ``{"truncated": true}`` if it alone would overflow the limit).

    Raises:
        ValueError: unknown verdict, a reason that is not CamelCase, a negative rank or step,
            or evidence that is not JSON-serialisable.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    if not _REASON.match(reason):
        raise ValueError(f"reason must be one CamelCase word, got {reason!r}")
    node_list, rank_list = [str(n) for n in nodes], [int(r) for r in ranks]
    if any(r < 0 for r in rank_list) or (step is not None and step < 0):
        raise ValueError(f"ranks and step must be >= 0, got ranks={rank_list} step={step}")
    ev: dict[str, Any] = dict(evidence or {})
    try:
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    except TypeError as err:
        raise ValueError(f"evidence must be JSON-serialisable: {err}") from None
    limit = TERMINATION_MESSAGE_MAX_BYTES
    if ev and len(text.encode()) > limit and len(_verdict_json(verdict, reason, "", node_list, rank_list, step, ev).encode()) > limit - 64:
        ev = {"truncated": True}
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    while len(text.encode()) > limit and len(node_list) + len(rank_list) > 2 and len(_verdict_json(verdict, reason, "", node_list, rank_list, step, ev).encode()) > limit - 64:
        node_list, rank_list = node_list[: max(1, len(node_list) // 2)], rank_list[: max(1, len(rank_list) // 2)]
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    while len(text.encode()) > limit:
        message = message[: max(0, len(message) - (len(text.encode()) - limit) - 4)] + "..."
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    return text


def parse_termination_message(text: str | None) -> Verdict | None:
    """Read a termination message back as a :class:`Verdict` (all seven keys), or ``None``.

    Accepts the original three-key form (``nodes``/``ranks`` become ``[]``,
    ``step`` ``None``, ``evidence`` ``{}``). ``None`` means the container left
    no verdict: an empty message, or (with ``terminationMessagePolicy:
    FallbackToLogsOnError``) the tail of its log, or JSON that is not this
    format (including optional fields of the wrong type). Treat that as
    :data:`VERDICT_RETRYABLE`.
    """
    if not text:
        return None
    try:
        data = json.loads(text.strip())
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("verdict") not in VERDICTS:
        return None
    reason, message = data.get("reason"), data.get("message", "")
    if not isinstance(reason, str) or not _REASON.match(reason) or not isinstance(message, str):
        return None
    nodes, ranks, step, evidence = data.get("nodes", []), data.get("ranks", []), data.get("step"), data.get("evidence", {})
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        return None
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return None
    if not isinstance(evidence, dict):
        return None
    return Verdict(verdict=data["verdict"], reason=reason, message=message, nodes=nodes, ranks=ranks, step=step, evidence=evidence)


def write_termination_message(verdict: str, reason: str, message: str, environ: Mapping[str, str] = os.environ, **details: Any) -> bool:
    """Write the termination message if this process runs where one is collected.

    ``details`` are :func:`format_termination_message`'s keyword fields
    (``nodes``, ``ranks``, ``step``, ``evidence``).

    The path is :data:`ENV_TERMINATION_MESSAGE_PATH` if set, else
    :data:`TERMINATION_MESSAGE_PATH`. The file must already exist (the kubelet
    creates it before the container starts), so a local run writes nothing.

    Returns:
        Whether the message was written.
    """
    path = environ.get(ENV_TERMINATION_MESSAGE_PATH) or TERMINATION_MESSAGE_PATH
    if not os.path.isfile(path) or not os.access(path, os.W_OK):
        return False
    try:
        with open(path, "w") as fh:
            fh.write(format_termination_message(verdict, reason, message, **details))
    except OSError:
        return False
    return True


# --- health checks: settings, heartbeat, fault injection ---------------------
# Read by railtrain.trainer.health; documented in docs/health.md.
ENV_HEALTH = "RAILTRAIN_HEALTH"
"""``1`` (default) runs the trainer's health checks, ``0`` turns all of them off."""
ENV_HEALTH_FILE = "RAILTRAIN_HEALTH_FILE"
"""Optional path of a JSON object of :class:`HealthSettings` fields that the trainer re-reads
(when its mtime changes) at every fingerprint check, to change thresholds and actions while the
job runs; fields it lacks keep their values."""
_HEALTH_ENV_PREFIX = "RAILTRAIN_HEALTH_"


@dataclass(frozen=True)
class HealthSettings:
    """Intervals, thresholds and actions of the trainer's health checks, per job.

    Each field ``f`` is read from ``RAILTRAIN_HEALTH_<F>`` (upper case), see
    :func:`health_env`/:func:`read_health`, and may be changed while the job
    runs through :data:`ENV_HEALTH_FILE`.

    Attributes:
        fingerprint_interval: steps between cross-replica parameter fingerprint comparisons (K).
        kat_interval: steps between known-answer tests (M); one also runs at start.
        timing_interval: steps between gathers of per-rank compute/wait times (N).
        straggler_threshold: robust score (median absolute deviations over the median
            compute time, with a relative floor, see ``trainer.health.stats``) above which a
            rank is slow in a window.
        straggler_window: consecutive timing samples in a window; a rank is flagged when its
            score's window median exceeds the threshold.
        straggler_action: ``report`` (log + metric) or ``stop`` (verdict ``straggler``).
        straggler_stop_share: with ``stop``: the share of throughput the slow rank must cost
            (its excess time over the median, per step) before the job stops, e.g. 0.1.
        spike_threshold: robust z-score of loss or grad norm over its running median that counts as a spike
            (together with ``spike_ratio``).
        spike_ratio: a spike must also exceed this multiple of the running median (natural
            gradient-norm spikes of small-batch training reach ~8x; Megatron-LM's rerun check uses 10x).
        anomaly_action: on a reproducible (data) anomaly: ``skip`` the batch or ``stop`` (user-error).
        max_skipped_batches: batches that may be skipped before the job stops with user-error.
        hang_factor: the watchdog's deadline is ``max(hang_factor x median step time, hang_floor_s)``.
        hang_floor_s: lower bound of the watchdog's deadline, seconds.
    """

    fingerprint_interval: int = 50
    kat_interval: int = 500
    timing_interval: int = 1
    straggler_threshold: float = 0.12
    straggler_window: int = 8
    straggler_action: str = "report"
    straggler_stop_share: float = 0.1
    spike_threshold: float = 12.0
    spike_ratio: float = 10.0
    anomaly_action: str = "skip"
    max_skipped_batches: int = 5
    hang_factor: float = 3.0
    hang_floor_s: float = 60.0

    def validate(self) -> None:
        """Raises :class:`ContractError` naming the variable of a value out of range."""
        for name in ("fingerprint_interval", "kat_interval", "timing_interval", "straggler_window"):
            if getattr(self, name) < 1:
                raise ContractError(f"{health_variable(name)} must be >= 1, got {getattr(self, name)}")
        for name in ("straggler_threshold", "straggler_stop_share", "spike_threshold", "spike_ratio", "hang_factor", "hang_floor_s", "max_skipped_batches"):
            if getattr(self, name) < 0:
                raise ContractError(f"{health_variable(name)} must be >= 0, got {getattr(self, name)}")
        if self.straggler_action not in ("report", "stop"):
            raise ContractError(f"{health_variable('straggler_action')} must be 'report' or 'stop', got {self.straggler_action!r}")
        if self.anomaly_action not in ("skip", "stop"):
            raise ContractError(f"{health_variable('anomaly_action')} must be 'skip' or 'stop', got {self.anomaly_action!r}")


def health_variable(field_name: str) -> str:
    """The environment variable of a :class:`HealthSettings` field, e.g. ``RAILTRAIN_HEALTH_KAT_INTERVAL``."""
    return _HEALTH_ENV_PREFIX + field_name.upper()


def _coerce(kind: Any, raw: Any, where: str) -> Any:
    name = kind if isinstance(kind, str) else kind.__name__
    try:
        if name == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw)
        if name == "float":
            return float(raw)
        if name == "bool":
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes"):
                return True
            if str(raw).lower() in ("0", "false", "no"):
                return False
            raise ValueError
    except (TypeError, ValueError):
        raise ContractError(f"{where} must be {'an' if name == 'int' else 'a'} {name}, got {raw!r}") from None
    return str(raw)


def health_env(settings: HealthSettings) -> dict[str, str]:
    """:class:`HealthSettings` as ``RAILTRAIN_HEALTH_*`` variables (every field)."""
    return {health_variable(f.name): str(getattr(settings, f.name)) for f in fields(HealthSettings)}


def read_health(environ: Mapping[str, str], base: HealthSettings | None = None) -> HealthSettings:
    """Read ``RAILTRAIN_HEALTH_*`` variables over ``base`` (default: the defaults).

    Raises:
        ContractError: a value of the wrong type or out of range; the message names the variable.
    """
    return health_from_mapping({f.name: environ[health_variable(f.name)] for f in fields(HealthSettings) if health_variable(f.name) in environ}, base)


def health_from_mapping(values: Mapping[str, Any], base: HealthSettings | None = None, where: str = "") -> HealthSettings:
    """Apply ``{field: value}`` (e.g. the JSON of :data:`ENV_HEALTH_FILE`) over ``base``.

    Raises:
        ContractError: an unknown field, a value of the wrong type, or out of range.
    """
    base = base or HealthSettings()
    known = {f.name: f for f in fields(HealthSettings)}
    updates = {}
    for key, raw in values.items():
        if key not in known:
            raise ContractError(f"{where or 'health settings'}: unknown field {key!r}; allowed: {', '.join(known)}")
        updates[key] = _coerce(known[key].type, raw, f"{where} {key}".strip() if where else health_variable(key))
    out = HealthSettings(**{f: getattr(base, f) for f in known} | updates)
    out.validate()
    return out


HEARTBEAT_KEY_PREFIX = "railtrain/health/heartbeat/"
"""Rendezvous-store key prefix of a rank's heartbeat: ``<prefix><global rank>``."""
HANG_VERDICT_KEY = "railtrain/health/hang"
"""Rendezvous-store key the first watchdog to fire sets (compare-and-set) to its verdict JSON, so
every rank writes the same hang verdict."""


@dataclass(frozen=True)
class Heartbeat:
    """A rank's progress, published out of band (rendezvous TCPStore, never a collective).

    Attributes:
        rank: global rank.
        step: the optimizer step the rank is in (the last one it started).
        phase: ``compute`` or ``collective`` (what the rank is doing now) or ``idle``.
        time: the rank's wall-clock time of the beat, seconds since the epoch.
        node: the rank's node name (:data:`ENV_NODE_NAME`).
    """

    rank: int
    step: int
    phase: str
    time: float
    node: str = ""


def format_heartbeat(beat: Heartbeat) -> str:
    """A heartbeat as ``rank,step,phase,time,node`` (the node name last: it may hold no comma but anything else)."""
    return f"{beat.rank},{beat.step},{beat.phase},{beat.time:.6f},{beat.node}"


def parse_heartbeat(text: str | bytes) -> Heartbeat:
    """Inverse of :func:`format_heartbeat`.

    Raises:
        ContractError: not five comma-separated fields of the right types.
    """
    if isinstance(text, bytes):
        text = text.decode()
    parts = text.split(",", 4)
    if len(parts) != 5:
        raise ContractError(f"heartbeat must be 'rank,step,phase,time,node', got {text!r}")
    try:
        return Heartbeat(int(parts[0]), int(parts[1]), parts[2], float(parts[3]), parts[4])
    except ValueError:
        raise ContractError(f"heartbeat must be 'rank,step,phase,time,node', got {text!r}") from None


# Fault injection (tests, benchmarks, drills; off by default). Each variable holds
# comma-separated key=value pairs, e.g. RAILTRAIN_FAULT_BITFLIP="rank=1,step=20,mode=once".
ENV_FAULT_BITFLIP = "RAILTRAIN_FAULT_BITFLIP"
"""Flip bit ``bit`` of element ``index`` of the parameters (``target=param``, flattened in
``named_parameters`` order of the rank's local shard; the first parameter) or of the model's
output (``target=activation``, the step's first forward only) on ``rank`` at ``step``;
``mode=once`` (a transient fault) or ``persistent`` (the device stays bad: from ``step`` on the
activation flip repeats in every forward and the rank's known-answer test is corrupted too)."""
ENV_FAULT_SLOW = "RAILTRAIN_FAULT_SLOW"
"""Make ``rank``'s compute ``factor`` times slower from ``from_step`` on (a straggler)."""
ENV_FAULT_HANG = "RAILTRAIN_FAULT_HANG"
"""Hang ``rank`` at ``step``: ``kind=compute`` sleeps forever inside the step's compute,
``kind=collective`` never enters the step's next collective (the others wait in it)."""
ENV_FAULT_KILL = "RAILTRAIN_FAULT_KILL"
"""``rank`` kills itself (SIGKILL) at ``step``, after the step's compute."""
ENV_FAULT_BAD_BATCH = "RAILTRAIN_FAULT_BAD_BATCH"
"""The batch of ``step`` on ``rank`` is poisoned: its loss is not finite, every time it is
computed (a data problem, not hardware). ``rank=-1``: on every rank."""
FAULT_VARIABLES = (ENV_FAULT_BITFLIP, ENV_FAULT_SLOW, ENV_FAULT_HANG, ENV_FAULT_KILL, ENV_FAULT_BAD_BATCH, ENV_FAULT_HOLD_CHECKPOINT_STEP)


@dataclass(frozen=True)
class BitFlipFault:
    """See :data:`ENV_FAULT_BITFLIP`."""

    rank: int
    step: int
    mode: str = "once"
    bit: int = 0
    index: int = 0
    target: str = "param"


@dataclass(frozen=True)
class SlowFault:
    """See :data:`ENV_FAULT_SLOW`."""

    rank: int
    factor: float
    from_step: int = 1


@dataclass(frozen=True)
class HangFault:
    """See :data:`ENV_FAULT_HANG`."""

    rank: int
    step: int
    kind: str = "compute"


@dataclass(frozen=True)
class KillFault:
    """See :data:`ENV_FAULT_KILL`."""

    rank: int
    step: int


@dataclass(frozen=True)
class BadBatchFault:
    """See :data:`ENV_FAULT_BAD_BATCH`."""

    step: int
    rank: int = -1


@dataclass(frozen=True)
class Faults:
    """Every injected fault of a run; ``None`` fields are off.

    ``hold_checkpoint_step`` is :data:`ENV_FAULT_HOLD_CHECKPOINT_STEP` (a plain integer,
    kept for compatibility); the others are parsed from their key=value variables.
    """

    bitflip: BitFlipFault | None = None
    slow: SlowFault | None = None
    hang: HangFault | None = None
    kill: KillFault | None = None
    bad_batch: BadBatchFault | None = None
    hold_checkpoint_step: int | None = None

    def any(self) -> bool:
        """Whether any fault is set."""
        return any(getattr(self, f.name) is not None for f in fields(self))


_FAULT_KINDS: dict[str, tuple[str, type]] = {
    "bitflip": (ENV_FAULT_BITFLIP, BitFlipFault),
    "slow": (ENV_FAULT_SLOW, SlowFault),
    "hang": (ENV_FAULT_HANG, HangFault),
    "kill": (ENV_FAULT_KILL, KillFault),
    "bad_batch": (ENV_FAULT_BAD_BATCH, BadBatchFault),
}
_FAULT_CHOICES = {"mode": ("once", "persistent"), "target": ("param", "activation"), "kind": ("compute", "collective")}


def format_fault(fault: Any) -> str:
    """A fault dataclass as its variable's value, ``key=value,...`` (every field)."""
    return ",".join(f"{f.name}={getattr(fault, f.name)}" for f in fields(fault))


def parse_fault(kind: str, text: str) -> Any:
    """Parse one fault variable's value into the dataclass of ``kind`` (a :class:`Faults` field).

    Raises:
        ContractError: an unknown key, a missing required key, a bad value; names the variable.
    """
    variable, cls = _FAULT_KINDS[kind]
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, raw = (x.strip() for x in part.partition("="))
        if not sep or key not in known:
            raise ContractError(f"{variable} must be comma-separated key=value pairs of {', '.join(known)}, got {text!r}")
        values[key] = _coerce(known[key].type, raw, f"{variable} {key}")
        if key in _FAULT_CHOICES and values[key] not in _FAULT_CHOICES[key]:
            raise ContractError(f"{variable} {key} must be one of {', '.join(_FAULT_CHOICES[key])}, got {raw!r}")
    missing = [n for n, f in known.items() if f.default is MISSING and n not in values]
    if missing:
        raise ContractError(f"{variable} needs {', '.join(missing)}, got {text!r}")
    fault = cls(**values)
    if any(isinstance(getattr(fault, n), int) and getattr(fault, n) < (-1 if n == "rank" and kind == "bad_batch" else 0) for n in known):
        raise ContractError(f"{variable}: integers must be >= 0, got {text!r}")
    if kind == "slow" and fault.factor < 1:
        raise ContractError(f"{variable} factor must be >= 1, got {fault.factor}")
    return fault


def fault_env(faults: Faults) -> dict[str, str]:
    """The variables of the faults that are set."""
    out = {variable: format_fault(getattr(faults, kind)) for kind, (variable, _) in _FAULT_KINDS.items() if getattr(faults, kind) is not None}
    if faults.hold_checkpoint_step is not None:
        out[ENV_FAULT_HOLD_CHECKPOINT_STEP] = str(faults.hold_checkpoint_step)
    return out


def read_faults(environ: Mapping[str, str]) -> Faults:
    """Parse every fault variable present in ``environ`` (empty values count as absent).

    Raises:
        ContractError: a malformed value; the message names the variable.
    """
    kwargs: dict[str, Any] = {kind: parse_fault(kind, environ[var]) for kind, (var, _) in _FAULT_KINDS.items() if environ.get(var)}
    hold = environ.get(ENV_FAULT_HOLD_CHECKPOINT_STEP)
    if hold:
        kwargs["hold_checkpoint_step"] = _coerce(int, hold, ENV_FAULT_HOLD_CHECKPOINT_STEP)
    return Faults(**kwargs)
