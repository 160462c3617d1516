"""Run a small gang of real trainer processes (one torchrun "node" per rank, gloo) with health settings and faults."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from railtrain.crds import contract
from tests.trainer.test_trainer_training import _clean_env, _torchrun
from tests.trainer.tierkit import COMMON, RUN_TIMEOUT_S, free_port

FAST = {  # checks at every chance, a short hang floor: the faults show within a few steps
    "fingerprint_interval": 2, "kat_interval": 1000, "timing_interval": 1, "hang_floor_s": 3.0,
}  # fmt: skip


@dataclass
class GangRun:
    """Exit codes, each node's output, each node's parsed termination message, and wall seconds."""

    rcs: list[int]
    logs: list[str]
    verdicts: list[contract.Verdict | None]
    wall_s: float

    def all(self) -> str:
        return "\n----\n".join(self.logs)


def node_name(rank: int) -> str:
    return f"node-{rank}"


def run_gang(workdir: Path, nnodes: int, *args: str, health: dict | None = None, faults: contract.Faults | None = None, parallelism: str = "", cpus: set[int] | None = None) -> GangRun:
    """``nnodes`` torchrun processes of one worker each, configured by the pod contract (node names ``node-<rank>``).

    ``cpus``: when given, every process (torchrun and its worker, which inherits it) runs on these CPUs only
    (``sched_setaffinity``), so all ranks share one core's neighbours instead of each meeting its own.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    pod = contract.PodEnvironment(
        job_name="health", namespace="default", nnodes=nnodes, node_rank=0, procs_per_node=1,
        rdzv_addr="127.0.0.1", rdzv_port=free_port(), parallelism=parallelism,
    )  # fmt: skip
    settings = contract.health_from_mapping(FAST | (health or {}))
    procs, logs, terms = [], [], []
    start = time.monotonic()
    for rank in range(nnodes):
        term = workdir / f"termination-{rank}"
        term.write_text("")  # the kubelet creates it before the container starts
        env = contract.pod_env(replace(pod, node_rank=rank, node_name=node_name(rank)))
        env |= contract.health_env(settings) | contract.fault_env(faults or contract.Faults())
        env[contract.ENV_TERMINATION_MESSAGE_PATH] = str(term)
        log = (workdir / f"node{rank}.log").open("w+")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        procs.append(subprocess.Popen([*_torchrun(), *COMMON, *args], cwd=workdir, env=_clean_env(env), stdout=log, stderr=subprocess.STDOUT, text=True, preexec_fn=pin))
        logs.append(log)
        terms.append(term)
    rcs = [p.wait(timeout=RUN_TIMEOUT_S) for p in procs]
    wall = time.monotonic() - start
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
        log.close()
    return GangRun(rcs, texts, [contract.parse_termination_message(t.read_text()) for t in terms], wall)


def step_seconds(log: str) -> list[float]:
    """Per-step seconds from rank 0's ``tokens_per_s`` log lines (global batch 8 x 64 tokens)."""
    return [512 / float(m) for m in re.findall(r"tokens_per_s=([0-9.]+)", log)]
