"""``railtrain run --local`` around the gang: the job checked, what is said before it starts, each restart's plan, and the end.

The command itself (:func:`railtrain.cli.main.run`) wires these together; the
gang's processes live in :mod:`railtrain.cli.local`, its recovery in
:mod:`railtrain.cli.local_recovery`, the checks of sizes and faults in
:mod:`railtrain.cli.local_checks`.

May import: ``railtrain.crds`` and other ``railtrain.cli`` modules (never :mod:`railtrain.cli.main`); torch only
through :mod:`railtrain.cli.local`'s processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from railtrain.cli import manifest
from railtrain.cli.options import say


def gang_plan(job: Any, first: list[Any], base_dir: Path, faults: dict[str, str], uid: str) -> Callable[[int], list[Any]]:
    """The plan of each local gang of run ``uid``, by restart count: ``first`` (the nodes already planned) for gang 0,
    and for a restarted gang its nodes planned again on fresh ports, a new rendezvous as a new gang of pods gets."""
    from railtrain.cli import local as local_run

    def plan(restarts: int) -> list[Any]:
        if not restarts:
            return first
        fresh = local_run.free_ports(job.spec.nodes + job.spec.spares + 1)  # a new rendezvous, as a new gang of pods gets
        return local_run.plan_local(job, rdzv_port=fresh[0], metrics_ports=fresh[1:], base_dir=base_dir, restarts=restarts, extra_env=faults, uid=uid)

    return plan


def spare_plan(job: Any, base_dir: Path, faults: dict[str, str], uid: str) -> Callable[[list[Any], int, int], Any]:
    """``spare(gang nodes, spare number, local index)``: one more hot spare for a running local gang of run ``uid``
    (:func:`railtrain.cli.local.plan_spare` on a fresh metrics port), for :class:`railtrain.cli.local_recovery.RecoveringRun`
    to refill the pool with."""
    from railtrain.cli import local as local_run
    from railtrain.crds import contract

    def spare(nodes: list[Any], number: int, local: int) -> Any:
        taken = {int(v) for n in nodes for k in (contract.ENV_RDZV_PORT, contract.ENV_METRICS_PORT) if (v := n.env.get(k))}
        port = next(p for p in local_run.free_ports(len(taken) + 1) if p not in taken)
        restarts = int(nodes[0].env.get(contract.ENV_RESTART_COUNT) or 0)
        return local_run.plan_spare(job, nodes, number, local, port, base_dir, restarts, extra_env=faults, uid=uid)

    return spare


def lose_node_watcher(text: str | None, job: Any, gang: Callable[[], Any], notify: Callable[[str], None]) -> Callable[[int, str], None]:
    """``--fault-lose-node node=K,step=S``: a line watcher (``on_line``) that SIGKILLs local node ``K`` of the running
    gang (``gang()``) once node rank 0 logged step ``S`` or a later one, once (:class:`railtrain.crds.faults.LoseNodeFault`).
    Not before every node of the gang printed a line (its supervisor asks the coordinator before it starts the
    workers) and every hot spare (``spec.spares``) said it waits beside the gang: a supervisor or spare that never
    heard the coordinator before node rank 0's machine was lost cannot follow it to its successor, and the fault
    would test a scene it did not set (a loaded machine starts some processes seconds late: stop 48's runs of the
    lost-coordinator test restarted the whole gang, "0 spare(s) ready", or with node 1's supervisor not yet heard).
    The fault fires at node rank 0's first step line after that.

    Raises:
        CliError: a malformed value, or a node the job does not have (exit 2).
    """
    import re
    import threading

    from railtrain.cli.errors import CliError
    from railtrain.crds.contract_errors import ContractError
    from railtrain.crds.faults import parse_lose_node

    if not text:
        return lambda rank, line: None
    try:
        fault = parse_lose_node(text)
    except ContractError as err:
        raise CliError(str(err), exit_code=2) from None
    if fault.node >= job.spec.nodes:
        raise CliError(f"--fault-lose-node: node {fault.node} does not exist (spec.nodes is {job.spec.nodes})", exit_code=2)
    from railtrain.cli.local_checks import job_steps

    last = job_steps(job)
    if last is not None and fault.step > last:
        raise CliError(f"--fault-lose-node: step {fault.step} comes after the job's last step ({last}, --steps in spec.args): the fault could never fire", exit_code=2)
    step_line, fired, lock = re.compile(r"\bstep=(\d+) loss="), [], threading.Lock()
    waiting_line, waiting, training = re.compile(r"^railtrain spare (\S+): waiting beside the gang"), set(), set()

    def watch(rank: int, line: str) -> None:
        if line.startswith("railtrain spare") and (w := waiting_line.match(line)):
            waiting.add(w.group(1))
        if rank < job.spec.nodes:  # a node's first line: its supervisor asked the coordinator before it started the workers
            training.add(rank)
        m = step_line.search(line)
        if rank != 0 or fired or m is None or int(m.group(1)) < fault.step:
            return
        if len(waiting) < job.spec.spares or len(training) < job.spec.nodes:
            return  # the scene is not set yet: a node or spare that never heard the coordinator cannot follow it
        with lock:
            if fired:
                return
            fired.append(True)
        notify(f"--fault-lose-node: node {fault.node}'s processes killed at step {m.group(1)} (its machine lost)")
        gang().kill_node(fault.node)

    return watch


def finish_tiers(job: Any, uid: str, succeeded: bool) -> None:
    """Keep or remove the node-local checkpoint tiers of local run ``uid`` as :func:`railtrain.cli.local.finish_local_tiers`
    decides for a run that ``succeeded`` or not, and say what is kept and how a new run resumes it."""
    from railtrain.cli import local as local_run

    spec = job.spec
    kept = local_run.finish_local_tiers(local_run.job_run_roots(job, uid), succeeded=succeeded)
    if kept:
        run_id = spec.checkpoint.run_id or uid
        resume = "another run with the same spec.checkpoint.runId resumes them" if spec.checkpoint.run_id else f"set spec.checkpoint.runId: {run_id} to resume them in a new run"
        say(f"{kept} (run {run_id}; {resume}, or delete them)")


def checked_job(file: Path, steps: int | None, given: dict[str, str | None], spares: int | None = None) -> tuple[Any, dict[str, str]]:
    """``run --local``'s job and fault injection: the manifest ``file`` read and checked (``--steps`` applied when
    not None), and the ``--fault-*`` flags ``given`` (kind → flag value or None) checked against it.

    Returns:
        ``(job, faults)``: the checked TrainingJob and the environment variables that inject the faults.

    Raises:
        CliError: the manifest is invalid, or a fault names a rank or step the job does not have (exit 2).
    """
    from railtrain.cli import local as local_run
    from railtrain.cli import local_checks

    parsed_faults = local_run.parse_fault_flags(given)
    doc = manifest.read(file)
    job = doc.job()
    if steps is not None:
        job = local_checks.with_steps(job, steps)
    if spares is not None:
        job = local_checks.with_spares(job, spares)
    job = manifest.checked(job, doc.source)
    local_checks.check_faults(parsed_faults, local_run.FAULT_FLAGS, job.spec.world_size, local_checks.job_steps(job))
    return job, local_run.fault_environment(given)


def announce(job: Any, argv: list[str], rdzv_port: int, base_dir: Path, logs: Path) -> None:
    """The lines ``run --local`` says before it starts: the gang's shape and rendezvous port, the command that
    replaces the image (``argv``), where checkpoints (resolved against ``base_dir``) and ``logs`` go, and the
    warnings about this machine's CPUs and memory."""
    from railtrain.cli import local as local_run
    from railtrain.cli import local_checks
    from railtrain.cli.views import count

    spec = job.spec
    say(f"{job.metadata.name}: {count(spec.nodes, 'node')} × {count(spec.procs_per_node, 'process', 'processes')} (world size {spec.world_size}), rendezvous {local_run.LOCAL_ADDR}:{rdzv_port}")
    say(f"the image {spec.image} is ignored locally: '{' '.join(argv)}' runs with this machine's Python")
    if spec.checkpoint.location:
        say(f"checkpoints: {local_run.resolve_location(spec.checkpoint.location, base_dir)}")
    say(f"logs: {logs} (every line of every node; the screen shows rank 0, the others' warnings and a failed node's last lines)")
    for warning in (local_checks.size_warning(spec.world_size, os.cpu_count()), local_checks.memory_warning(job, memory_bytes())):
        if warning:
            say(warning, style="yellow")
    spares = f" and {count(spec.spares, 'hot spare')} (waiting outside the world; a lost node's rank goes to one)" if spec.spares else ""
    say(f"starting {count(spec.world_size, 'rank')} on {count(spec.nodes, 'local node')}{spares}; the first lines come after torch has started in every process")


def say_outcome(job: Any, code: int, elapsed: float, history: list[Any]) -> None:
    """``run --local``'s last line for exit status ``code`` after ``elapsed`` seconds: every node succeeded (with the
    restarts taken, from ``history``), stopped by Ctrl-C (130), or failed with the last gang's verdict."""
    name, nodes = job.metadata.name, job.spec.nodes
    if code == 0:
        say(f"{name}: all {nodes} nodes succeeded in {elapsed:.1f}s{restarts_taken(history)}", style="green")
    elif code == 130:
        say(f"{name}: stopped after {elapsed:.1f}s", style="yellow")
    else:
        last = history[-1] if history else None
        verdict = f"; verdict {last.verdict}: {last.blamed.detail()}" if last else ""
        say(f"{name}: failed with exit status {code} after {elapsed:.1f}s{verdict}", style="red")


def restarts_taken(history: list[Any]) -> str:
    """`` after 1 restart (retryable: rank 1 was killed ...)`` for a local run that recovered; "" when no gang failed."""
    if not history:
        return ""
    from railtrain.cli.views import count

    causes = "; ".join(f"{d.verdict}: {d.blamed.detail()}" for d in history[-3:])
    return f" after {count(len(history), 'restart')} of the whole gang ({causes})"


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes (POSIX ``sysconf``), or ``None`` where unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def run_replica_groups(job: Any, faults: dict[str, str], kill_group: str | None, base_dir: Path, workdir: Path | None, verbose: bool, grace: float) -> int:
    """``run --local`` of a job with ``spec.faultTolerance``: its replica groups as separate local gangs beside a local
    torchft Lighthouse (:mod:`railtrain.cli.local_replica`), each failed group replaced alone.

    Args:
        job: the checked TrainingJob; faults: the ``--fault-*`` variables (every group's first launch).
        kill_group: ``--fault-kill-group`` (``group=G,step=S``) or None.
        base_dir, workdir, verbose, grace: as ``run --local``'s.

    Returns:
        the exit status (:meth:`railtrain.cli.local_replica.ReplicaGroupRun.run`).

    Raises:
        CliError: a malformed ``--fault-kill-group`` or one naming a group the job does not have (exit 2); torchft missing.
    """
    import tempfile
    import time

    from railtrain.cli import local as local_run
    from railtrain.cli import local_replica
    from railtrain.cli.errors import CliError
    from railtrain.crds.contract_errors import ContractError
    from railtrain.crds.faults import parse_kill_group

    ft = job.spec.fault_tolerance
    kill = None
    if kill_group:
        try:
            kill = parse_kill_group(kill_group)
        except ContractError as err:
            raise CliError(str(err), exit_code=2) from None
        if kill.group >= ft.replica_groups:
            raise CliError(f"--fault-kill-group: group {kill.group} does not exist (spec.faultTolerance.replicaGroups is {ft.replica_groups})", exit_code=2)
    uid = local_run.new_local_uid()
    logs = local_run.local_log_dir(job.metadata.name, uid)
    spec = job.spec
    say(f"{job.metadata.name}: {ft.replica_groups} replica groups of {spec.nodes // ft.replica_groups} node(s) × {spec.procs_per_node} process(es), "
        f"minReplicas {ft.min_replicas}, quorumTimeoutSeconds {ft.quorum_timeout_seconds}; a failed group is replaced alone")  # fmt: skip
    say(f"logs: {logs} (a folder per group, and the Lighthouse's)")
    notify = lambda s: say(s, style="yellow")  # noqa: E731
    started = time.monotonic()

    def gang(nodes: list[Any], group: int, on_line: Any, log_dir: Path) -> Any:
        return local_run.LocalGang(nodes, workdir=workdir, verbose=verbose, grace=grace, notify=lambda s: notify(f"replica group {group}: {s}"),
                                   on_line=on_line, log_dir=log_dir, label=f"group {group} ")  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="railtrain-local-") as messages:
        runner = local_replica.ReplicaGroupRun(job, base_dir, uid, faults, kill, gang, notify, Path(messages), logs)
        code = runner.run()
    elapsed = time.monotonic() - started
    finish_tiers(job, uid, succeeded=code == 0)
    for line in runner.summaries():
        say(f"{job.metadata.name}: {line}")
    if code == 0:
        say(f"{job.metadata.name}: succeeded in {elapsed:.1f}s (every replica group not left out finished training)", style="green")
    else:
        say(f"{job.metadata.name}: failed with exit status {code} after {elapsed:.1f}s", style="red")
    return code
