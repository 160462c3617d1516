"""The pod contract read once into one object, for any training loop (public: :class:`Contract`, :func:`read_contract`).

Part of the library surface :mod:`railtrain.trainer` (docs/library.md). Every variable is read here, in one
place: the gang (``RAILTRAIN_*``, docs/contract.md), torchrun's per-worker variables, the checkpoint tiers, the
health settings and faults, and the fabric settings the operator rendered. A variable that is missing or
malformed raises :class:`~railtrain.crds.contract.ContractError` with one sentence naming it, which
:func:`railtrain.trainer.outcome.write_verdict` turns into a ``user-error`` verdict and exit code 2.

Imports: the standard library and :mod:`railtrain.crds` only (no torch: reading the contract is cheap).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from railtrain.crds import contract
from railtrain.crds.checkpoint import TierConfig
from railtrain.crds.fabric import SETTING_PREFIXES

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
"""The per-worker variables torchrun sets (``torch.distributed.run``); absent in a process started alone."""


@dataclass(frozen=True)
class Contract:
    """What railtrain told this training process, read once (:func:`read_contract`).

    Attributes:
        pod: the gang's ``RAILTRAIN_*`` values, or ``None`` when the process does not run under railtrain
            (no ``RAILTRAIN_JOB_NAME``: a script started by hand; every other field then has its default).
        rank, world_size, local_rank, local_world_size: this worker's place (torchrun's ``RANK``,
            ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``; 0, 1, 0, 1 for a process alone).
        node: this rank's node name (``RAILTRAIN_NODE_NAME``, else the host name); verdicts name it.
        run_id: the run owning the node-local checkpoint tiers (``RAILTRAIN_RUN_ID``; ``""``: any).
        restart_count: how many times the operator restarted the gang (0 on the first).
        tiers: the checkpoint tiers that are on, fastest first (memory, local, persistent); ``()`` when none.
        parallelism: the degrees the API resolved, ``{"data": D, "fsdp": F, "tensor": T, "pipeline": P, ...}``
            (``{}`` outside railtrain).
        health: the health checks' settings (``RAILTRAIN_HEALTH_*`` over the defaults).
        health_enabled: ``RAILTRAIN_HEALTH`` is not ``0``.
        health_file: ``RAILTRAIN_HEALTH_FILE`` (settings re-read while running), ``""`` if unset.
        faults: injected faults (``RAILTRAIN_FAULT_*``; all off unless set).
        metrics_port: the Prometheus port local rank 0 serves (``RAILTRAIN_METRICS_PORT``); 0 outside railtrain.
        nvlink_domain: the job is placed inside one NVLink domain (``RAILTRAIN_NVLINK_DOMAIN=1``).
        fabric: the ``NCCL_*``, ``FI_*`` and ``OFI_NCCL_*`` variables this process sees (the operator's fabric profile).
    """

    pod: contract.PodEnvironment | None = None
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node: str = ""
    run_id: str = ""
    restart_count: int = 0
    tiers: tuple[TierConfig, ...] = ()
    parallelism: Mapping[str, int] = field(default_factory=dict)
    health: contract.HealthSettings = field(default_factory=contract.HealthSettings)
    health_enabled: bool = True
    health_file: str = ""
    faults: contract.Faults = field(default_factory=contract.Faults)
    metrics_port: int = 0
    nvlink_domain: bool = False
    fabric: Mapping[str, str] = field(default_factory=dict)

    @property
    def distributed(self) -> bool:
        """Whether there is more than one training process (``world_size > 1``)."""
        return self.world_size > 1

    @property
    def job_name(self) -> str:
        """The TrainingJob's name, ``""`` outside railtrain."""
        return self.pod.job_name if self.pod else ""


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise contract.ContractError(f"environment variable {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise contract.ContractError(f"environment variable {name} must be >= {minimum}, got {value}")
    return value


def read_contract(environ: Mapping[str, str] | None = None) -> Contract:
    """Read the pod contract (docs/contract.md) once.

    Args:
        environ: the variables to read; default ``os.environ``.

    Returns:
        The :class:`Contract`; outside railtrain (no ``RAILTRAIN_JOB_NAME``) the gang fields keep their defaults,
        while torchrun's variables, health settings and faults are still read.

    Raises:
        ContractError: (a ``ValueError``) a required ``RAILTRAIN_*`` variable is missing, or a variable is not of
            its type or out of range (``RANK`` not below ``WORLD_SIZE``, a health threshold below 0, a fault that
            does not parse); the one-sentence message names the variable.
    """
    env = os.environ if environ is None else environ
    pod = contract.read_env(env) if contract.ENV_JOB_NAME in env else None
    world = _int(env, "WORLD_SIZE", pod.world_size if pod else 1, 1)
    rank = _int(env, "RANK", 0, 0)
    if rank >= world:
        raise contract.ContractError(f"environment variable RANK must be below WORLD_SIZE ({world}), got {rank}")
    local_world = _int(env, "LOCAL_WORLD_SIZE", pod.procs_per_node if pod else 1, 1)
    local_rank = _int(env, "LOCAL_RANK", 0, 0)
    return Contract(
        pod=pod, rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world,
        node=(pod.node_name if pod else "") or env.get(contract.ENV_NODE_NAME, "") or socket.gethostname(),
        run_id=pod.run_id if pod else env.get(contract.ENV_RUN_ID, ""),
        restart_count=pod.restart_count if pod else 0,
        tiers=tuple(t for t in pod.checkpoint_tiers() if t.enabled) if pod else (),
        parallelism=contract.parse_parallelism(pod.parallelism) if pod else {},
        health=contract.read_health(env), health_enabled=env.get(contract.ENV_HEALTH, "1") != "0",
        health_file=env.get(contract.ENV_HEALTH_FILE, ""), faults=contract.read_faults(env),
        metrics_port=pod.metrics_port if pod else 0, nvlink_domain=env.get(contract.ENV_NVLINK_DOMAIN) == "1",
        fabric={k: v for k, v in env.items() if k.startswith(SETTING_PREFIXES)},
    )  # fmt: skip
