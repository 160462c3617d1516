"""The gang's in-place restart coordinator: one small HTTP store on one supervisor (node rank 0's at first) that every rank's supervisor reaches.

Why a store of its own, not torchrun's: torchrun's c10d/static store lives in
node rank 0's *agent*, which is one of the processes an in-place restart ends;
and torchelastic counts restarts per agent, so a node that rejoins fast resets
its own count (pytorch/pytorch#108158, #147064) and ranks can disagree on the
attempt after a partial restart (#135712). This store lives in the supervisor,
which outlives every attempt of its gang, and it alone numbers the attempts:
a supervisor asks it which attempt to start and never counts by itself, and a
report that names any other attempt than the current one is dropped, so
nothing from attempt N is read in attempt N+1.

**Losing the coordinator's pod.** The store starts on node rank 0's supervisor, but losing that pod does not lose
it: every supervisor serves its own copy of the last state it read (``GET /ledger``; the state comes with every
heartbeat, so the copy is at most a poll old), and the state names the **succession**, the live ranks'
supervisors in rank order. When the coordinator stays silent for :data:`LOST_SECONDS`, every supervisor and spare
turns to the first of them; that supervisor, finding itself named, starts a coordinator from its copy
(:meth:`Coordinator.successor`): the attempt, the ledger and the job-wide counters, the decisions, the holders.
The old host's rank is then lost like any other (its rank can go to a hot spare), ranks that had reported send
their reports again, and spares register again (the new coordinator waits up to :data:`LOST_SECONDS` for them
before it restarts the gang for want of one). If the successor is silent too, the next one is tried. A network
partition that leaves the old and the new coordinator each heard by some ranks is not handled: both would decide.

The protocol (JSON over HTTP, :mod:`http.server` in a thread):

* ``GET /state?rank=R&node=N&addr=H:P``: ``{"attempt", "failed", "decisions": {attempt: decision}, "ledger",
  "final", "holders": {rank: spare}, "host", "succession", "addrs", "counters", "master", "spares", "nodes"}``; a
  rank's supervisor asks every :data:`railtrain.crds.supervisor.POLL_SECONDS`, which is its heartbeat (``addr``:
  where its own server answers, for the succession);
* ``GET /state?spare=S&node=N&addr=H:P``: the same plus ``"assigned"``: a hot spare's heartbeat, and the node rank
  it is to take (null while it waits);
* ``GET /ledger``: the state without a heartbeat (the operator reads it); a supervisor that does not host the
  coordinator answers its copy, marked ``"copy": true``, and answers ``/state`` and ``/report`` with 503;
* ``POST /report``: ``{"attempt", "rank", "code", "message", "finished", "stopped", "node"}``: how one rank's
  workers of that attempt ended (``stopped``: by its supervisor, because a peer failed); or ``{"attempt", "rank",
  "leaving": true}``: its supervisor was told to stop (SIGTERM: its pod deleted or evicted, e.g. by a drain), so the
  rank is lost at once, without the :data:`LOST_SECONDS` of silence, and its later asks are no heartbeat.

**Lost ranks and hot spares.** A rank whose supervisor, once heard, stays silent for :data:`LOST_SECONDS` is
lost (its pod or node is gone): the attempt fails, so the others stop their workers at once rather than wait
for a collective's timeout, and the attempt is decided without waiting for the lost rank's report. When every
rank not heard from is lost, :func:`railtrain.crds.inplace.decide_spare` decides: with as many spares alive
(heard within :data:`LOST_SECONDS`) as ranks lost, each lost rank is given to a spare (``holders``) and attempt N+1
opens in place; the spare's supervisor starts the command as that rank. When the spare takes node rank 0, whose
torchrun agent hosts torch's static rendezvous store, the state's ``master`` names the spare's host, and every
supervisor starts the next attempts with it as ``PET_MASTER_ADDR``.

Once a rank of the current attempt failed, the others stop their workers and
report; when every rank reported (or :data:`SETTLE_SECONDS` passed), the
coordinator decides once with :func:`railtrain.crds.inplace.decide_path`
(the one rule, the job-wide counters the pods were created with plus this
gang's in-place restarts) and publishes the decision: an in-place restart
opens attempt N+1; anything else is final and every supervisor exits.

May import: the standard library and ``railtrain.crds`` only (the pod side runs without torch).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from railtrain.crds import contract, inplace, recovery

SETTLE_SECONDS = 30.0
"""After the first failure of an attempt, how long the coordinator waits for every rank's report (their supervisors
stop their workers with SIGTERM, then SIGKILL after a grace); a rank still silent then is lost: the gang restarts."""
LOST_SECONDS = 5.0
"""How long a supervisor once heard (it asks every 0.2 s) may stay silent before its rank counts as lost."""
STALL_SECONDS = 1.0
"""The longest gap between two of the host's :meth:`Coordinator.step` calls (made every 0.2 s) that counts as the
coordinator listening; the excess of a longer gap is a stall of the host's own (its process starved of CPU, or its
loop blocked): nobody's silence is counted over it. The kind stop 44's run named under load (a supervisor taken for
lost, docs/testing.md): a coordinator that had not run for seconds would count that time as every rank's silence."""
DONE = "done"
"""The path of a gang whose every rank succeeded."""


def rank_failure(report: dict[str, Any]) -> recovery.Failure | None:
    """One rank's report as the one rule's evidence, or None for a rank that succeeded or was only stopped.

    Args:
        report: a ``POST /report`` body: ``code`` (the worker's exit status; 128+N for signal N), ``message``
            (its termination message), ``finished`` (``time.time()``), ``stopped``, ``rank``, ``node``.
    """
    code, text = int(report.get("code", 1)), report.get("message") or ""
    v = contract.parse_termination_message(text)
    if code == 0 or (report.get("stopped") and v is None):
        return None
    base = dict(rank=int(report["rank"]), code=code, node=str(report.get("node") or ""), signalled=code > 128, finished=f"{float(report.get('finished') or 0):017.6f}")
    if v:
        return recovery.Failure(verdict=v["verdict"], reason=v["reason"], message=v["message"], nodes=tuple(v["nodes"]), reported=True, **base)
    return recovery.unreported(message="", **base)


@dataclass
class Coordinator:
    """The state of one gang's attempts (thread-safe) and its decisions.

    Args:
        nnodes: ranks in the gang; run_policy: the job's ``RunPolicy``; counters: the job-wide counters when the
            gang's pods were created; ledger: this gang's in-place ledger (its ``restarts`` set).
    """

    nnodes: int
    run_policy: Any
    counters: recovery.Counters
    ledger: inplace.Ledger
    settle_seconds: float = SETTLE_SECONDS
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    decisions: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed_at: float | None = None
    final: bool = False
    seen_final: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    lost_seconds: float = LOST_SECONDS
    seen: dict[int, float] = field(default_factory=dict)
    """Node rank → ``time.monotonic()`` its supervisor last asked."""
    nodes: dict[int, str] = field(default_factory=dict)
    """Node rank → the node its supervisor runs on (as it says)."""
    spares: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Waiting spare → ``{"node", "seen"}``."""
    holders: dict[int, str] = field(default_factory=dict)
    """Node rank → the spare that took it over."""
    why_taken: dict[int, str] = field(default_factory=dict)
    """Node rank → why a spare took it (told to the rank's old supervisor with ``"replaced"``)."""
    host: int = 0
    """The node rank whose supervisor runs this coordinator."""
    addrs: dict[int, str] = field(default_factory=dict)
    """Node rank → ``host:port`` of its supervisor's own server (as it says), for the succession."""
    master: str = ""
    """The host of torch's rendezvous store (node rank 0's torchrun agent) once a spare took node rank 0; "": the
    pods' own ``PET_MASTER_ADDR``."""
    left: set[int] = field(default_factory=set)
    """Node ranks whose supervisor said it is leaving (``"leaving"`` report): lost at once, their asks no heartbeat."""
    spares_until: float | None = None
    """A successor's deadline (``time.monotonic()``) for the spares to register again before it decides a loss
    without them; None: no wait."""
    stall_seconds: float | None = None
    """The longest gap between two :meth:`step` calls that counts as listening (:data:`STALL_SECONDS` where a
    supervisor steps it every 0.2 s); None: every gap does (a caller that steps at times of its own, as the pure
    tests do)."""
    stepped: float | None = None
    """``time.monotonic()`` of the last :meth:`step` (None: none yet); the excess of the gap to the next over
    :attr:`stall_seconds` is forgiven (:meth:`forgive_stall`)."""
    opened: float | None = None
    """``time.monotonic()`` when the current attempt was opened by an in-place restart or a takeover (None: the gang's
    first attempt); an attempt that ran :data:`~railtrain.crds.inplace.TRAINED_SECONDS` before it failed ends the
    streak of in-place restarts (:meth:`_decide`)."""

    def state(self, rank: int | None = None, spare: str | None = None, node: str = "", now: float | None = None, who: str = "", addr: str = "") -> dict[str, Any]:
        """What ``GET /state`` answers, and the asker's heartbeat.

        Args:
            rank: the node rank whose supervisor asks (to know when every rank saw the final decision, and when one falls silent).
            spare: a waiting spare's name (it asks until it is given a rank: ``"assigned"``).
            node: the asker's node name; now: ``time.monotonic()`` (tests pass their own).
            who: a rank's supervisor that started as a spare says which ("": it did not). A rank given to a spare
                answers anyone else ``"replaced": true`` (a supervisor thought lost that comes back must not run
                that rank beside its spare) and is not their heartbeat.
            addr: ``host:port`` where the asker's own server answers ("": unknown; it is then left out of the
                succession).
        """
        now = time.monotonic() if now is None else now
        with self.lock:
            if rank is not None and rank in self.holders and who != self.holders[rank]:
                return {"attempt": self.ledger.attempt, "failed": True, "final": self.final, "replaced": True, "decisions": {}, "ledger": self.ledger.to_json(),
                        "holders": {str(r): s for r, s in sorted(self.holders.items())}, "why": self.why_taken.get(rank, "")}  # fmt: skip
            if rank is not None and rank in self.left:
                return self._view(now)  # a leaving supervisor waits to see its rank taken: no heartbeat
            if rank is not None:
                self.seen[rank] = now
                if node:
                    self.nodes[rank] = node
                if addr:
                    self.addrs[rank] = addr
                if self.final:
                    self.seen_final.add(rank)
            assigned = next((r for r, s in self.holders.items() if s == spare), None) if spare is not None else None
            if spare is not None and assigned is None and not self.final:
                self.spares[spare] = {"node": node or self.spares.get(spare, {}).get("node", ""), "seen": now, "addr": addr}
            out = self._view(now)
            if spare is not None:
                out["assigned"] = assigned
            return out

    def view(self, now: float | None = None) -> dict[str, Any]:
        """What ``GET /ledger`` answers: the state as :meth:`state` gives it, without anyone's heartbeat."""
        with self.lock:
            return self._view(time.monotonic() if now is None else now)

    def _view(self, now: float) -> dict[str, Any]:
        alive = [r for r in sorted(self.addrs) if r != self.host and 0 <= r < self.nnodes and now - self.seen.get(r, float("-inf")) <= self.lost_seconds]
        return {"attempt": self.ledger.attempt, "failed": self.failed_at is not None, "decisions": {str(k): v for k, v in self.decisions.items()},
                "ledger": self.ledger.to_json(), "final": self.final, "holders": {str(r): s for r, s in sorted(self.holders.items())},
                "host": self.host, "succession": [self.addrs[r] for r in alive], "addrs": {str(r): a for r, a in sorted(self.addrs.items())},
                "counters": self.counters.spent(), "opened_age": None if self.opened is None else round(max(0.0, now - self.opened), 3),
                "master": self.master, "nodes": {str(r): n for r, n in sorted(self.nodes.items())},
                "spares": {name: {"node": v.get("node", ""), "addr": v.get("addr", ""), "age": round(max(0.0, now - float(v["seen"])), 3)} for name, v in self.spares.items()}}  # fmt: skip

    @classmethod
    def successor(cls, copy: dict[str, Any], nnodes: int, run_policy: Any, host: int, heard: float, now: float | None = None,
                  lost_seconds: float = LOST_SECONDS, stall_seconds: float | None = None) -> "Coordinator":  # fmt: skip
        """The coordinator a supervisor starts when the one it followed fell silent and the succession names it.

        Args:
            copy: the last state it read from the old coordinator (``GET /state``'s answer).
            nnodes: ranks in the gang; run_policy: the job's ``RunPolicy``.
            host: this supervisor's node rank; heard: ``time.monotonic()`` when ``copy`` was read (the old host was
                last heard then: its rank is lost once :data:`LOST_SECONDS` passed since).
            now: ``time.monotonic()`` (tests pass their own).
            lost_seconds: the job's lost-rank silence (:func:`railtrain.crds.supervisor.lost_after`).
            stall_seconds: :attr:`stall_seconds` (a supervisor passes :data:`STALL_SECONDS`).

        Returns:
            A coordinator at the copy's attempt, ledger, job-wide counters, decisions and holders; every other rank
            counts as heard now (a rank lost with the old host goes silent and is lost in its turn), and the
            spares the copy names must register again within :data:`LOST_SECONDS`.

        Raises:
            ValueError: the copy holds no ledger.
        """
        now = time.monotonic() if now is None else now
        ledger = inplace.Ledger.from_json(copy.get("ledger"))
        if ledger is None:
            raise ValueError("the coordinator's copy holds no ledger")
        counters = recovery.Counters.from_status(copy.get("counters") or {})
        old = int(copy.get("host", 0))
        c = cls(nnodes, run_policy, counters, ledger, host=host, master=str(copy.get("master") or ""), lost_seconds=lost_seconds,
                stall_seconds=stall_seconds)  # fmt: skip
        c.decisions = {int(k): v for k, v in (copy.get("decisions") or {}).items() if str(k).lstrip("-").isdigit()}
        c.final = bool(copy.get("final"))
        c.holders = {int(r): str(s) for r, s in (copy.get("holders") or {}).items() if str(r).isdigit()}
        c.addrs = {int(r): str(a) for r, a in (copy.get("addrs") or {}).items() if str(r).isdigit() and int(r) != old}
        c.nodes = {int(r): str(n) for r, n in (copy.get("nodes") or {}).items() if str(r).isdigit()}
        c.seen = {r: (heard if r == old else now) for r in range(nnodes)}
        if copy.get("failed") and not c.final:
            c.failed_at = now  # the ranks that had reported report again to this coordinator
        c.spares_until = now + c.lost_seconds if copy.get("spares") else None  # no spare was waiting: nothing to wait for
        age = copy.get("opened_age")
        c.opened = now - float(age) if isinstance(age, (int, float)) and not isinstance(age, bool) else None
        return c

    def lost(self, now: float) -> dict[int, str]:
        """Node ranks of the current attempt that have not reported and whose supervisor, once heard, stayed silent
        :attr:`lost_seconds` (node rank → its node's name); call under the lock."""
        return {r: self.nodes.get(r, "") for r, t in self.seen.items() if r not in self.reports and (r in self.left or now - t > self.lost_seconds) and 0 <= r < self.nnodes}

    def ready_spares(self, now: float) -> list[str]:
        """Spares that asked within :attr:`lost_seconds`, oldest first; call under the lock."""
        return [s for s, v in self.spares.items() if now - float(v["seen"]) <= self.lost_seconds]

    def report(self, body: dict[str, Any]) -> bool:
        """Record one rank's report; False (dropped) when it names another attempt than the current one. A
        ``"leaving"`` report makes the rank lost at once (unless it already reported or was taken by a spare)."""
        with self.lock:
            if self.final or int(body.get("attempt", -1)) != self.ledger.attempt or not 0 <= int(body.get("rank", -1)) < self.nnodes:
                return False
            if body.get("leaving"):
                rank = int(body["rank"])
                if rank in self.reports or rank in self.holders:
                    return False
                self.left.add(rank)
                self.seen.setdefault(rank, time.monotonic())
                self.failed_at = self.failed_at or time.monotonic()
                return True
            self.reports[int(body["rank"])] = dict(body)
            if int(body.get("code", 1)) != 0 and self.failed_at is None:
                self.failed_at = time.monotonic()
            return True

    def step(self, now: float | None = None) -> dict[str, Any] | None:
        """Decide the current attempt when it is time (every rank reported after a failure, or the settle time passed,
        or every rank succeeded); returns the decision made, else None."""
        now = time.monotonic() if now is None else now
        with self.lock:
            self.forgive_stall(now)
            if self.final:
                return None
            attempt, reports = self.ledger.attempt, dict(self.reports)
            lost = self.lost(now)
            if lost and self.failed_at is None:
                self.failed_at = now  # the others stop their workers now, not at a collective's timeout
            if self.failed_at is None:
                if len(reports) == self.nnodes and all(int(r.get("code", 1)) == 0 for r in reports.values()):
                    return self._publish(attempt, {"path": DONE, "message": "every rank succeeded"}, final=True)
                return None
            if len(reports) + len(lost) < self.nnodes and now - self.failed_at < self.settle_seconds:
                return None
            silent = set(range(self.nnodes)) - set(reports)
            if silent and silent == set(lost):
                if len(self.ready_spares(now)) < len(lost) and self.spares_until is not None and now < self.spares_until:
                    return None  # a successor: the spares the old coordinator knew have not all registered again yet
                return self._decide_lost(attempt, lost, now)
            return self._decide(attempt, reports, now)

    def forgive_stall(self, now: float) -> float:
        """Count the excess of the gap since the last :meth:`step` over :attr:`stall_seconds` as a stall of the
        coordinator's own, not as anyone's silence: every rank's and waiting spare's last heartbeat, the first failure's
        settle clock and a successor's wait for its spares move that much later (never past ``now``). Only the excess is
        forgiven, so a host whose steps are merely slow (each gap a little over the limit) still finds a lost rank, a
        little later. Call under the lock, with ``time.monotonic()``.

        Returns:
            The seconds forgiven (0.0 when the gap was within :attr:`stall_seconds`, at the first step, or when
            :attr:`stall_seconds` is None).
        """
        last, self.stepped = self.stepped, now
        excess = 0.0 if last is None or self.stall_seconds is None else now - last - self.stall_seconds
        if excess <= 0:
            return 0.0
        self.seen = {r: min(now, t + excess) for r, t in self.seen.items()}
        for spare in self.spares.values():
            spare["seen"] = min(now, float(spare["seen"]) + excess)
        if self.failed_at is not None:
            self.failed_at = min(now, self.failed_at + excess)
        if self.spares_until is not None:
            self.spares_until += excess
        return excess

    def _decide_lost(self, attempt: int, lost: dict[int, str], now: float) -> dict[str, Any]:
        """Every rank not heard from is lost: spares take their places where :func:`~railtrain.crds.inplace.decide_spare` says."""
        ready = self.ready_spares(now)
        d = inplace.decide_spare(self.run_policy, self.counters, lost, len(ready), frozenset(self.left))
        record = {"path": d.path, "action": d.action, "verdict": d.verdict, "reason": d.reason, "message": d.message, "rank": min(lost), "missing": sorted(lost)}
        if d.path != inplace.PATH_SPARE:
            return self._publish(attempt, record, final=True)
        taken = self._give(sorted(lost), ready, now, "it was silent long enough to count as lost")
        self.counters, self.ledger = d.counters, self.ledger.after_spares(d, len(taken))
        return self._publish(attempt, record | {"next": self.ledger.attempt, "takeovers": {str(r): s for r, s in taken.items()}, "master": self.master}, final=False)

    def _give(self, ranks: list[int], ready: list[str], now: float, why: str) -> dict[int, str]:
        """Give ``ranks`` to the ``ready`` spares in order (node rank → spare) for reason ``why`` (a clause) and open
        the next attempt's reports."""
        taken = dict(zip(ranks, ready))
        for rank, spare in taken.items():
            self.holders[rank] = spare
            self.why_taken[rank] = why
            addr = str(self.spares.pop(spare, {}).get("addr") or "")
            if addr:
                self.addrs[rank] = addr
            else:
                self.addrs.pop(rank, None)
            self.left.discard(rank)
            if rank == 0:  # node rank 0's torchrun agent hosts torch's rendezvous store: the spare's host from now on
                self.master = addr.rpartition(":")[0].strip("[]") if addr else ""
            self.seen[rank] = now  # the spare's supervisor asks as this rank from now on
        self.reports, self.failed_at, self.opened = {}, None, now
        return taken

    def _decide(self, attempt: int, reports: dict[int, dict[str, Any]], now: float) -> dict[str, Any]:
        failures = tuple(f for r in reports.values() if (f := rank_failure(r)) is not None)
        if not failures:  # only stopped ranks reported: the failed one's report was lost
            failures = (recovery.unreported(rank=min(set(range(self.nnodes)) - set(reports), default=0), code=contract.EXIT_FAILED),)
        nodes = {int(r["rank"]): str(r.get("node") or "") for r in reports.values()}
        evidence = recovery.GangFailure(failures, nodes, None)
        missing = sorted(set(range(self.nnodes)) - set(reports))
        if self.ledger.streak and self.opened is not None and now - self.opened >= inplace.TRAINED_SECONDS:
            self.ledger = replace(self.ledger, streak=0)  # the attempt trained: this failure is a new fault, not the restart failing again
        streak = None if missing else self.ledger.streak  # a silent rank's supervisor is gone: only the gang can restart it
        d = inplace.decide_path(evidence, self.run_policy, self.counters, datetime.now(timezone.utc), streak)
        record = {"path": d.path, "action": d.action, "verdict": d.verdict, "reason": d.reason, "message": d.message, "rank": d.blamed.rank}
        if missing:
            record["missing"] = missing
        if d.path == inplace.PATH_IN_PLACE:
            self.counters, self.ledger = d.counters, self.ledger.after(d)
            self.reports, self.failed_at, self.opened = {}, None, now
            return self._publish(attempt, record | {"next": self.ledger.attempt}, final=False)
        ready = self.ready_spares(now)
        spared = inplace.decide_verdict_spare(d, self.counters, nodes, len(ready)) if not missing and ready else None
        if spared is not None:  # the verdict's node(s) must be left: spares take their ranks, no gang restart
            d, moving = spared
            taken = self._give(sorted(moving), ready, now, f"its node must be left ({d.verdict} verdict of rank {d.blamed.rank}, {d.blamed.reason})")
            self.counters, self.ledger = d.counters, self.ledger.after_verdict_spares(d, len(taken), inplace.left_entries(d, moving))
            record |= {"path": d.path, "message": d.message}
            return self._publish(attempt, record | {"next": self.ledger.attempt, "takeovers": {str(r): s for r, s in taken.items()}, "master": self.master,
                                                    "leave": sorted(set(moving.values()))}, final=False)  # fmt: skip
        return self._publish(attempt, record, final=True)

    def _publish(self, attempt: int, record: dict[str, Any], final: bool) -> dict[str, Any]:
        self.decisions = {k: v for k, v in self.decisions.items() if k >= attempt - 2} | {attempt: record}
        self.final = final
        return record

    def everyone_saw_the_end(self, now: float | None = None) -> bool:
        """Whether every other rank fetched the final decision (the host's supervisor may leave then); a lost rank's
        supervisor (silent, or said it was leaving) will never ask, and is not waited for. ``now``: ``time.monotonic()``
        (tests pass their own)."""
        with self.lock:
            now = time.monotonic() if now is None else now
            return self.final and self.seen_final >= set(range(self.nnodes)) - {self.host} - set(self.lost(now)) - self.left


class NotHost(Exception):
    """A supervisor's server asked for what only the coordinator answers, while this supervisor does not host it."""


@dataclass
class Seat:
    """What one supervisor's own server answers: the coordinator's answers while this supervisor hosts it
    (:attr:`coordinator` set), else its copy of the last state it read (``GET /ledger`` only; ``/state`` and
    ``/report`` raise :class:`NotHost`, answered 503)."""

    coordinator: Coordinator | None = None
    copy: dict[str, Any] = field(default_factory=dict)

    def state(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`Coordinator.state`; raises :class:`NotHost` while this supervisor does not host the coordinator."""
        if self.coordinator is None:
            raise NotHost("this supervisor does not host the gang's coordinator")
        return self.coordinator.state(*args, **kwargs)

    def report(self, body: dict[str, Any]) -> bool:
        """:meth:`Coordinator.report`; raises :class:`NotHost` while this supervisor does not host the coordinator."""
        if self.coordinator is None:
            raise NotHost("this supervisor does not host the gang's coordinator")
        return self.coordinator.report(body)

    def view(self) -> dict[str, Any]:
        """The coordinator's :meth:`Coordinator.view`, or the copy (``"copy": true``; ``{}`` before the first read)."""
        return self.coordinator.view() if self.coordinator is not None else (self.copy | {"copy": True} if self.copy else {})


def serve(coordinator: Coordinator | Seat, port: int, host: str = "") -> ThreadingHTTPServer:
    """Serve ``coordinator`` (or a supervisor's :class:`Seat`) on ``host:port`` in a daemon thread; returns the server
    (``shutdown()`` to stop; ``server_port`` is the port bound, for ``port`` 0).

    Raises:
        OSError: the port cannot be bound.
    """

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: the trainer's output is the pod's log
            pass

        def _answer(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path, _, query = self.path.partition("?")
            if path not in ("/state", "/ledger"):
                return self._answer(404, {"error": "unknown path"})
            if path == "/ledger":
                return self._answer(200, coordinator.view())
            params = dict(urllib.parse.parse_qsl(query))
            rank = int(params["rank"]) if params.get("rank", "").isdigit() else None
            try:
                self._answer(200, coordinator.state(rank, params.get("spare") or None, params.get("node", ""), who=params.get("who", ""), addr=params.get("addr", "")))
            except NotHost as err:
                self._answer(503, {"error": str(err)})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/report":
                return self._answer(404, {"error": "unknown path"})
            try:
                body = json.loads(self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 1 << 16)) or b"{}")
            except ValueError:
                return self._answer(400, {"error": "not JSON"})
            try:
                self._answer(200, {"accepted": isinstance(body, dict) and coordinator.report(body)})
            except NotHost as err:
                self._answer(503, {"error": str(err)})

    server = AnsweringServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="railtrain-coordinator", daemon=True).start()
    return server


class AnsweringServer(ThreadingHTTPServer):
    """A threading HTTP server (daemon handler threads) that counts the requests it has accepted and not yet answered,
    so that its process can wait for them before it exits (:meth:`wait_answered`).

    Why: a host's supervisor leaves once every rank has read the final decision (:meth:`Coordinator.everyone_saw_the_end`),
    and a rank counts as having read it when its request reached :meth:`Coordinator.state`, before the answer is
    written. A host that exited at that moment cut the answer off: the rank never saw the end, took the host for lost,
    hosted the coordinator from its copy and gave the finished rank to a spare (stop 48's runs of the lost-coordinator
    test, tests/cli/test_local_spares.py)."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.open_requests = 0
        """Requests accepted and not yet answered (their handler thread has not ended)."""
        self._answered = threading.Condition()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._answered:  # counted before the handler's thread starts: no window where it is not
            self.open_requests += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done()

    def _done(self) -> None:
        with self._answered:
            self.open_requests -= 1
            self._answered.notify_all()

    def wait_answered(self, timeout: float) -> bool:
        """Block until every accepted request has been answered (its handler ended), at most ``timeout`` seconds;
        whether none is left open."""
        with self._answered:
            return self._answered.wait_for(lambda: self.open_requests <= 0, timeout)
