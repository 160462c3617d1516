"""CPU threads of a training process: how many, and how OpenMP's idle threads wait (pure; torch-free).

A training process's intra-op thread pool (OpenMP, under torch) should match
the CPUs the process actually gets, not the machine's: the CPUs it may run on
(``sched_getaffinity``) capped by its cgroup's CPU quota (a pod's CPU limit is
the truth there), divided among the training processes that share them (a
pod's ``procsPerNode``; in ``railtrain run --local``, every process of the
gang, since all run on this one machine). torch's default is the machine's
core count per process, and torchrun lowers it to 1 only when it starts
several processes (issue 25, item 7).

How idle OpenMP threads wait matters as much on a busy machine: by default
(GNU OpenMP) a thread spins for about 300,000 iterations at every barrier
before sleeping, so a process whose threads are descheduled by other work
burns its share spinning and each parallel region waits for the slowest
thread. ``OMP_WAIT_POLICY=PASSIVE`` (the OpenMP standard's variable) makes
idle threads sleep at once; docs/bench-threads.md measures both settings
idle and under load.

What the user sets always wins: ``--threads`` of the trainer, then an
``OMP_NUM_THREADS`` of ``spec.env``, the template's trainer container or (in a
local run) the shell; an ``OMP_WAIT_POLICY`` given the same ways is kept.
The rendered contract marks the count as railtrain's to choose
(:data:`ENV_THREADS` ``=auto``) only when the user did not set it, so an
``OMP_NUM_THREADS=1`` that torchrun adds for several processes per node is
not mistaken for the user's.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

ENV_OMP_NUM_THREADS = "OMP_NUM_THREADS"
ENV_OMP_WAIT_POLICY = "OMP_WAIT_POLICY"
ENV_THREADS = "RAILTRAIN_THREADS"
"""``auto``: the trainer chooses its thread count (:func:`choose_threads`) and any ``OMP_NUM_THREADS`` it sees was
added by its launcher (torchrun); ``user``: the user set ``OMP_NUM_THREADS``, which is kept. Absent (a trainer
started by hand): an ``OMP_NUM_THREADS`` present is the user's, else the trainer chooses."""
ENV_CPU_SHARERS = "RAILTRAIN_CPU_SHARERS"
"""Training processes sharing the CPUs this process sees: ``spec.procsPerNode`` in a pod, the whole gang's
world size in ``railtrain run --local`` (absent: torchrun's ``LOCAL_WORLD_SIZE``)."""
AUTO, USER = "auto", "user"
WAIT_POLICY = "PASSIVE"
"""The OpenMP wait policy rendered for every training process (:func:`thread_env`); docs/bench-threads.md."""


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count of one process and why.

    Attributes:
        threads: threads to set (``torch.set_num_threads``), >= 1.
        reason: the rule that gave it, for the log, e.g. ``"2 CPUs ÷ 1 process"`` or ``"OMP_NUM_THREADS=4 set by the user"``.
    """

    threads: int
    reason: str


def thread_env(sharers: int, user_names: Iterable[str]) -> dict[str, str]:
    """The thread variables of a training container's environment (the pod contract; local runs render the same).

    Args:
        sharers: training processes sharing the container's CPUs (``spec.procsPerNode``; a local run: its world size).
        user_names: variable names the user sets (``spec.env``, the template's trainer ``env``; locally also the shell's).

    Returns:
        :data:`ENV_THREADS` (``auto``, or ``user`` when the user sets ``OMP_NUM_THREADS``), :data:`ENV_CPU_SHARERS`,
        and ``OMP_WAIT_POLICY=PASSIVE`` unless the user sets a wait policy (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``).
    """
    names = set(user_names)
    out = {ENV_THREADS: USER if ENV_OMP_NUM_THREADS in names else AUTO, ENV_CPU_SHARERS: str(max(1, sharers))}
    if not names & {ENV_OMP_WAIT_POLICY, "GOMP_SPINCOUNT"}:
        out[ENV_OMP_WAIT_POLICY] = WAIT_POLICY
    return out


def _count(n: float) -> str:
    return f"{n:g} CPU{'' if n == 1 else 's'}"


def choose_threads(cpus: float, environ: Mapping[str, str], local_world_size: int = 1, flag: int = 0) -> ThreadChoice:
    """The intra-op thread count of one training process (module docstring).

    Args:
        cpus: the CPUs this process may use: its affinity capped by its cgroup quota (:func:`process_cpus`), e.g. 0.5 or 16.
        environ: the process environment (:data:`ENV_THREADS`, :data:`ENV_CPU_SHARERS`, ``OMP_NUM_THREADS``).
        local_world_size: torchrun's ``LOCAL_WORLD_SIZE``, the sharers when :data:`ENV_CPU_SHARERS` is absent.
        flag: the trainer's ``--threads`` (0: not given).

    Returns:
        ``--threads`` when given; the user's ``OMP_NUM_THREADS`` when set and valid; else
        ``max(1, floor(cpus / sharers))``.
    """
    if flag > 0:
        return ThreadChoice(flag, f"--threads {flag}")
    mark, given = environ.get(ENV_THREADS, ""), environ.get(ENV_OMP_NUM_THREADS, "").strip()
    if given and mark != AUTO:
        try:
            n = int(given.split(",")[0])  # OpenMP allows a list per nesting level; the first is ours
        except ValueError:
            n = 0
        if n >= 1:
            return ThreadChoice(n, f"{ENV_OMP_NUM_THREADS}={given} set by the user")
    try:
        sharers = max(1, int(environ.get(ENV_CPU_SHARERS) or local_world_size))
    except ValueError:
        sharers = max(1, local_world_size)
    n = max(1, math.floor(cpus / sharers + 1e-9))
    return ThreadChoice(n, f"{_count(round(cpus, 2))} ÷ {sharers} process{'' if sharers == 1 else 'es'}")


def parse_cpu_max(text: str) -> float | None:
    """CPUs of a cgroup v2 ``cpu.max`` (``"200000 100000"`` → 2.0); ``None`` for ``"max ..."`` (no quota) or unreadable text."""
    parts = text.split()
    if len(parts) < 1 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1]) if len(parts) > 1 else 100000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs of cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; ``None`` when the quota is -1 (none)."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpus(root: Path = Path("/sys/fs/cgroup"), read: Callable[[Path], str] | None = None) -> float | None:
    """This process's cgroup CPU quota in CPUs (v2 ``cpu.max``, else v1 CFS quota), or ``None`` when it has none.

    Inside a container the cgroup namespace makes ``root`` the container's own cgroup.
    """
    read = read or (lambda p: p.read_text())
    try:
        return parse_cpu_max(read(root / "cpu.max"))
    except OSError:
        pass
    for folder in ("cpu", "cpu,cpuacct"):
        try:
            return parse_cfs(read(root / folder / "cpu.cfs_quota_us"), read(root / folder / "cpu.cfs_period_us"))
        except OSError:
            continue
    return None


def process_cpus() -> float:
    """The CPUs this process may use: the CPUs of its affinity mask, capped by its cgroup quota (:func:`cgroup_cpus`)."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    quota = cgroup_cpus()
    return min(cpus, quota) if quota else cpus
