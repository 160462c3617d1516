"""Goodput of ``railtrain run --local``: each gang's life recorded from rank 0's own output, split by :func:`railtrain.crds.goodput.breakdown`.

The evidence is what the trainer prints on node rank 0 (trainer/train.py):
``step=N loss=...`` lines (every ``--log-every`` steps), ``resumed from step N``
and ``checkpoint step=N ... blocked_s=S``; the runner itself knows when it
started each gang and why it ended it. A step the trainer does not print is
seen at the next printed one, so with ``--log-every K`` the first K-1 steps of
an attempt count as starting.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable

from railtrain.crds.goodput import Attempt, Goodput, breakdown

STEP = re.compile(r"\bstep=(\d+) loss=")
RESUMED = re.compile(r"\bresumed from step (\d+)")
BLOCKED = re.compile(r"\bcheckpoint step=\d+ .*\bblocked_s=([0-9.]+)")
IN_PLACE = re.compile(r"railtrain supervisor: attempt \d+: .*\[path (in-place|spare), verdict ([a-z-]+)\]")
"""The coordinator's supervisor's line for an in-place restart or a hot spare's takeover (crds/supervisor.py; node
rank 0's, or its successor's once it was lost): the attempt ends, the next one starts; the cause is the verdict, or
``spare`` for a takeover."""
SPARE_TOOK = re.compile(r"railtrain spare \S+: takes node rank (\d+) ")
"""A spare's line when the coordinator gave it a node rank (crds/supervisor.py): its lines are that rank's from then on."""

ACTION_REASON = {"restart-job": "Restarting", "restart-infrastructure": "NodeQuarantined", "suspend": "Suspended"}
"""A local restart decision (cli/local_recovery.py) → the condition reason the operator writes for the same restart."""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class GoodputRecorder:
    """Collects :class:`~railtrain.crds.goodput.Attempt` records for one local run (thread-safe: output pumps call :meth:`line`).

    Args:
        clock: the current time, UTC-aware (tests pass a fake).
    """

    clock: Callable[[], datetime] = _utcnow
    created: datetime = field(init=False)
    attempts: list[Attempt] = field(default_factory=list, init=False)
    rank0: int = field(default=0, init=False)
    """The local node whose lines are node rank 0's."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.created = self.clock()

    def gang_started(self) -> None:
        """A gang's processes are being started now."""
        with self._lock:
            self.attempts.append(Attempt(released=self.clock()))
            self.rank0 = 0

    def gang_ended(self, action: str) -> None:
        """The current gang was stopped; ``action`` is the restart decision (:data:`ACTION_REASON`)."""
        with self._lock:
            if self.attempts and self.attempts[-1].ended is None:
                self.attempts[-1] = replace(self.attempts[-1], ended=self.clock(), end_reason=ACTION_REASON.get(action, "Restarting"))

    def line(self, rank: int, text: str) -> None:
        """One line local node ``rank`` printed; only node rank 0's step, resume and checkpoint lines count (local
        node 0's, or a spare's once it took node rank 0), and the coordinator's in-place and spare lines (any node's)."""
        if not self.attempts:
            return
        if "railtrain spare" in text and (took := SPARE_TOOK.search(text)):
            if took.group(1) == "0":
                self.rank0 = rank
            return
        if "railtrain supervisor" in text and (m := IN_PLACE.search(text)):
            with self._lock:
                a, now = self.attempts[-1], self.clock()
                self.attempts[-1] = replace(a, ended=now, end_reason="Restarting", in_place=m.group(2) if m.group(1) == "in-place" else "spare")
                self.attempts.append(Attempt(released=now))
            return
        if rank != self.rank0:
            return
        step, resumed, blocked = STEP.search(text), RESUMED.search(text), BLOCKED.search(text)
        if not (step or resumed or blocked):
            return
        with self._lock:
            a, now = self.attempts[-1], self.clock()
            if step:
                n = int(step.group(1))
                a = replace(a, last_step=n, last_step_at=now) if a.first_step is not None else replace(a, first_step=n, first_step_at=now, last_step=n, last_step_at=now)
            if resumed:
                a = replace(a, resumed_from=int(resumed.group(1)))
            if blocked:
                a = replace(a, blocked_seconds=a.blocked_seconds + float(blocked.group(1)))
            self.attempts[-1] = a

    def goodput(self) -> Goodput:
        """The breakdown from the run's start to now."""
        with self._lock:
            return breakdown(self.created, list(self.attempts), self.clock())


def summary(g: Goodput) -> str:
    """One line: ``goodput: wall 61.2 s = queued 0.0 + starting 9.8 + training 44.0 + lost 7.4 (restart_job 5.1, ...); training 72% of wall``."""
    lost = sum(g.lost_seconds.values())
    causes = ", ".join(f"{k} {v:.1f}" for k, v in g.lost_seconds.items())
    return (
        f"goodput: wall {g.wall_seconds:.1f} s = queued {g.queued_seconds:.1f} + starting {g.starting_seconds:.1f} + training {g.training_seconds:.1f}"
        f" + lost {lost:.1f}" + (f" ({causes})" if causes else "") + f"; training {g.ratio:.0%} of wall"
    )
