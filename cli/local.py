"""``railtrain run --local``: a TrainingJob's gang as processes on this machine.

The gang is rendered exactly as the operator renders it
(:func:`railtrain.operator.job.render.render_gang`), so the processes see the same
pod-environment contract a cluster pod sees; only what cannot hold on one host
is changed: node rank 0 is ``127.0.0.1`` on a free port, every node gets its own
metrics port, a relative checkpoint location becomes absolute (against
``--workdir``, the processes' working directory, when given, else the directory
``railtrain`` was started in; never the manifest's folder, so a manifest from
standard input behaves the same), the node-local checkpoint tiers get a
directory per node rank on this host (:func:`local_tier_dirs`, keyed by the
run's identity: ``spec.checkpoint.runId``, else a new uid per invocation, as a
new submission gets), and the container image is ignored.
``torchrun`` and ``python`` run from this interpreter, so the local run uses
the same torch as the command line.

:func:`plan_local` is pure; :class:`LocalGang` owns the processes: it writes
every line to the run's log files and streams the lines worth a person's
screen with a ``[rank N]`` prefix (no tracebacks, none of torchrun's reports),
and when one node fails it gives the others a moment to end on their own, then
stops them (SIGTERM to each node's process group, SIGKILL after a grace
period), the way the operator replaces a whole gang (docs/local.md).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TextIO

from railtrain.cli.errors import CliError
from railtrain.cli.local_goodput import SPARE_TOOK
from railtrain.crds import contract, fabric, launcher, supervisor, threads
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render

LOCAL_NAMESPACE = "local"


def new_local_uid() -> str:
    """A fresh stand-in for the TrainingJob's uid, one per ``railtrain run --local`` (a new submission):
    the run identity of the node-local tiers unless ``spec.checkpoint.runId`` names one (docs/checkpoints.md)."""
    return str(uuid.uuid4())

LOCAL_ADDR = "127.0.0.1"
GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when stopping a node, like a pod's terminationGracePeriodSeconds."""
TAIL_LINES = 12
"""Lines of the failing node's own output shown after a failed gang's summary (its worker's, not torchrun's report)."""
KEPT_LINES = 200
"""Lines of each node's output kept in memory as evidence (torchrun's report of how its worker ended); the log files hold all."""
SETTLE_SECONDS = 5.0
"""After the first node fails, how long the others are given to end on their own (and say how their worker ended)
before they are stopped: the node seen failing first is often a survivor whose peer died a moment earlier."""
NOTEWORTHY = re.compile(r"error|warn|traceback|exception|fatal|killed|abort|signal", re.IGNORECASE)
"""Lines of ranks other than 0 that are shown without --verbose."""
SHUTDOWN_NOISE = re.compile(r"DistNetworkError: .*(Failed to recv, got 0 bytes|Connection reset by peer|Broken pipe)")
"""The last line of a traceback a rank's launcher may print when a peer's rendezvous store closed as the run ended."""
COORDINATOR_MOVED = re.compile(r"this supervisor hosts it from attempt \d+ on at (\S+)")
"""A supervisor's line when it took the gang's coordinator over (crds/supervisor.py), with its address."""
HOLD_SECONDS = 40.0
"""A held gang (hot spares) whose node rank 0 failed: how long the others may run on before they are stopped, when
no spare took node rank 0 (the coordinator's successor decides within about 2 x its lost-rank silence, 5 s, plus
the time the others take to stop their workers)."""
LAUNCHER_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
"""The last line of torchrun's own traceback when its worker failed (its report of the worker follows)."""
LAUNCHER_LOG = re.compile(r"^\[?[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+( +\d+)? \S+:\d+\] ")
"""A log line of torch's launcher or C++ runtime (``E1203 08:30:15.094000 1239 torch/distributed/...:1002] ...``)."""
TORCHFT_LOG = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+ \[[A-Z]+\] \[torchft::|\[replica_group_\d+:[0-9a-f-]+/\d+ - step \d+\] )")
"""A log line of torchft (replica groups, spec.faultTolerance): its Rust runtime's, or its Manager's Python logger's (one per
failed gradient all-reduce when a peer group dies). Log files only: the trainer says what happened in its own lines."""
WORKER_PREFIX = re.compile(r"^\[rank\d+\]: ")
"""The prefix torch puts on each line of a worker's uncaught traceback (``[rank0]: Traceback ...``)."""
TRACEBACK_MORE = re.compile(r"^(\s|$|During handling of the above exception|The above exception was the direct cause|Exception raised from .*most recent call first|frame #\d+: )")
"""Lines that continue a traceback: indented frames, blank lines, chained exceptions, a C++ exception's stack."""
CPP_STACK = re.compile(r"^(Exception raised from .*most recent call first|frame #\d+: )")
"""Lines of a C++ exception's stack that follow its Python traceback's last line (torch's c10 errors)."""


@dataclass(frozen=True)
class LocalNode:
    """One node rank of the gang, ready to start.

    Attributes:
        rank: node rank.
        argv: the program and its arguments.
        env: the container's environment (the pod contract plus ``spec.env``);
            it is laid over this process's own environment at start.
    """

    rank: int
    argv: tuple[str, ...]
    env: dict[str, str]


def local_argv(command: list[str], args: list[str], python: str = sys.executable) -> list[str]:
    """The local command line of a container: ``command + args`` with Python launchers mapped to ``python``.

    ``torchrun`` becomes ``python -m torch.distributed.run`` and ``python``/``python3``
    become ``python``, so the interpreter (and the torch) of this installation is used.

    Raises:
        CliError: ``command`` is empty (the image's entrypoint is unknown locally).
    """
    if not command:
        raise CliError("spec.command is empty: a local run needs the command to start, because the image's entrypoint is not known here")
    prefix, command = launcher.supervised(list(command))
    if prefix:  # the pod-side supervisor (spec.runPolicy.restartInPlace) runs the command: both from this interpreter
        return [python, *prefix[1:], *local_argv(command, args, python)]
    head, rest = command[0], list(command[1:])
    if head == "torchrun":
        return [python, "-m", "torch.distributed.run", *rest, *args]
    if head in ("python", "python3"):
        return [python, *rest, *args]
    return [head, *rest, *args]


def resolve_location(location: str, base: Path) -> str:
    """Make a relative checkpoint path absolute against ``base``; URIs (``s3://...``) and ``""`` are kept."""
    if not location or "://" in location:
        return location
    return os.path.abspath(os.path.join(base, os.path.expanduser(location)))


def local_node_name(rank: int) -> str:
    """The stand-in for ``spec.nodeName`` of node rank ``rank`` in a local run: ``local-<rank>``."""
    return f"local-{rank}"


def local_run_roots(pod_env: contract.PodEnvironment, job_name: str) -> dict[str, str]:
    """This host's stand-ins for the node-local tiers' ``hostPath`` of one run: tier name to directory.

    memory: ``/dev/shm/railtrain/local/<job>/<run id>`` (tmpfs, outlives the
    processes); local: ``<tmp>/railtrain/local/<job>/<run id>``; the run id is
    ``pod_env.run_id`` (``spec.checkpoint.runId``, else this invocation's uid).
    Only the tiers the job has are present.
    """
    out = {}
    if pod_env.checkpoint_memory_dir:
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        out["memory"] = os.path.join(shm, "railtrain", LOCAL_NAMESPACE, job_name, pod_env.run_id)
    if pod_env.checkpoint_local_dir:
        out["local"] = os.path.join(tempfile.gettempdir(), "railtrain", LOCAL_NAMESPACE, job_name, pod_env.run_id)
    return out


def local_log_dir(job_name: str, uid: str) -> Path:
    """Where ``railtrain run --local`` writes every node's full output: ``<tmp>/railtrain/logs/<job>/<uid>``
    (one file per node and gang, ``restart-<n>-node-<rank>.log``; kept after the run)."""
    return Path(tempfile.gettempdir()) / "railtrain" / "logs" / job_name / uid


def job_run_roots(job: TrainingJob, uid: str) -> dict[str, str]:
    """:func:`local_run_roots` of ``job`` run locally under ``uid`` (tier name to directory)."""
    return local_run_roots(render.pod_environment(job.spec, job.metadata.name, LOCAL_NAMESPACE, 0, uid=uid), job.metadata.name)


def local_tier_dirs(pod_env: contract.PodEnvironment, job_name: str, rank: int) -> dict[str, str]:
    """The node-local checkpoint tiers' directories of node rank ``rank``: ``<run root>/node-<rank>`` (:func:`local_run_roots`).

    Each node rank gets its own, as each pod gets its own node, so the memory
    tier's copy on the next node is a real second copy.

    Returns:
        :class:`~railtrain.crds.contract.PodEnvironment` field name to directory.
    """
    return {f"checkpoint_{tier}_dir": os.path.join(root, f"node-{rank}") for tier, root in local_run_roots(pod_env, job_name).items()}


def finish_local_tiers(roots: dict[str, str], succeeded: bool) -> str:
    """Apply the node-local cleanup policy to a finished local run (docs/checkpoints.md, "Run identity").

    On success the trainer has already emptied the node-local tiers if the
    persistent tier holds the last step; the directories it left empty are
    removed here. Whatever still holds files (a failed run's shards, or a run
    without a persistent tier) is kept.

    Args:
        roots: :func:`local_run_roots` of the run.
        succeeded: whether every node exited 0.

    Returns:
        One sentence naming the directories still kept, or ``""`` when none are.
    """
    kept = []
    for tier, root in roots.items():
        if succeeded and os.path.isdir(root):
            for dirpath, _, _ in os.walk(root, topdown=False):  # children first
                try:
                    os.rmdir(dirpath)  # only empty directories go
                except OSError:
                    pass
            _remove_empty_parent(root)
        if os.path.isdir(root) and any(f for _, _, files in os.walk(root) for f in files):
            kept.append(f"{tier} {root}")
    return f"node-local checkpoints kept: {', '.join(kept)}" if kept else ""


def _remove_empty_parent(root: str) -> None:
    try:
        os.rmdir(os.path.dirname(root))  # <job>/ once no run of it is left
    except OSError:
        pass


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


PORT_CLAIM_SECONDS = 120.0
"""How long a port handed out by :func:`free_ports` stays claimed for its caller: no other railtrain process on this
machine is given it meanwhile (a torchrun binds its rendezvous port seconds after the runner picked it; once bound,
the bind test alone keeps the port from others)."""


def port_claims_dir() -> Path:
    """The folder of this machine's port claims: one empty file per claimed port, named by it, its modification time
    the claim's (under the temporary folder: ``/tmp/railtrain/ports``)."""
    return Path(tempfile.gettempdir()) / "railtrain" / "ports"


def _claim(port: int, folder: Path, now: float) -> bool:
    """Claim ``port`` for this process: True when no other claim younger than :data:`PORT_CLAIM_SECONDS` holds it.
    The claim is an exclusive create (atomic between processes); an expired claim is removed and claimed anew."""
    path = folder / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                if now - path.stat().st_mtime < PORT_CLAIM_SECONDS:
                    return False
                path.unlink()  # expired: whoever unlinks it first claims it on the next try (the other's create fails)
            except FileNotFoundError:
                pass  # released meanwhile: try the create again
        except OSError:
            return True  # no claims folder to write (read-only temp): the bind test alone, as before claims existed
    return False


def free_ports(count: int, host: str = LOCAL_ADDR, rng: random.Random | None = None, claims: Path | None = None) -> list[int]:
    """``count`` distinct TCP ports that are free on ``host`` right now, and claimed for this caller.

    The ports are drawn below the kernel's ephemeral range, so that outgoing
    connections (which take their local port from that range, as gloo's many
    connections do) cannot grab a port in the seconds before torchrun binds it.
    Each port is also claimed for :data:`PORT_CLAIM_SECONDS` in ``claims`` (default :func:`port_claims_dir`), so that
    two railtrain processes picking ports at the same time (parallel local runs, or tests) are never handed the same
    one: a bind test alone cannot tell them apart, since neither has bound its port yet (a torchrun that lost that race
    exits 1 with ``EADDRINUSE`` before its worker starts, or joins the other's rendezvous store).

    Args:
        count: ports wanted; host: the address they must be free on; rng: the draw (tests pass a seeded one);
        claims: the claims folder (created if missing).

    Returns:
        ``count`` distinct ports in ``[20000, min(ephemeral start, 32768))``.

    Raises:
        CliError: no free ports were found.
    """
    rng = rng or random.Random()
    folder = claims if claims is not None else port_claims_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # _claim then falls back to the bind test alone
    low = 20000
    high = min(_ephemeral_range()[0], 32768) - 1
    ports: list[int] = []
    for _ in range(200 * count):
        if len(ports) == count:
            break
        port = rng.randint(low, high)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        if not _claim(port, folder, time.time()):
            continue
        ports.append(port)
    if len(ports) < count:
        raise CliError(f"no {count} free TCP ports between {low} and {high} on {host} for the rendezvous and metrics")
    return ports


FAULT_FLAGS = {"bitflip": "--fault-bitflip", "slow": "--fault-slow", "hang": "--fault-hang", "kill": "--fault-kill", "bad_batch": "--fault-bad-batch"}
"""``railtrain run --local`` flag of each injectable fault (:class:`~railtrain.crds.contract.Faults` field)."""
FAULT_VARIABLES = {
    "bitflip": contract.ENV_FAULT_BITFLIP, "slow": contract.ENV_FAULT_SLOW, "hang": contract.ENV_FAULT_HANG,
    "kill": contract.ENV_FAULT_KILL, "bad_batch": contract.ENV_FAULT_BAD_BATCH,
}  # fmt: skip
"""The variable each fault flag becomes (named in the contract's messages, replaced by the flag's name here)."""


def parse_fault_flags(values: dict[str, str | None]) -> dict[str, Any]:
    """The faults of the ``--fault-*`` flags that were given.

    Args:
        values: :data:`FAULT_FLAGS` key to the flag's ``key=value,...`` text (``None``: not given).

    Returns:
        :data:`FAULT_FLAGS` key to the parsed fault (a :class:`~railtrain.crds.contract.Faults` field value).

    Raises:
        CliError: a malformed value; the message names the flag (not the variable
            it becomes) and what is allowed (exit status 2).
    """
    faults = {}
    for kind, text in values.items():
        if not text:
            continue
        try:
            faults[kind] = contract.parse_fault(kind, text)
        except contract.ContractError as err:
            message = str(err).replace(FAULT_VARIABLES[kind], FAULT_FLAGS[kind], 1)
            raise CliError(message if message.startswith(FAULT_FLAGS[kind]) else f"{FAULT_FLAGS[kind]}: {message}", exit_code=2) from None
    return faults


def fault_environment(values: dict[str, str | None]) -> dict[str, str]:
    """The ``RAILTRAIN_FAULT_*`` variables of the ``--fault-*`` flags that were given (see :func:`parse_fault_flags`).

    Raises:
        CliError: a malformed value, naming the flag (exit status 2).
    """
    return contract.fault_env(contract.Faults(**parse_fault_flags(values)))


def plan_local(
    job: TrainingJob, rdzv_port: int, metrics_ports: list[int], base_dir: Path, python: str = sys.executable, restarts: int = 0,
    extra_env: dict[str, str] | None = None, *, uid: str, environ: Mapping[str, str] | None = None,
) -> list[LocalNode]:  # fmt: skip
    """Render the gang as the operator would and adapt each pod to this host.

    Args:
        job: a validated TrainingJob.
        rdzv_port: the rendezvous port of node rank 0 on ``127.0.0.1``.
        metrics_ports: one metrics port per node rank.
        base_dir: directory a relative ``spec.checkpoint.location`` is resolved against.
        python: the interpreter that replaces ``torchrun``/``python``.
        restarts: the gang's restart count (``RAILTRAIN_RESTART_COUNT``).
        extra_env: variables added to every node under ``spec.env`` (the ``--fault-*`` flags' variables).
        uid: this run's stand-in for the job's uid (:func:`new_local_uid`), the same for every restart
            of one invocation, so the restarted gang finds the node-local tiers.
        environ: the shell's environment the processes inherit (default ``os.environ``): its
            ``OMP_NUM_THREADS``/``OMP_WAIT_POLICY`` win over railtrain's choice (:func:`local_thread_env`).

    Returns:
        One :class:`LocalNode` per node rank, in rank order, then one per hot spare (``spec.spares``): spare ``i`` is
        local node ``nodes + i`` (its own name, metrics port and node-local tier directories, as a spare pod has its
        own node), with :data:`~railtrain.crds.supervisor.ENV_SPARE` set; it takes a lost node's rank when the
        gang's coordinator gives it one.

    Raises:
        CliError: ``spec.command`` is empty.
        ValueError: fewer metrics ports than nodes and spares.
    """
    want = job.spec.nodes + job.spec.spares
    if len(metrics_ports) < want:
        raise ValueError(f"need {want} metrics ports, got {len(metrics_ports)}")
    shell = os.environ if environ is None else environ
    where = dict(rdzv_port=rdzv_port, base_dir=base_dir, restarts=restarts, extra_env=extra_env, uid=uid, shell=shell)
    nodes = []
    for pod in render.render_gang(job, LOCAL_NAMESPACE, uid, restarts):
        rank = int(pod["metadata"]["labels"][contract.LABEL_NODE_RANK])
        container = next(c for c in pod["spec"]["containers"] if c["name"] == render.CONTAINER_NAME)
        argv = local_argv(container.get("command", []), container.get("args", []), python)
        nodes.append(LocalNode(rank=rank, argv=tuple(argv), env=_node_env(job, rank, rank, metrics_ports[rank], {}, **where)))
    for i in range(job.spec.spares):  # a spare is its own local node, with its own (empty) node-local tiers
        local = job.spec.nodes + i
        nodes.append(_spare_node(job, i, local, metrics_ports[local], nodes[job.spec.nodes - 1], where))
    return nodes


def plan_spare(
    job: TrainingJob, gang: Sequence[LocalNode], spare: int, local: int, metrics_port: int, base_dir: Path, restarts: int = 0,
    extra_env: dict[str, str] | None = None, *, uid: str, environ: Mapping[str, str] | None = None,
) -> LocalNode:  # fmt: skip
    """One more hot spare for a running local gang, as the operator refills the pool with a new spare pod after a spare
    took a rank (:func:`plan_local` plans the first ``spec.spares``).

    Args:
        job: the validated TrainingJob; gang: the running gang's nodes (its rendezvous port and command are the spare's).
        spare: the spare's number (its name ``spare-<spare>`` and its node-local tier directories'); local: its local node
            index; metrics_port: a free port for it.
        base_dir, restarts, extra_env, uid, environ: as :func:`plan_local` was given them for ``gang``.

    Returns:
        The spare's :class:`LocalNode` (:data:`~railtrain.crds.supervisor.ENV_SPARE` set).
    """
    rdzv_port = int(gang[0].env[contract.ENV_RDZV_PORT])
    where = dict(rdzv_port=rdzv_port, base_dir=base_dir, restarts=restarts, extra_env=extra_env, uid=uid, shell=os.environ if environ is None else environ)
    return _spare_node(job, spare, local, metrics_port, gang[job.spec.nodes - 1], where)


def _spare_node(job: TrainingJob, spare: int, local: int, metrics_port: int, last: LocalNode, where: dict[str, Any]) -> LocalNode:
    """Spare ``spare`` as local node ``local``: the last node rank's command and environment, its own name, metrics port
    and node-local tier directories (empty, as a new node's are)."""
    probe = render.pod_environment(job.spec, job.metadata.name, LOCAL_NAMESPACE, 0, uid=where["uid"])
    tiers = {f"checkpoint_{t}_dir": os.path.join(root, f"spare-{spare}") for t, root in local_run_roots(probe, job.metadata.name).items()}
    env = _node_env(job, last.rank, local, metrics_port, tiers, **where) | {supervisor.ENV_SPARE: f"spare-{spare}"}
    return LocalNode(rank=local, argv=last.argv, env=env)


def _node_env(job: TrainingJob, rank: int, local: int, metrics_port: int, tiers: dict[str, str], *, rdzv_port: int, base_dir: Path, restarts: int,
              extra_env: dict[str, str] | None, uid: str, shell: Mapping[str, str]) -> dict[str, str]:  # fmt: skip
    """The environment of node rank ``rank`` run as local node ``local`` (its name, metrics port, tiers: ``tiers`` or
    its own ``node-<rank>`` directories)."""
    name = job.metadata.name
    pod_env = render.pod_environment(job.spec, name, LOCAL_NAMESPACE, rank, restarts, rdzv_addr=LOCAL_ADDR, uid=uid)
    pod_env = dataclasses.replace(
        pod_env, rdzv_port=rdzv_port, metrics_port=metrics_port, checkpoint_dir=resolve_location(pod_env.checkpoint_dir, base_dir),
        node_name=local_node_name(local), **(tiers or local_tier_dirs(pod_env, name, rank)),
    )  # fmt: skip
    env = {**(extra_env or {}), **{e["name"]: e["value"] for e in render.container_env(job.spec, pod_env)}}
    return local_thread_env(job, env, shell)


def local_thread_env(job: TrainingJob, env: dict[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """A local node's environment ``env`` with the CPU threads' variables of one machine (:mod:`railtrain.crds.threads`).

    Every process of the gang runs on this machine, so they share its CPUs: the
    sharers are the world size, not ``procsPerNode`` as in a pod. A variable the
    user sets in the shell (``environ``) is the user's as much as one of
    ``spec.env``: ``OMP_NUM_THREADS`` there marks the count as the user's, and
    railtrain's ``OMP_WAIT_POLICY`` is left out so the shell's reaches the process.
    """
    spec_names = fabric.user_names(job.spec)
    local = threads.thread_env(job.spec.world_size, spec_names | set(environ))
    out = dict(env)
    if threads.ENV_OMP_WAIT_POLICY not in local and threads.ENV_OMP_WAIT_POLICY not in spec_names:
        out.pop(threads.ENV_OMP_WAIT_POLICY, None)
    return out | local


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a process killed by signal N reports ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


class LocalGang:
    """Starts the nodes of a gang, streams their output, and stops them together.

    Every line each node prints goes to its log file (``restart-<n>-node-<rank>.log``
    in ``log_dir``). The screen, without ``verbose``, gets rank 0's lines and the
    other ranks' errors and warnings, but no tracebacks and none of torchrun's
    own reports and log lines: after a failure the summary says what happened
    and :meth:`show_tail` shows the failing node's last lines; the tracebacks
    of the ranks a failure took down are in the log files (issue 25, item 8).

    Args:
        nodes: the planned nodes.
        workdir: working directory of every process (``None``: the current one).
        verbose: show every line of every rank; otherwise ranks other than 0
            show only lines that look like errors or warnings, and no tracebacks.
        notify: prints one status sentence of the runner (not process output).
        out: where process output goes (``None``: ``sys.stdout`` at the time of writing).
        grace: seconds between SIGTERM and SIGKILL when stopping nodes.
        on_line: called with ``(node rank, line)`` for every line a node prints (shown or not), e.g. the goodput recorder.
        log_dir: folder of the nodes' log files (``None``: no files).
        settle: seconds the other nodes get to end on their own after the first failure (:data:`SETTLE_SECONDS`).
        label: put before ``rank N`` in the screen's prefix (e.g. ``"group 1 "`` for a replica group's gang).
        hold: a supervised gang with hot spares (``spec.spares``): a node that ends (lost, or replaced by a spare)
            does not end the gang while the others run on; the node that runs node rank 0 (local node 0, or the
            spare that says it took node rank 0) says how the gang ended.
        refill: a held gang: called with a new local node index for each spare that took a rank, once node rank 0
            trains again; returns one more spare to start (or None), as the operator refills the pool with a new
            spare pod; None: no refill.
    """

    def __init__(self, nodes: list[LocalNode], *, workdir: Path | None = None, verbose: bool = False,
                 notify: Callable[[str], None] = lambda s: None, out: TextIO | None = None, grace: float = GRACE_SECONDS,
                 on_line: Callable[[int, str], None] | None = None, log_dir: Path | None = None, settle: float = SETTLE_SECONDS,
                 label: str = "", hold: bool = False, refill: Callable[[int], LocalNode | None] | None = None):
        self.hold = hold
        self.refill = refill
        self._refills = 0
        """Spares that took a rank and are not yet replaced in the pool (counted by the output pumps)."""
        self._refills_waiting = 0
        """Spares that took a rank, to be replaced once node rank 0 trains again (a new spare's start would compete
        with the next attempt's for the CPUs)."""
        self.coordinator_addr: str | None = None
        """``host:port`` of the supervisor that hosts the gang's coordinator after it moved (its own line says so);
        None: where the gang started it. A refilled spare asks there."""
        self.rank0 = 0
        """The local node that runs node rank 0 (a spare's once it took that rank)."""
        self.node_rank: dict[int, int] = {}
        """Local node (a spare) → the node rank it took: the screen's prefix says that rank."""
        self.nodes = nodes
        self.workdir = workdir
        self.verbose = verbose
        self.notify = notify
        self.grace = grace
        self.on_line = on_line
        self.log_dir = log_dir
        self.settle = settle
        self.label = label
        self._out = out
        self._lock = threading.Lock()
        self._procs: dict[int, subprocess.Popen[str]] = {}
        self._pumps: list[threading.Thread] = []
        self._kept: dict[int, collections.deque[tuple[str, bool, bool]]] = {n.rank: collections.deque(maxlen=KEPT_LINES) for n in nodes}
        self._muted: set[int] = set()
        self._muted_lines = 0
        self._tracebacks: dict[int, int] = {}
        self.log_files: dict[int, Path] = {}
        """Node rank → its log file (when ``log_dir`` is set)."""
        self.failed: tuple[int, int] | None = None
        """``(node rank, exit status)`` of the first node seen failing, once :meth:`run` returned."""
        self.ended: dict[int, tuple[float, int]] = {}
        """Node rank → ``(time.time(), exit status)`` of each node that ended on its own (not stopped by the runner)."""

    def run(self) -> int:
        """Run every node to completion.

        Returns:
            0 when every node exited 0; otherwise the exit status of the first
            node seen failing (the others, after :data:`SETTLE_SECONDS` to end on
            their own, are stopped); 130 after Ctrl-C or SIGTERM.

        Raises:
            CliError: a command cannot be started (the nodes already started are stopped).
        """
        with _sigterm_as_interrupt():
            try:
                for node in self.nodes:
                    self._start(node)
                failed = self._wait()
                if failed is not None:
                    self._settle()
            except KeyboardInterrupt:
                self.notify(f"interrupted: stopping {len(self._procs)} node(s)")
                self._stop_all(mute=set(self._procs))
                return 130
            except BaseException:
                self._stop_all()
                raise
            if failed is None:
                self._drain()
                if self._tracebacks:
                    ranks = ", ".join(str(r) for r in sorted(self._tracebacks))
                    self.notify(f"the run succeeded; not shown: {sum(self._tracebacks.values())} shutdown traceback(s) of node rank {ranks} "
                                f"(a peer closed its connection: the gang ended, or a node was lost){self._where()}")  # fmt: skip
                return 0
            rank, returncode = failed
            self.failed = (rank, exit_status(returncode))
            others = sum(1 for r, p in self._procs.items() if r != rank and p.poll() is None)
            stopping = f"; stopping the other {others} running node(s)" if others else ""
            self.notify(f"node rank {rank} exited with status {exit_status(returncode)}{stopping}")
            self._stop_all(mute=set(self._procs) - {rank})
            return exit_status(returncode)

    def _where(self) -> str:
        return f"; the full output is in {self.log_dir}" if self.log_dir else "; --verbose shows them"

    # -- processes ----------------------------------------------------------
    def _start(self, node: LocalNode) -> None:
        env = {**os.environ, **node.env, "PYTHONUNBUFFERED": "1"}  # Python's own switch: stream output live
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            path = self.log_dir / f"restart-{node.env.get(contract.ENV_RESTART_COUNT, '0')}-node-{node.rank}.log"
            self.log_files[node.rank] = path
            log = open(path, "a", encoding="utf-8")
        try:
            proc = subprocess.Popen(
                list(node.argv), env=env, cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                errors="replace", bufsize=1, start_new_session=True,
            )
        except FileNotFoundError:
            raise CliError(f"spec.command[0]: {node.argv[0]!r} is not a program on this machine's PATH (a local run executes the command here)") from None
        except PermissionError:
            raise CliError(f"spec.command[0]: {node.argv[0]!r} is not executable") from None
        self._procs[node.rank] = proc
        pump = threading.Thread(target=self._pump, args=(node.rank, proc.stdout, log), name=f"rank-{node.rank}-output", daemon=True)
        pump.start()
        self._pumps.append(pump)

    def _poll(self) -> tuple[int, int] | None:
        """Note every node that ended since the last poll; return the first failed one found (lowest rank), if any."""
        failed = None
        for rank, proc in sorted(self._procs.items()):
            returncode = proc.poll()
            if returncode is not None and rank not in self.ended:
                self.ended[rank] = (time.time(), exit_status(returncode))
            if returncode not in (None, 0) and failed is None:
                failed = (rank, returncode)
        return failed

    def _wait(self) -> tuple[int, int] | None:
        if self.hold:
            return self._wait_for_rank_0()
        while True:
            failed = self._poll()
            if failed is not None:
                return failed
            if all(p.poll() is not None for p in self._procs.values()):
                self._poll()
                return None
            time.sleep(0.1)

    def _wait_for_rank_0(self) -> tuple[int, int] | None:
        """:meth:`_wait` of a held gang: the end of the node that runs node rank 0 is the gang's; after a success the
        others get :attr:`settle` s to end. When that node fails while others run, the gang's coordinator may have
        moved to another supervisor and a spare may take node rank 0: the wait goes on (for the spare, or for the
        others to end on the coordinator's final decision), at most :data:`HOLD_SECONDS`."""
        failed_at = None
        while True:
            watched = self.rank0
            code = self._procs[watched].poll()
            self._poll()
            if code is None:
                failed_at = None
                self._refill_pool()
            elif code == 0:
                break
            else:
                failed_at = failed_at or time.monotonic()
                others = [p for i, p in self._procs.items() if i != watched and p.poll() is None]
                if self.rank0 == watched and (not others or time.monotonic() - failed_at > HOLD_SECONDS):
                    if others:
                        self._stop_all(mute=set(self._procs))
                    return (watched, code)
            time.sleep(0.1)
        self._poll()
        self._settle()
        if any(p.poll() is None for p in self._procs.values()):
            self._stop_all(mute=set(self._procs))
        return None

    def _refill_pool(self) -> None:
        """Start one spare (:attr:`refill`) for each spare that took a rank since the last call, while the gang runs."""
        with self._lock:
            due, self._refills = self._refills, 0
        for _ in range(due if self.refill is not None else 0):
            local = max(self._procs) + 1
            node = self.refill(local)  # type: ignore[misc]
            if node is None:
                continue
            if node not in self.nodes:  # the caller's list may be this gang's own
                self.nodes.append(node)
            with self._lock:
                self._kept[node.rank] = collections.deque(maxlen=KEPT_LINES)
            self._start(node)
            self.notify(f"hot spare {node.env.get(supervisor.ENV_SPARE, '?')} started as local node {local}: the spare pool is full again")

    def kill_node(self, rank: int) -> None:
        """SIGKILL every process of local node ``rank`` at once (its machine lost), from any thread (see :meth:`kill`)."""
        proc = self._procs.get(rank)
        self._kill([proc] if proc is not None else [])

    def _settle(self) -> None:
        """Give the other nodes :attr:`settle` seconds to end on their own, noting when each does."""
        deadline = time.monotonic() + self.settle
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs.values()):
            time.sleep(0.05)
            self._poll()
        self._poll()

    def _stop_all(self, mute: Iterable[int] = ()) -> None:
        """SIGTERM every running node's process group, then SIGKILL what is left after the grace period.

        Args:
            mute: ranks whose further output is not shown (unless verbose): the
                tracebacks of nodes we stop on purpose only hide the real failure
                (it is still kept, and written to the log files).
        """
        if not self.verbose:
            self._muted.update(mute)
        running = [p for p in self._procs.values() if p.poll() is None]
        for proc in running:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        try:
            for proc in running:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: do not wait out the grace period
        for proc in running:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        self._drain()

    def _drain(self) -> None:
        for pump in self._pumps:
            pump.join(timeout=5)

    # -- output -------------------------------------------------------------
    def _pump(self, rank: int, stream: TextIO, log: TextIO | None) -> None:
        """Log every line of a node; show the ones :meth:`_emit` shows, never a traceback or torchrun's report.

        A traceback (a worker's, prefixed ``[rankN]: `` by torch, or torchrun's
        own) is held until its last line says whose it is; a C++ stack is the
        runtime's (log file only, never in the failing node's tail); torchrun's report of a failed worker (the box after
        :data:`LAUNCHER_FAILED`) and torchrun's log lines are launcher lines.
        Neither is shown live unless verbose: the runner's summary says how the
        worker ended, and the failing node's tail shows its worker's last lines.
        """
        held: list[str] = []
        report = report_root = False
        try:
            for raw in stream:
                line = raw.rstrip("\r\n")
                if self.hold and line.startswith("railtrain spare") and (took := SPARE_TOOK.match(line)):
                    with self._lock:
                        self._refills_waiting += 1
                    self.node_rank[rank] = int(took.group(1))
                    if took.group(1) == "0":
                        self.rank0 = rank
                if self.hold and (moved := COORDINATOR_MOVED.search(line)):
                    self.coordinator_addr = moved.group(1)
                if self._refills_waiting and rank == self.rank0 and line.startswith("step="):
                    with self._lock:
                        self._refills, self._refills_waiting = self._refills + self._refills_waiting, 0
                if log is not None:
                    log.write(line + "\n")
                    log.flush()
                bare = WORKER_PREFIX.sub("", line)
                if held:
                    if TRACEBACK_MORE.match(bare):
                        held.append(line)
                        continue
                    launcher = bare.startswith(LAUNCHER_FAILED)
                    noise = bool(SHUTDOWN_NOISE.search(bare))  # the rendezvous store closing under a rank: not the worker's own story
                    for kept in [*held, line]:
                        self._emit(rank, kept, hidden=True, worker=not launcher and not noise and not CPP_STACK.match(WORKER_PREFIX.sub("", kept)))
                    if launcher:
                        report, report_root = True, False
                    else:
                        self._tracebacks[rank] = self._tracebacks.get(rank, 0) + 1
                    held = []
                    continue
                if CPP_STACK.match(bare):  # a C++ stack is the runtime's, never the worker's own lines: log file only
                    self._emit(rank, line, hidden=True, worker=False)
                    continue
                if report:  # torchrun's box: ends with the ==== line after its Root Cause
                    self._emit(rank, line, hidden=True, worker=False)
                    report_root = report_root or bare.startswith("Root Cause")
                    report = not (report_root and bare.startswith("===="))
                    continue
                if bare.startswith("Traceback (most recent call last):"):
                    held.append(line)
                    continue
                self._emit(rank, line, hidden=bool(LAUNCHER_LOG.match(line) or TORCHFT_LOG.match(bare)), worker=not LAUNCHER_LOG.match(line))
            for kept in held:
                self._emit(rank, kept, hidden=True, worker=not CPP_STACK.match(WORKER_PREFIX.sub("", kept)))
        finally:
            stream.close()
            if log is not None:
                log.close()

    def tail(self, rank: int) -> list[str]:
        """The last :data:`KEPT_LINES` lines node ``rank`` printed (shown or not), e.g. torchrun's report of its worker."""
        return [line for line, _, _ in self._kept[rank]]

    def _emit(self, rank: int, line: str, hidden: bool = False, worker: bool = True) -> None:
        if self.on_line is not None:
            self.on_line(rank, line)
        shown = self.verbose or (not hidden and (rank == self.rank0 or bool(NOTEWORTHY.search(line))))
        if rank in self._muted and not self.verbose:
            self._muted_lines += 1
            shown = False
        with self._lock:
            self._kept[rank].append((line, shown, worker))
        if shown:
            self._write(f"[{self.label}rank {self.node_rank.get(rank, rank)}] {line}\n")

    def stop(self) -> None:
        """Stop every running node now (SIGTERM, SIGKILL after the grace period), muting their output; from any thread.

        :meth:`run` then returns the status of the first node seen failing (the runner stopped them on purpose).
        """
        self._stop_all(mute=set(self._procs))

    def kill(self) -> None:
        """SIGKILL every process of every running node at once (a whole group of machines lost), from any thread:
        each node's process group and every descendant (torchrun starts its workers in sessions of their own, so a
        signal to the node's group alone would leave them running). :meth:`run` then sees them fail."""
        self._kill(list(self._procs.values()))

    @staticmethod
    def _kill(procs: list[subprocess.Popen[str]]) -> None:
        """SIGKILL the process group of each of ``procs`` still running, and every descendant of theirs."""
        running = [p for p in procs if p.poll() is None]
        pids = [pid for proc in running for pid in _descendants(proc.pid)]
        for proc in running:
            _signal_group(proc, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def show_tail(self, rank: int, lines: int = TAIL_LINES) -> None:
        """Show node ``rank``'s last ``lines`` lines of its own output (not torchrun's report), naming its log file.

        Lines already shown live are shown again: together they are the failure's context.
        """
        with self._lock:
            own = [line for line, _, worker in self._kept.get(rank, ()) if worker][-lines:]
        where = f" (all of it: {self.log_files[rank]})" if rank in self.log_files else ""
        if not own:
            if where:
                self.notify(f"node rank {rank} printed nothing of its own{where}")
            return
        self.notify(f"node rank {rank}'s last {len(own)} line(s){where}:")
        for line in own:
            self._write(f"[{self.label}rank {rank}] {line}\n")
        if self._muted_lines and not self.log_files:
            self.notify(f"{self._muted_lines} line(s) the stopped nodes printed while stopping are not shown (--verbose shows them)")

    def _write(self, text: str) -> None:
        with self._lock:
            out = self._out or sys.stdout
            out.write(text)
            out.flush()


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    """Signal the process group led by ``proc`` (the node and e.g. torchrun's workers); only called before ``proc`` is reaped."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (Linux ``/proc/<pid>/task/<tid>/children``; [] where that is not readable)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While active, SIGTERM to ``railtrain`` stops the gang like Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
