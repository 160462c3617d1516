"""Heartbeats through the rendezvous store and the hang watchdog (one daemon thread per rank).

The training loop only updates an in-memory :class:`Progress` (step and phase) at every phase
change. A thread per rank publishes it to the rendezvous TCPStore (torchrun's store at
``MASTER_ADDR:MASTER_PORT``; a private ``HashStore`` when running alone), reads every rank's
beat, and fires when some rank has made no progress for
``max(hang_factor x median step time, 0.9 x hang_floor_s)`` (:func:`stats.hang_deadline`). It
polls every ``hang_floor_s / 20`` seconds, so it fires within ``max(k x median, floor)`` plus
two polls, which is within ``k x median + floor`` (the issue's bound). The store is never a
collective, so a rank stuck in compute or outside a collective cannot block it (the public
failure this avoids is pytorch/pytorch#111646: a hung rank holds the gang until the 30-minute
collective timeout).

On firing, the first watchdog sets :data:`~railtrain.crds.contract.HANG_VERDICT_KEY` with
compare-and-set; every rank's watchdog then dumps its Python stacks (``faulthandler``) to the
log, writes the *same* ``hang`` verdict to its termination message, and ends its process
(``os._exit``, two polls later, so the others read the verdict before their collectives break),
which ends the gang. A rank whose collective fails first because a peer exited still writes
the shared verdict (:meth:`Watchdog.shared_verdict`, used by the entry point).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Mapping

import torch.distributed as dist

from railtrain.crds import contract
from railtrain.crds.process import say
from railtrain.trainer.health import stats
from railtrain.trainer.health.faults import hang_before_init

PHASE_ORDER = {"start": 0, "forward": 1, "backward": 2, "collective": 3, "rerun": 4, "known-answer": 5, "checkpoint": 6, "done": 7}
"""The order of a step's phases: among stalled ranks, the one furthest behind (lowest step, then
earliest phase) is the one the others wait for."""
SLOW_PHASES = frozenset({"checkpoint", "start"})
"""Phases that may legitimately outlast a step (checkpoint saves, the set-up before the first step):
their deadline is ``hang_warmup_s`` at least."""
WARMUP_STEPS = 2
"""Steps of a gang (this process's first ones, after a resume too) that get the warm-up allowance
``hang_warmup_s``: the first step compiles, sets up lazy communicators and grows the allocator, and
the median of one step time is that slow step."""


@dataclass
class Progress:
    """What this rank is doing; written by the training loop, read by the watchdog thread."""

    step: int = 0
    phase: str = "start"
    time: float = 0.0

    allowances: dict[str, float] = field(default_factory=dict)
    """Per phase name, the seconds it may last at least (the loop says so, e.g. a replica group's ``quorum``, which
    waits for other groups up to its own timeout); every rank's loop marks the same phases with the same allowance."""

    def mark(self, step: int, phase: str, at_least_s: float | None = None) -> None:
        """Record a phase change now (wall clock, seconds since the epoch); ``at_least_s``: the phase may last that
        long before the watchdog calls it a hang (kept for later marks of the same phase)."""
        if at_least_s is not None:
            self.allowances[phase] = float(at_least_s)
        self.step, self.phase, self.time = step, phase, time.time()


def _behind(beat: contract.Heartbeat) -> tuple:
    return (beat.step, PHASE_ORDER.get(beat.phase, len(PHASE_ORDER)), beat.time, beat.rank)


def open_store(distributed: bool, environ: Mapping[str, str] = os.environ) -> Any:
    """A store client for heartbeats: torchrun's TCPStore when distributed, else an in-process HashStore.

    Raises:
        RuntimeError: the store cannot be reached within 60 s.
    """
    if not distributed:
        return dist.HashStore()
    return dist.TCPStore(environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=60), wait_for_workers=False)


def dump_stacks(rank: int) -> None:
    """Every thread's Python stack of this process to stderr (``faulthandler``)."""
    say(f"health: rank {rank}: Python stacks of every thread follow")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()


class Watchdog(threading.Thread):
    """The heartbeat publisher and hang detector of one rank (a daemon thread).

    Args:
        store: a c10d store (``set``, ``get``, ``check``, ``compare_set``, ``multi_get``).
        rank, world_size, node: this rank, the gang size, this rank's node name.
        progress: the loop's :class:`Progress`.
        step_times: recent step durations in seconds (the loop appends; the watchdog reads).
        settings: returns the current :class:`~railtrain.crds.contract.HealthSettings`.
        on_hang: called with the verdict dict (``reason``, ``message``, ``nodes``, ``ranks``,
            ``step``, ``evidence``) when the gang is declared hung; the default dumps stacks,
            writes the termination message and ends the process.
    """

    def __init__(
        self, store: Any, rank: int, world_size: int, node: str, progress: Progress, step_times: deque,
        settings: Callable[[], contract.HealthSettings], on_hang: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name=f"railtrain-health-watchdog-{rank}", daemon=True)
        self.store, self.rank, self.world_size, self.node = store, rank, world_size, node
        self.progress, self.step_times, self.settings = progress, step_times, settings
        self.on_hang = on_hang or self._end_process
        self.keys = [f"{contract.HEARTBEAT_KEY_PREFIX}{r}" for r in range(world_size)]
        self._seen: dict[int, tuple] = {}
        self._changed: dict[int, float] = {}
        self._stop = threading.Event()
        self.age_s = 0.0
        """Age of the oldest rank's progress at the last poll (seconds), for the metrics."""

    def poll_s(self) -> float:
        """Seconds between polls: a twentieth of the floor, at most 1 s."""
        return min(1.0, self.settings().hang_floor_s / 20)

    def stop(self) -> None:
        """Stop the thread after its current poll (idempotent)."""
        self._stop.set()

    def run(self) -> None:
        while not self._stop.wait(self.poll_s()):
            try:
                verdict = self.poll(time.monotonic())
            except Exception as err:  # the store went away (gang ending): stop quietly
                if not self._stop.is_set():
                    say(f"health: watchdog of rank {self.rank} stopped: {type(err).__name__}: {err}")
                return
            if verdict is not None and not self._stop.is_set():
                self.on_hang(verdict)
                return

    def publish(self) -> None:
        """Write this rank's heartbeat to the store."""
        p = self.progress
        self.store.set(self.keys[self.rank], contract.format_heartbeat(contract.Heartbeat(self.rank, p.step, p.phase, p.time, self.node)))

    def deadline(self, phase: str, step_times: list[float], warming: bool) -> float:
        """Seconds a rank may stay in ``phase``: :func:`~railtrain.trainer.health.stats.phase_deadline`, or the
        phase's allowance (:attr:`Progress.allowances`) when that is longer."""
        s = self.settings()
        base = stats.phase_deadline(step_times, s.hang_factor, 0.9 * s.hang_floor_s, s.hang_warmup_s, warming=warming, slow_phase=phase in SLOW_PHASES)
        return max(base, self.progress.allowances.get(phase, 0.0))

    def poll(self, now: float) -> dict[str, Any] | None:
        """One round: publish, read every beat, decide.

        Args:
            now: ``time.monotonic()``; ages are measured on this rank's own clock from when it saw a beat change.

        Returns:
            The gang's hang verdict if one is due (set by this or another rank's watchdog), else ``None``.
        """
        self.publish()
        if self.store.check([contract.HANG_VERDICT_KEY]):
            return json.loads(self.store.get(contract.HANG_VERDICT_KEY))
        if not self.store.check(self.keys):
            return None  # not every rank has beaten yet
        beats = [contract.parse_heartbeat(raw) for raw in self.store.multi_get(self.keys)]
        for b in beats:
            state = (b.step, b.phase, b.time)
            if self._seen.get(b.rank) != state:
                self._seen[b.rank], self._changed[b.rank] = state, now
        times = list(self.step_times)
        warming = len(times) < WARMUP_STEPS
        live = [b for b in beats if b.phase != "done"]
        self.age_s = max((now - self._changed[b.rank] for b in live), default=0.0)
        stalled = [
            b for b in live
            if now - self._changed[b.rank] > self.deadline(b.phase, times, warming)
        ]
        if not stalled:
            return None
        # The others wait for the rank furthest behind (lowest step, earliest phase); among equals,
        # the reported wall clocks order who stopped first. The culprit is looked for among every
        # live rank, not only the stalled ones: a rank that reached the hung step late (descheduled
        # on a busy node) changed its beat after the peers that now wait for it, so it passes the
        # deadline after them, yet it is the one they wait for.
        first = min(live, key=_behind)
        deadline = self.deadline(first.phase, times, warming)
        verdict = {
            "reason": contract.REASON_NO_PROGRESS,
            "message": f"rank {first.rank} on node {first.node or '?'} made no progress for {now - self._changed[first.rank]:.1f}s "
            f"(deadline {deadline:.1f}s) in step {first.step}, phase {first.phase}",
            "nodes": [first.node] if first.node else [],
            "ranks": [first.rank],
            "step": first.step,
            "evidence": {
                "phase": first.phase, "age_s": round(now - self._changed[first.rank], 3), "deadline_s": round(deadline, 3), "warming_up": warming,
                "stalled_ranks": [b.rank for b in sorted(stalled, key=_behind)][:16],
                "median_step_s": round(sorted(self.step_times)[len(self.step_times) // 2], 6) if self.step_times else None,
                "detected_by": self.rank,
            },
        }  # fmt: skip
        text = json.dumps(verdict)
        stored = self.store.compare_set(contract.HANG_VERDICT_KEY, "", text)
        return json.loads(stored)

    def shared_verdict(self) -> dict[str, Any] | None:
        """The gang's hang verdict if some watchdog has set it in the store, else ``None`` (never raises)."""
        try:
            if self.store.check([contract.HANG_VERDICT_KEY]):
                return json.loads(self.store.get(contract.HANG_VERDICT_KEY))
        except Exception:  # the store is gone
            pass
        return None

    def _end_process(self, verdict: dict[str, Any]) -> None:
        # linger: let the other ranks' watchdogs read the verdict before this rank's exit breaks their collectives
        end_with_hang_verdict(verdict, self.rank, f"health: verdict=hang {verdict['message']}", linger_s=2 * self.poll_s())


class StartDeadline:
    """The hang check of a gang that has not started yet: from process start until the watchdog runs.

    The heartbeat watchdog needs the process group, the model and the store; a gang stuck before
    them (a rendezvous or process-group set-up that never completes, e.g. gloo's
    ``connectFullMesh`` waiting for a peer that is gone) would otherwise wait for whatever timeout
    torch applies there, or forever. This timer thread, armed first thing in the trainer, ends the
    process with verdict ``hang`` (``NoProgress``, phase ``init``) when :meth:`cancel` was not called
    within ``seconds`` (``hang_warmup_s``). It names no rank and no node: every rank of a gang stuck in
    set-up waits in the same place, and which peer is missing is not this rank's to know, so nothing is
    quarantined for it.

    Args:
        seconds: the allowance (``HealthSettings.hang_warmup_s``).
        rank: this process's global rank as torchrun set it (``RANK``; for the message).
        node: this rank's node name.
        on_expire: called with the verdict dict (as :class:`Watchdog`'s ``on_hang``) instead of ending the process.
    """

    def __init__(self, seconds: float, rank: int, node: str, on_expire: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.seconds, self.rank, self.node = seconds, rank, node
        self.on_expire = on_expire or self._end_process
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"railtrain-health-start-{rank}", daemon=True)
        self.started = time.monotonic()

    def start(self) -> "StartDeadline":
        """Arm the timer (returns ``self``)."""
        self.started = time.monotonic()
        self._thread.start()
        return self

    def cancel(self) -> None:
        """The gang has started (the watchdog runs now) or the process is ending: disarm (idempotent)."""
        self._done.set()

    def verdict(self) -> dict[str, Any]:
        """The hang verdict of a gang that did not start in time (the dict :class:`Watchdog` gives ``on_hang``)."""
        return {  # the same on every rank (no rank's own clock or name in it), like the watchdog's shared verdict
            "reason": contract.REASON_NO_PROGRESS,
            "message": f"the gang did not finish starting (process group, model, checkpoint load) within {self.seconds:.1f}s "
            "(hang_warmup_s): it never reached its first step; no node is named (every rank waits in the same set-up)",
            "nodes": [], "ranks": [], "step": 0,
            "evidence": {"phase": "init", "deadline_s": round(self.seconds, 3)},
        }  # fmt: skip

    def _run(self) -> None:
        if not self._done.wait(self.seconds):
            self.on_expire(self.verdict())

    def _end_process(self, verdict: dict[str, Any]) -> None:
        end_with_hang_verdict(verdict, self.rank, f"health: verdict=hang rank {self.rank} on node {self.node or '?'}: {verdict['message']}")


def end_with_hang_verdict(verdict: dict[str, Any], rank: int, line: str, linger_s: float = 0.0) -> None:
    """End this process with verdict ``hang``: ``line`` on stderr, every thread's stack, the termination message, exit 1.

    ``verdict`` is the dict :class:`Watchdog` and :class:`StartDeadline` build (reason, message, nodes, ranks,
    step, evidence); ``linger_s`` seconds pass before the exit. Never returns (``os._exit``: a hung
    collective would block a normal interpreter exit).
    """
    say(line)
    dump_stacks(rank)
    contract.write_termination_message(
        contract.VERDICT_HANG, verdict["reason"], verdict["message"],
        nodes=verdict["nodes"], ranks=verdict["ranks"], step=verdict["step"], evidence=verdict["evidence"],
    )  # fmt: skip
    sys.stdout.flush()
    if linger_s > 0:
        time.sleep(linger_s)
    os._exit(contract.EXIT_FAILED)


def arm_start_deadline(settings: contract.HealthSettings, enabled: bool, environ: Mapping[str, str], node: str) -> StartDeadline | None:
    """Arm this process's :class:`StartDeadline`, then apply the ``kind=init`` hang fault, if any
    (:func:`~railtrain.trainer.health.faults.hang_before_init`).

    Returns ``None`` (nothing armed) when the health checks are off or the process was not launched by
    torchrun: a process alone has no gang set-up to wait for (and an in-process caller, such as a test,
    must not be ended by a timer it never cancels).

    Args:
        settings: the job's health settings (``hang_warmup_s``); enabled: whether the health checks run.
        environ: the process environment (torchrun's ``RANK``, the fault variables).
        node: this rank's node name.

    Raises:
        ContractError: a malformed fault variable (named).
    """
    rank = int(environ.get("RANK", "0") or 0)
    deadline = StartDeadline(settings.hang_warmup_s, rank, node).start() if enabled and dist.is_torchelastic_launched() else None
    hang_before_init(contract.read_faults(environ), rank)
    return deadline
