"""``railtrain run --local`` after a failure: the job's ``runPolicy`` applied to local gangs by the operator's own decision.

When a node of a local gang fails, :class:`RecoveringRun` reads every node's
termination message (each node writes its own file, through
:data:`~railtrain.crds.contract.ENV_TERMINATION_MESSAGE_PATH`) and how
torchrun says each worker ended (:func:`torchrun_cause`), turns them into the
evidence the operator reads from pod status (:func:`local_failures`), and
hands it to the one failure decision, :func:`railtrain.crds.recovery.decide`:
the same verdict wins, the same rank is blamed, the same rule of
``spec.runPolicy.failurePolicy`` applies with the same bounds
(``backoffLimit``, ``maxInfrastructureRestarts`` and its backoff), and the
same sentence is printed. Then it stops with the failing node's status, or
starts the whole gang again with the next restart count
(``RAILTRAIN_RESTART_COUNT``), on fresh ports, so the trainer resumes from its
newest checkpoint. On one machine a quarantined or avoided node
(``local-<rank>``) cannot be left: the decision is reported, not enforced.

Fault injection (the ``RAILTRAIN_FAULT_*`` variables,
:data:`~railtrain.crds.contract.FAULT_VARIABLES`) is an event, not a property
of the job: a restarted gang that met a fault again at the same step would
never finish. After a failed gang, every fault whose step is at or before
the step of the gang's verdict has happened and is dropped for the next gangs
(:func:`spent_faults`); a failure without a step (a crash, a killed process)
drops them all. A later fault (e.g. a hang at step 200 after a bit flip at
step 100) still happens in the restarted gang.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Protocol

from railtrain.cli.local import local_node_name
from railtrain.cli.local_goodput import GoodputRecorder
from railtrain.crds import contract, inplace, recovery
from railtrain.crds.supervisor import ENV_SPENT, ENV_SUPERVISOR_PORT, NODE_RANK_KEY, supervisor_env as _supervisor_items
from railtrain.crds.verdicts import json_object
from railtrain.crds.faults import spent_faults  # noqa: F401  (re-exported: the supervisor drops met faults the same way)
from railtrain.crds.api import TrainingJob

_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")
_TORCHRUN_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_TORCHRUN_SIGNAL = re.compile(r"Signal \d+ \((SIG[A-Z0-9]+)\) received")


class Gang(Protocol):
    """What :class:`RecoveringRun` needs of a gang (:class:`~railtrain.cli.local.LocalGang`).

    After :meth:`run`, ``failed`` is ``(node rank, exit status)`` of the first
    node seen failing (``None`` when none failed), and ``tail(rank)`` that
    node's last lines of output.
    """

    def run(self) -> int: ...


def torchrun_cause(lines: list[str]) -> str | None:
    """How torchrun says its worker ended, from torchrun's "Root Cause" report in a node's output, or ``None``.

    torchrun exits 1 whatever happened to its worker; its ``ChildFailedError``
    report names the worker's global rank and exit code, and the signal when
    one killed it (``exitcode : -9``, ``Signal 9 (SIGKILL) received by PID``).

    Returns:
        e.g. ``"worker rank 1 was killed by SIGKILL (exit code -9)"`` or ``"worker rank 1 exited with code 3"``.
    """
    rank = code = signame = None
    roots = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    for line in lines[roots[-1]:] if roots else lines:  # after the other failures torchrun lists, the first one
        if m := _TORCHRUN_RANK.match(line):
            rank = m.group(1)
        elif m := _TORCHRUN_EXIT.match(line):
            code = int(m.group(1))
        if m := _TORCHRUN_SIGNAL.search(line):
            signame = m.group(1)
        if line.startswith("====") and code is not None:
            break
    if code is None:
        return None
    who = f"worker rank {rank}" if rank is not None else "its worker"
    if signame:
        return f"{who} was killed by {signame} (exit code {code})"
    return f"{who} exited with code {code}"


def local_failures(
    messages: list[str | None], code: int, first: int | None = None, causes: dict[int, str | None] | None = None,
    ended: dict[int, tuple[float, int]] | None = None, written: dict[int, float] | None = None,
) -> recovery.GangFailure:  # fmt: skip
    """The evidence of a failed local gang, as the operator reads it from pod status.

    A node that wrote a verdict, the node seen failing first, a node whose
    worker a signal killed (:func:`torchrun_cause`) and every node that ended
    on its own with a non-zero status are failed ranks; the others were
    stopped by the runner. The first death is the cause, not the first exit
    the runner happened to see: a rank whose worker (or node process) a
    signal killed sorts first (:func:`~railtrain.crds.recovery.blame_order`),
    then the order in which the failures began: the earlier of each node's
    exit and its termination message's writing. Survivors of a killed peer
    ("Connection reset by peer") write their message after it died, and the
    killed rank's own launcher may exit later than they do. Node rank ``r``
    ran on ``local-<r>`` (:func:`~railtrain.cli.local.local_node_name`).

    Args:
        messages: each node rank's termination message (``None``: none written).
        code: the exit status of the first failing node.
        first: that node's rank, when known.
        causes: node rank to how its worker ended (:func:`torchrun_cause`), where known.
        ended: node rank to ``(time.time(), exit status)`` of each node that ended on its own
            (:attr:`~railtrain.cli.local.LocalGang.ended`); without it the first node carries ``code``
            and sorts first, the others' status is 1 (torchrun's for any failed worker).
        written: node rank to when its termination message was written (``time.time()`` scale, the file's mtime).
    """
    causes, ended, written = causes or {}, ended or {}, written or {}
    failures = []
    for rank, text in enumerate(messages):
        v, cause = contract.parse_termination_message(text), causes.get(rank) or ""
        own = ended.get(rank)
        signalled = " killed by " in cause or (own is not None and own[1] > 128)
        status = own[1] if own is not None else (code if rank == first else contract.EXIT_FAILED)
        if ended:
            times = [t for t in (own[0] if own else None, written.get(rank) if v else None) if t is not None]
            finished = f"{min(times):017.6f}" if times else ""
        else:
            finished = "0" if rank == first else "1"
        base = dict(rank=rank, code=status, node=local_node_name(rank), signalled=signalled, finished=finished)
        if v:
            failures.append(recovery.Failure(verdict=v["verdict"], reason=v["reason"], message=v["message"], nodes=tuple(v["nodes"]), reported=True, **base))
        elif rank == first or signalled or (own is not None and own[1] != 0):
            failures.append(recovery.unreported(message=cause, **base))
    failures = inplace.without_stopped(tuple(failures), {r for r, text in enumerate(messages) if inplace.stopped_in_message(text)})  # type: ignore[assignment]
    if not failures:  # the first failing node is unknown and none wrote anything
        failures.append(recovery.unreported(rank=0, code=code, node=local_node_name(0)))
    nodes = {rank: local_node_name(rank) for rank in range(len(messages))}
    return recovery.GangFailure(tuple(failures), nodes, frozenset(nodes.values()))


@dataclass
class RecoveringRun:
    """Runs local gangs until one succeeds, is interrupted, or the failure decision says stop.

    Args:
        job: the validated TrainingJob.
        plan: ``plan(restarts)`` → the nodes of the gang with that restart count
            (:func:`~railtrain.cli.local.plan_local` on fresh ports).
        make_gang: builds a runnable gang from nodes (:class:`~railtrain.cli.local.LocalGang`).
        message_dir: where each node's termination message file goes.
        notify: prints one status sentence.
        sleep: waits out an infrastructure restart's backoff (seconds).
    """

    job: TrainingJob
    plan: Callable[[int], list]
    make_gang: Callable[[list], Gang]
    message_dir: Path
    notify: Callable[[str], None] = lambda s: None
    sleep: Callable[[float], None] = time.sleep
    restarts: int = 0
    counters: recovery.Counters = field(default_factory=recovery.Counters)
    history: list[recovery.Decision] = field(default_factory=list)
    current: Gang | None = None
    failed_at: float | None = None
    """``time.monotonic()`` when the last failed gang ended (for recovery timing)."""
    spent: set[str] = field(default_factory=set)
    """Fault variables already met (dropped from the next gangs)."""
    recorder: GoodputRecorder | None = None
    """Told when each gang starts and why it ended, for the run's goodput (:mod:`railtrain.cli.local_goodput`)."""
    in_place: list[inplace.Ledger] = field(default_factory=list)
    """Each failed supervised gang's in-place ledger (``spec.runPolicy.restartInPlace``)."""
    spare: Callable[[list, int, int], Any] | None = None
    """``spare(gang nodes, spare number, local node index)`` → one more hot spare for the running gang
    (:func:`railtrain.cli.local.plan_spare`): the pool is refilled each time a spare takes a rank. None: not refilled."""
    spares_made: int = 0
    """Spares planned beyond ``spec.spares`` in this run (their numbers never repeat, nor their node-local tiers)."""
    _gang: tuple[list, list[Path], dict[str, str]] | None = None

    @property
    def job_restarts(self) -> int:
        """Job restarts so far (they spend ``backoffLimit``)."""
        return self.counters.job_restarts

    @property
    def infrastructure_restarts(self) -> int:
        """Infrastructure restarts so far (bounded by ``maxInfrastructureRestarts``)."""
        return self.counters.infrastructure_restarts

    def _nodes(self) -> tuple[list, list[Path]]:
        nodes: list = []
        files: list[Path] = []
        planned = self.plan(self.restarts)
        taken = {n.env.get(k) for n in planned for k in (contract.ENV_RDZV_PORT, contract.ENV_METRICS_PORT)}
        supervised = supervisor_env(self.job, self.counters, taken) if self.job.spec.run_policy.restart_in_place else {}
        self._gang = (nodes, files, supervised)
        for node in planned:
            self._add(node)
        return nodes, files

    def _add(self, node: Any, keep: tuple[str, ...] = ()) -> Any:
        """``node`` as this gang runs it (its termination message file, the supervisor's variables but those named in
        ``keep``, the spent faults left out), added to the gang's nodes and files; returns it."""
        assert self._gang is not None
        nodes, files, supervised = self._gang
        path = self.message_dir / f"restart-{self.restarts}-node-{node.rank}.msg"
        path.write_text("")  # the kubelet creates the file before the container starts; so do we
        env = dict(node.env) | {k: v for k, v in supervised.items() if k not in keep} | {contract.ENV_TERMINATION_MESSAGE_PATH: str(path)}
        node = replace(node, env={k: v for k, v in env.items() if k not in self.spent})
        nodes.append(node)
        files.append(path)
        return node

    def _refill(self, local: int) -> Any:
        """One more hot spare for the running gang as local node ``local`` (:attr:`spare`), or None."""
        if self.spare is None or self._gang is None or local != len(self._gang[0]):
            return None
        self.spares_made += 1
        node = self.spare(self._gang[0], self.job.spec.spares - 1 + self.spares_made, local)
        moved = getattr(self.current, "coordinator_addr", None)
        if moved and self._gang[2]:  # the coordinator moved to another supervisor: the new spare asks there
            node = replace(node, env=dict(node.env) | {ENV_SUPERVISOR_PORT: moved.rsplit(":", 1)[1]})
            return self._add(node, keep=(ENV_SUPERVISOR_PORT,))
        return self._add(node)

    def _count_in_place(self, messages: list[str | None]) -> None:
        """Spend the failed gang's in-place restarts (the supervisors' ledger in the termination messages) before deciding,
        as the operator does: one job-wide budget for both paths."""
        ledgers = [g for m in messages if (g := inplace.ledger_in_message(m)) is not None]
        if not ledgers:
            return
        ledger = max(ledgers, key=lambda g: g.attempt)
        self.counters = inplace.spend(self.counters, ledger)
        self.in_place.append(ledger)
        if ledger.attempt:
            self.notify(f"{ledger.attempt} in-place restart(s) in this gang ({', '.join(f'{k} {n}' for k, n in sorted(ledger.causes.items()))})")

    def _show_tail(self, rank: int) -> None:
        """After the decision's sentence: the blamed node's last lines (:meth:`~railtrain.cli.local.LocalGang.show_tail`)."""
        show = getattr(self.current, "show_tail", None)
        if show is not None:
            show(rank)

    def run(self) -> int:
        """Run to the end; returns 0, 130 (interrupted) or the failing node's exit status."""
        while True:
            nodes, files = self._nodes()
            self.current = self.make_gang(nodes)
            if self.spare is not None and hasattr(self.current, "refill"):
                self.current.refill = self._refill
            if self.recorder is not None:
                self.recorder.gang_started()
            code = self.current.run()
            if code in (0, 130):
                return code
            self.failed_at = time.monotonic()
            messages = [p.read_text() or None for p in files]
            self.spent |= set().union(*(spent_faults(n.env, messages) for n in nodes))
            first, _ = getattr(self.current, "failed", None) or (None, None)
            causes = {n.rank: torchrun_cause(self.current.tail(n.rank)) for n in nodes} if hasattr(self.current, "tail") else {}
            ended = getattr(self.current, "ended", None) or {}
            written = {n.rank: p.stat().st_mtime for n, p in zip(nodes, files) if messages[nodes.index(n)]}
            holder = holders(messages, self.job.spec.nodes)  # a rank a hot spare took is read from the spare
            pick = lambda values: {r: values[holder.get(r, r)] for r in range(self.job.spec.nodes) if holder.get(r, r) in values}  # noqa: E731
            evidence = local_failures([messages[holder.get(r, r)] for r in range(self.job.spec.nodes)], code, first, pick(causes), pick(ended), pick(written))
            self._count_in_place(messages)
            d = recovery.decide(evidence, self.job.spec.run_policy, self.counters, datetime.now(timezone.utc))
            self.history.append(d)
            self.counters = d.counters
            if self.recorder is not None:
                self.recorder.gang_ended(d.action)
            if d.action == recovery.FAIL:
                self.notify(f"gang failed: {d.message}; not restarting")
                self._show_tail(d.blamed.rank)
                return code
            self.restarts += 1
            self.notify(f"gang failed: {d.message} (restart {self.restarts})")
            self._show_tail(d.blamed.rank)
            if d.backoff_seconds:
                try:
                    self.sleep(d.backoff_seconds)
                except KeyboardInterrupt:
                    return 130


def holders(messages: list[str | None], nnodes: int) -> dict[int, int]:
    """Node rank → the local node (a hot spare, index ≥ ``nnodes``) whose termination message says it took that rank
    (:data:`railtrain.crds.supervisor.NODE_RANK_KEY`); ranks no spare took are absent."""
    out = {}
    for index, text in enumerate(messages[nnodes:], start=nnodes):
        data = json_object(text)
        rank = data.get(NODE_RANK_KEY) if data is not None else None
        if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < nnodes:
            out[rank] = index
    return out


def supervisor_env(job: TrainingJob, counters: recovery.Counters, taken: set[str | None]) -> dict[str, str]:
    """The pod-side supervisor's variables for a local gang of ``job`` (``spec.runPolicy.restartInPlace``): the run
    policy, what the job spent so far (``counters``), and a free port for the gang's coordinator, not one of the
    gang's planned ports (``taken``, as text: planned, not yet bound)."""
    from railtrain.cli.local import free_ports

    items = {e["name"]: e["value"] for e in _supervisor_items(job.spec.run_policy)}
    spent = counters.spent()  # the restarts spent and the history a decision reads, as the operator tells its pods
    port = next(p for p in free_ports(len(taken) + 1) if str(p) not in taken)
    return items | {ENV_SPENT: json.dumps(spent), ENV_SUPERVISOR_PORT: str(port)}
