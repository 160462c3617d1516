"""``railtrain run --local`` after a failure: the job's ``runPolicy`` applied to local gangs, as the operator applies it.

When a node of a local gang fails, :class:`RecoveringRun` reads every node's
termination message (each node writes its own file, through
:data:`~railtrain.crds.contract.ENV_TERMINATION_MESSAGE_PATH`), takes the
gang's verdict the way the operator does (the most specific one,
:data:`railtrain.operator.phases.verdict.PRECEDENCE`; among plain failures,
the node where the failure began: one whose worker a signal killed, as
torchrun reports it (:func:`torchrun_cause`), else the node seen failing
first) and applies the rule of
``spec.runPolicy.failurePolicy`` for it (:func:`decide`): stop with the
failing node's status, or start the whole gang again with the next restart
count (``RAILTRAIN_RESTART_COUNT``), on fresh ports, so the trainer resumes
from its newest checkpoint. Job restarts spend ``runPolicy.backoffLimit``;
infrastructure restarts (verdicts whose rule is ``RestartIgnoringBackoff``)
are bounded by :data:`MAX_INFRASTRUCTURE_RESTARTS` on one machine, where
there is no other node to move to and nothing to quarantine.

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

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

from railtrain.cli.local_goodput import GoodputRecorder
from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.crds.failure_policy import FailureAction
from railtrain.operator.phases.verdict import PRECEDENCE

MAX_INFRASTRUCTURE_RESTARTS = 10
"""Infrastructure restarts a local run allows before it gives up (no other node to move to)."""
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


@dataclass(frozen=True)
class Decision:
    """What to do after a failed gang: ``action`` is ``"fail"``, ``"restart-job"`` or ``"restart-infrastructure"``."""

    action: str
    verdict: str
    detail: str


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


def _said(v: contract.Verdict) -> str:
    """``"reason: message on nodes"``, without repeating a reason the message already starts with."""
    message = v["message"]
    text = message if message.startswith(f"{v['reason']}:") else f"{v['reason']}: {message}"
    return text + (f" on {', '.join(v['nodes'])}" if v["nodes"] else "")


def gang_verdict(messages: list[str | None], code: int, first: int | None = None, causes: dict[int, str | None] | None = None) -> tuple[str, str]:
    """``(verdict, detail)`` of a failed gang from its nodes' termination messages and the failing node's exit status.

    A health verdict or ``user-error`` of any node decides, most specific first
    (the operator's order, :data:`railtrain.operator.phases.verdict.PRECEDENCE`):
    one rank's finding takes the others down with plain failures. Otherwise
    the node where the failure began decides: a node whose worker a signal
    killed (it could not say why; its peers then fail with a closed
    connection), else the node seen failing first. The others' errors are
    what that failure did to them. Without any verdict, exit status 2 is
    ``user-error`` and anything else ``retryable`` (as in the operator).

    Args:
        messages: each node rank's termination message (``None``: none written).
        code: the exit status of the first failing node.
        first: that node's rank, when known.
        causes: node rank to how its worker ended (:func:`torchrun_cause`), where known.
    """
    parsed = {rank: v for rank, m in enumerate(messages) if (v := contract.parse_termination_message(m))}
    decisive = [v for v in parsed.values() if v["verdict"] != contract.VERDICT_RETRYABLE]
    if decisive:
        v = min(decisive, key=lambda v: PRECEDENCE.index(v["verdict"]) if v["verdict"] in PRECEDENCE else len(PRECEDENCE))
        return v["verdict"], _said(v)
    causes = causes or {}
    killed = sorted(r for r, c in causes.items() if c and " killed by " in c and r not in parsed)
    origin = killed[0] if killed else first
    if origin is not None:
        v = parsed.get(origin)
        if v is not None:
            return v["verdict"], f"node rank {origin} failed first: {_said(v)}"
        kind = contract.VERDICT_USER_ERROR if origin == first and code == contract.EXIT_USER_ERROR else contract.VERDICT_RETRYABLE
        return kind, f"node rank {origin} failed first: " + (causes.get(origin) or f"exit status {code}, no verdict")
    if parsed:
        return contract.VERDICT_RETRYABLE, _said(next(iter(parsed.values())))
    kind = contract.VERDICT_USER_ERROR if code == contract.EXIT_USER_ERROR else contract.VERDICT_RETRYABLE
    return kind, f"exit status {code}, no verdict"


def decide(
    job: TrainingJob, messages: list[str | None], code: int, job_restarts: int, infrastructure_restarts: int,
    first: int | None = None, causes: dict[int, str | None] | None = None,
) -> Decision:  # fmt: skip
    """Apply ``spec.runPolicy.failurePolicy`` to a failed local gang (pure).

    Args:
        messages: each node's termination message (None where it wrote none).
        code: the exit status of the first failing node.
        job_restarts, infrastructure_restarts: restarts made so far.
        first, causes: the first failing node's rank and how each node's worker ended (:func:`gang_verdict`).
    """
    kind, detail = gang_verdict(messages, code, first, causes)
    policy = job.spec.run_policy
    rule = policy.failure_policy.rule(kind)
    if rule.action == FailureAction.FAIL.value:
        return Decision("fail", kind, f"{detail} (runPolicy.failurePolicy: {kind} → Fail)")
    if rule.action == FailureAction.RESTART.value:
        if job_restarts >= policy.backoff_limit:
            return Decision("fail", kind, f"{detail}; runPolicy.backoffLimit={policy.backoff_limit} restarts used")
        return Decision("restart-job", kind, detail)
    if infrastructure_restarts >= MAX_INFRASTRUCTURE_RESTARTS:
        return Decision("fail", kind, f"{detail}; {MAX_INFRASTRUCTURE_RESTARTS} infrastructure restarts on one machine, giving up")
    return Decision("restart-infrastructure", kind, detail)


_FAULT_KIND_OF = {
    contract.ENV_FAULT_BITFLIP: "bitflip", contract.ENV_FAULT_SLOW: "slow", contract.ENV_FAULT_HANG: "hang",
    contract.ENV_FAULT_KILL: "kill", contract.ENV_FAULT_BAD_BATCH: "bad_batch",
}  # fmt: skip


def spent_faults(env: dict[str, str], messages: list[str | None]) -> set[str]:
    """The fault variables of ``env`` that a failed gang has met: step ≤ its verdict's step, or all without a step.

    Args:
        env: a node's environment.
        messages: the failed gang's termination messages.
    """
    steps = [v["step"] for m in messages if (v := contract.parse_termination_message(m)) and v["step"] is not None]
    present = {k for k in env if k in contract.FAULT_VARIABLES}
    if not steps:
        return present
    reached, out = max(steps), set()
    for variable in present:
        kind = _FAULT_KIND_OF.get(variable)
        try:
            fault = contract.parse_fault(kind, env[variable]) if kind else None
        except contract.ContractError:
            fault = None
        at = getattr(fault, "step", getattr(fault, "from_step", None)) if fault is not None else None
        if at is None or at <= reached:
            out.add(variable)
    return out


@dataclass
class RecoveringRun:
    """Runs local gangs until one succeeds, is interrupted, or the failure policy says stop.

    Args:
        job: the validated TrainingJob.
        plan: ``plan(restarts)`` → the nodes of the gang with that restart count
            (:func:`~railtrain.cli.local.plan_local` on fresh ports).
        make_gang: builds a runnable gang from nodes (:class:`~railtrain.cli.local.LocalGang`).
        message_dir: where each node's termination message file goes.
        notify: prints one status sentence.
    """

    job: TrainingJob
    plan: Callable[[int], list]
    make_gang: Callable[[list], Gang]
    message_dir: Path
    notify: Callable[[str], None] = lambda s: None
    restarts: int = 0
    job_restarts: int = 0
    infrastructure_restarts: int = 0
    history: list[Decision] = field(default_factory=list)
    current: Gang | None = None
    failed_at: float | None = None
    """``time.monotonic()`` when the last failed gang ended (for recovery timing)."""
    spent: set[str] = field(default_factory=set)
    """Fault variables already met (dropped from the next gangs)."""
    recorder: GoodputRecorder | None = None
    """Told when each gang starts and why it ended, for the run's goodput (:mod:`railtrain.cli.local_goodput`)."""

    def _nodes(self) -> tuple[list, list[Path]]:
        nodes, files = [], []
        for node in self.plan(self.restarts):
            path = self.message_dir / f"restart-{self.restarts}-node-{node.rank}.msg"
            path.write_text("")  # the kubelet creates the file before the container starts; so do we
            env = dict(node.env) | {contract.ENV_TERMINATION_MESSAGE_PATH: str(path)}
            env = {k: v for k, v in env.items() if k not in self.spent}
            nodes.append(replace(node, env=env))
            files.append(path)
        return nodes, files

    def run(self) -> int:
        """Run to the end; returns 0, 130 (interrupted) or the failing node's exit status."""
        while True:
            nodes, files = self._nodes()
            self.current = self.make_gang(nodes)
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
            d = decide(self.job, messages, code, self.job_restarts, self.infrastructure_restarts, first, causes)
            self.history.append(d)
            if self.recorder is not None:
                self.recorder.gang_ended(d.action)
            if d.action == "fail":
                self.notify(f"gang failed ({d.verdict}: {d.detail}); not restarting")
                return code
            if d.action == "restart-job":
                self.job_restarts += 1
            else:
                self.infrastructure_restarts += 1
            self.restarts += 1
            self.notify(
                f"gang failed ({d.verdict}: {d.detail}); restarting the whole gang (restart {self.restarts}: "
                f"job restarts {self.job_restarts}/{self.job.spec.run_policy.backoff_limit}, infrastructure restarts {self.infrastructure_restarts})"
            )
