"""``python -m railtrain.crds.supervisor -- COMMAND...``: a gang pod's entry when ``spec.runPolicy.restartInPlace`` is true.

It runs the training command (torchrun and its workers) as a child, and when
the command of any rank ends with a failure it asks the one rule, through the
gang's coordinator on node rank 0 (:mod:`railtrain.crds.coordinator`), whether
the attempt restarts in place (:func:`railtrain.crds.inplace.decide_path`):

* **in place**: every rank's supervisor has stopped its workers (SIGTERM to
  their process group, SIGKILL after :data:`GRACE_SECONDS`) and starts the
  command again for attempt N+1 in the same pod: no pod deleted or created,
  node-local checkpoint tiers where they are. Each attempt gets a fresh
  termination-message file and a fresh rendezvous id (``PET_RDZV_ID``
  ``<job>-<restarts>-<attempt>``), and the workers are told the attempt
  (:data:`ENV_ATTEMPT`); fault-injection variables the failed attempt met are
  dropped (:func:`railtrain.crds.faults.spent_faults`).
* **otherwise** (a node out, a second in-place failure in a row, the budget
  spent, every rank succeeded): the supervisor exits with its command's status
  and writes the pod's termination message: its last attempt's verdict plus
  the gang's in-place ledger (:data:`railtrain.crds.inplace.LEDGER_KEY`), so the
  operator counts every in-place restart in the job-wide budget before it
  decides the gang restart (or the failure) itself.

Trainer pods hold no API token: the operator learns about in-place restarts
from what the pods expose, the coordinator's ``GET /ledger`` (every supervisor
serves one on :data:`ENV_SUPERVISOR_PORT`: the coordinator's own on the
supervisor that hosts it, node rank 0's at first, a copy of its last state on
the others) and the termination messages. When the coordinator falls silent
the supervisors follow its succession (:class:`Link`): the first live rank's
supervisor in rank order starts a coordinator from its copy.

What it reads (besides the pod contract, :mod:`railtrain.crds.contract`):
:data:`ENV_RUN_POLICY` (``spec.runPolicy`` as JSON) and :data:`ENV_SPENT`
(``status.jobRestarts``/``infrastructureRestarts`` when the pod was created).

May import: the standard library and ``railtrain.crds`` only (it starts before torch is imported, and never imports it).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from railtrain.crds import contract, inplace, recovery
from railtrain.crds.faults import FAULT_VARIABLES, spent_faults
from railtrain.crds.process import say

ENV_ATTEMPT = "RAILTRAIN_ATTEMPT"
"""The workers' attempt within their gang (0, then 1 after the first in-place restart ...); every rank agrees on it."""
ENV_SUPERVISOR_PORT = "RAILTRAIN_SUPERVISOR_PORT"
"""The port of every supervisor's own server: the coordinator's on node rank 0 (at
:data:`railtrain.crds.contract.ENV_RDZV_ADDR`), a copy of its state on the others (a local run, where every node is
127.0.0.1, binds the others on free ports)."""
ENV_POD_IP = "RAILTRAIN_POD_IP"
"""Where this supervisor's server is reached (optional; else the address the pod's hostname resolves to, or
127.0.0.1 when the coordinator is on 127.0.0.1): what the succession names."""
ENV_RUN_POLICY = "RAILTRAIN_RUN_POLICY"
"""``spec.runPolicy`` as JSON (camelCase): the bounds and the failure policy the one rule applies."""
ENV_SPENT = "RAILTRAIN_RESTARTS_SPENT"
"""What the job had spent when the pod was created, as :meth:`railtrain.crds.recovery.Counters.spent` writes it:
``{"jobRestarts": J, "infrastructureRestarts": I, "suspects", "quarantines", "avoidNodes", "nodeFailures"}``, so a
decision in the pods sees the job's history as the operator's would (e.g. ``failurePolicy.maxQuarantinesPerHour``)."""
ENV_SPARE = "RAILTRAIN_SPARE"
"""Set on a hot spare's pod (``spec.spares``): the spare's name. Its supervisor waits outside the world until the
coordinator gives it a lost node's rank (:class:`Spare`)."""
ENV_SPARE_WARMUP = "RAILTRAIN_SPARE_WARMUP"
"""Modules a waiting spare imports once in a throwaway process, comma-separated (default ``torch``; empty: none), so
that the files the workers load are in the page cache when it takes a rank."""
NODE_RANK_KEY = "nodeRank"
"""The termination-message key a supervisor that started as a spare adds: the node rank it took."""
ENV_RDZV_ID = "PET_RDZV_ID"
"""torchrun's ``--rdzv-id``, set per attempt."""
DEFAULT_SUPERVISOR_PORT = 29510
GRACE_SECONDS = 10.0
"""SIGTERM → SIGKILL for a stopped attempt's workers (a pod's terminationGracePeriodSeconds is 30 s by default)."""
PEER_STOP_GRACE_SECONDS = 2.0
"""SIGTERM → SIGKILL for workers stopped because a peer's failed: they are usually blocked in a collective that can
never complete, where a SIGTERM does not reach Python until it times out, so the full :data:`GRACE_SECONDS` would
only delay the next attempt (measured in ``run --local``: 10 s of a 23 s in-place restart). A checkpoint save cut
short is skipped on resume: every tier's shards are checksummed (docs/checkpoints.md)."""
POLL_SECONDS = 0.2
"""How often a supervisor looks at its workers and the coordinator."""
LINGER_SECONDS = 25.0
"""A supervisor told to stop (SIGTERM: its pod deleted or evicted) while hot spares wait: how long it may stay, after
saying it is leaving, for a spare to take its rank and the operator to follow (the pod's grace period is 30 s by
default); it stays up to :data:`FOLLOW_SECONDS` past the takeover, so the operator's progress reader (every 5 s)
relabels the spare, and deletes this pod at once, while it still terminates: the rank never looks vanished."""
FOLLOW_SECONDS = 10.0
"""How long a leaving supervisor stays after the coordinator gave its rank to a spare (two of the operator's reads)."""
UNREACHABLE_SECONDS = 30.0
"""How long the coordinator may stay unreachable once reached (node rank 0 lost): then the supervisor exits."""
USAGE = "usage: python -m railtrain.crds.supervisor -- COMMAND [ARGS...]"
ENV_WARM = "RAILTRAIN_SUPERVISOR_WARM"
"""The warm launcher (:class:`WarmLauncher`): ``off`` turns it off (every attempt starts torchrun from nothing); a
number of seconds replaces :data:`WARM_AFTER_SECONDS`."""
WARM_AFTER_SECONDS = 10.0
"""How long an attempt runs before its supervisor starts the next attempt's warm launcher (after the attempt's own
start, so the launcher's import does not compete with it for the CPUs)."""


ENV_LOST = "RAILTRAIN_SUPERVISOR_LOST_SECONDS"
"""How long a supervisor (or the coordinator) may stay silent before it counts as lost, seconds, the same in every pod
of the job (set it in ``spec.env``): the coordinator then gives its rank to a hot spare, and the supervisors turn to
the coordinator's successor. Default :data:`~railtrain.crds.coordinator.LOST_SECONDS` (5); from
:data:`LOST_RANGE`. Lower: a lost node costs less; higher: a loaded node is less often taken for lost."""
LOST_RANGE = (1.0, 600.0)
"""The values :data:`ENV_LOST` may take (seconds, both ends included); the manifest check refuses others."""


def parse_lost(value: str) -> float:
    """:data:`ENV_LOST`'s value as seconds: a plain number (digits, an optional decimal part) within :data:`LOST_RANGE`.

    Raises:
        ValueError: anything else (the manifest check's rule, :func:`tunables_valid`, is this parser).
    """
    import re

    text = value.strip()
    if not re.match(_NUMBER, text) or not LOST_RANGE[0] <= float(text) <= LOST_RANGE[1]:
        raise ValueError(f"{ENV_LOST}={value!r}")
    return float(text)


def lost_after(environ: Mapping[str, str]) -> float:
    """The silence, in seconds, after which a supervisor counts as lost (:data:`ENV_LOST` through :func:`parse_lost`;
    the default when unset or refused, which the manifest check refuses before any pod exists)."""
    from railtrain.crds.coordinator import LOST_SECONDS

    try:
        return parse_lost(environ[ENV_LOST]) if environ.get(ENV_LOST, "").strip() else LOST_SECONDS
    except ValueError:
        return LOST_SECONDS


TUNABLE_MESSAGE = (
    f"spec.env {ENV_WARM} must be off or a number of seconds of 0 or more, and {ENV_LOST} a number of seconds from "
    f"{LOST_RANGE[0]:g} to {LOST_RANGE[1]:g} (the pod-side supervisor's warm launcher and its lost-rank silence)"
)
_NUMBER = r"^[0-9]+([.][0-9]+)?$"


def tunables_valid(spec: Any) -> bool:
    """The rule over a spec's ``env``: :data:`ENV_WARM` as :func:`parse_warm` and :data:`ENV_LOST` as
    :func:`parse_lost` read them (the pods' supervisors use the same parsers)."""
    for e in spec.env:
        try:
            if e.name == ENV_WARM:
                parse_warm(e.value or "")
            elif e.name == ENV_LOST:
                parse_lost(e.value or "")
        except ValueError:
            return False
    return True


def tunables_detail(spec: Any) -> str:
    """The values a refused spec gives the supervisor's variables."""
    return ", ".join(f"{e.name}={e.value!r}" for e in spec.env if e.name in (ENV_WARM, ENV_LOST))


def parse_warm(value: str) -> float | None:
    """:data:`ENV_WARM`'s value: ``off`` → None (never), empty → :data:`WARM_AFTER_SECONDS`, a plain number of seconds
    (digits, an optional decimal part) → that number.

    Raises:
        ValueError: anything else (the manifest check's rule, :func:`tunables_valid`, is this parser).
    """
    import re

    text = value.strip()
    if text == "off":
        return None
    if not text:
        return WARM_AFTER_SECONDS
    if not re.match(_NUMBER, text):
        raise ValueError(f"{ENV_WARM}={value!r}")
    return float(text)


def warm_after(environ: Mapping[str, str]) -> float | None:
    """Seconds an attempt runs before the next attempt's warm launcher starts (:data:`ENV_WARM` through
    :func:`parse_warm`; the default when refused, which the manifest check refuses before any pod exists); None: never."""
    try:
        return parse_warm(environ.get(ENV_WARM, ""))
    except ValueError:
        return WARM_AFTER_SECONDS


WARM_CODE = """
import json, os, sys
import torch.distributed.run as launcher
line = sys.stdin.readline()
if not line:
    sys.exit(0)
order = json.loads(line)
os.environ.clear()
os.environ.update(order["env"])
sys.argv = ["torchrun", *order["argv"]]
launcher.main()
"""
"""What a warm launcher runs: torchrun's module imported at once, then one attempt's arguments and environment read
from standard input, and torchrun's ``main`` run with them in this process (what ``python -m torch.distributed.run``
runs, minus the import)."""


def coordinator_url(environ: Mapping[str, str]) -> str:
    """``http://<rank 0's address>:<port>`` of the gang's coordinator."""
    host = environ.get(contract.ENV_RDZV_ADDR) or "127.0.0.1"
    return f"http://{host}:{environ.get(ENV_SUPERVISOR_PORT) or DEFAULT_SUPERVISOR_PORT}"


def _call(url: str, body: dict[str, Any] | None = None, timeout: float = 2.0) -> dict[str, Any]:
    """One request to the coordinator; its JSON answer.

    Raises:
        OSError: no answer, or an answer cut short: an HTTP-level failure (``http.client.HTTPException``, e.g.
            ``IncompleteRead`` when the connection closes after the headers, seen under load) is raised as a
            ``ConnectionError``, so every caller's "the coordinator did not answer, try again" covers it.
        ValueError: the answer is not JSON.
    """
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return json.loads(r.read())
    except http.client.HTTPException as err:
        raise ConnectionError(f"the coordinator at {url} answered incompletely: {err!r}") from err


def supervisor_env(run_policy: Any, status: Any = None) -> list[dict[str, str]]:
    """The supervisor's variables as a container's ``env`` items: ``run_policy`` (a :class:`~railtrain.crds.api.RunPolicy`)
    and what the job had spent of its restart budget (``status``: a :class:`~railtrain.crds.api.TrainingJobStatus` or None)."""
    spent = recovery.Counters.from_status(status.to_api() if status is not None else {}).spent()
    return [{"name": ENV_RUN_POLICY, "value": json.dumps(run_policy.to_api(), separators=(",", ":"))},
            {"name": ENV_SPENT, "value": json.dumps(spent, separators=(",", ":"))}]  # fmt: skip


def _run_policy(environ: Mapping[str, str]) -> Any:
    from railtrain.crds.api import RunPolicy  # pydantic: only where the decision is made

    return RunPolicy.model_validate(json.loads(environ.get(ENV_RUN_POLICY) or "{}"))


def start_coordinator(environ: Mapping[str, str]) -> Any:
    """Node rank 0: the coordinator for this gang, served on :data:`ENV_SUPERVISOR_PORT` (returns the Coordinator)."""
    from railtrain.crds.coordinator import STALL_SECONDS, Coordinator, serve

    counters = recovery.Counters.from_status(json.loads(environ.get(ENV_SPENT) or "{}"))
    c = Coordinator(int(environ.get(contract.ENV_NNODES) or 1), _run_policy(environ), counters, inplace.Ledger(restarts=int(environ.get(contract.ENV_RESTART_COUNT) or 0)),
                    lost_seconds=lost_after(environ), stall_seconds=STALL_SECONDS)  # fmt: skip
    c.server = serve(c, int(environ.get(ENV_SUPERVISOR_PORT) or DEFAULT_SUPERVISOR_PORT))
    return c


def own_host(environ: Mapping[str, str]) -> str:
    """The host others reach this supervisor's server at (:data:`ENV_POD_IP`; else 127.0.0.1 when the coordinator
    is on 127.0.0.1, a local run; else what this machine's hostname resolves to, the pod's IP in a pod)."""
    if environ.get(ENV_POD_IP):
        return environ[ENV_POD_IP]
    if (environ.get(contract.ENV_RDZV_ADDR) or "127.0.0.1") in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


def open_seat(environ: Mapping[str, str]) -> tuple[Any, str]:
    """A supervisor's own server, answering with a :class:`~railtrain.crds.coordinator.Seat`: its copy of the
    coordinator's state until it hosts the coordinator; returns ``(seat, "host:port")`` ("" when it could not be
    bound or its host is unknown: this supervisor is then left out of the succession)."""
    from railtrain.crds.coordinator import Seat, serve

    seat, host = Seat(), own_host(environ)
    port = int(environ.get(ENV_SUPERVISOR_PORT) or DEFAULT_SUPERVISOR_PORT)
    try:
        seat.server = serve(seat, 0 if host == "127.0.0.1" else port)  # every local node is 127.0.0.1: a free port each
    except OSError as err:
        say(f"railtrain supervisor: no server of its own ({err}); it cannot host the coordinator")
        return seat, ""
    if not host:
        return seat, ""
    return seat, f"[{host}]:{seat.server.server_port}" if ":" in host else f"{host}:{seat.server.server_port}"


class Link:
    """The way from one supervisor (or spare) to the gang's coordinator, and on to its successors.

    Every answer of ``GET /state`` is kept as this supervisor's copy (its server answers ``GET /ledger`` with it)
    and names the succession. When the coordinator has not answered for
    :data:`~railtrain.crds.coordinator.LOST_SECONDS`, the link turns to the first successor not yet tried; when
    that is this supervisor itself, ``promote(copy, heard)`` is called first to start a coordinator here.

    Args:
        url: ``http://host:port`` of the coordinator; addr: this supervisor's own ``host:port`` ("" none);
        seat: this supervisor's :class:`~railtrain.crds.coordinator.Seat`; promote: see above (None: never hosts).
        lost_seconds: the silence after which the coordinator counts as lost (:func:`lost_after`; default 5 s).
    """

    def __init__(self, url: str, addr: str = "", seat: Any = None, promote: Any = None, lost_seconds: float | None = None) -> None:
        from railtrain.crds.coordinator import LOST_SECONDS

        self.url, self.addr, self.seat, self.promote = url, addr, seat, promote
        self.lost_seconds = LOST_SECONDS if lost_seconds is None else lost_seconds
        self.heard = time.monotonic()
        self.copy: dict[str, Any] = {}
        self.copied = self.heard
        self.tried: set[str] = set()
        self.moves = 0
        """How many times the link turned to a successor."""

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request to the coordinator (``path`` with its query); its JSON answer.

        Raises:
            OSError: no answer (after which the link may have turned to a successor; the caller retries).
            ValueError: the answer is not JSON.
        """
        try:
            out = _call(f"{self.url}{path}", body)
        except (OSError, ValueError):
            self._fail_over()
            raise
        self.heard = time.monotonic()
        if path.startswith("/state") and "succession" in out:
            self.copy, self.copied = out, self.heard
            if self.seat is not None and self.seat.coordinator is None:
                self.seat.copy = out
        return out

    def _fail_over(self) -> None:
        now = time.monotonic()
        if now - self.heard <= self.lost_seconds:
            return
        self.tried.add(self.url)
        for addr in self.copy.get("succession") or []:
            url = f"http://{addr}"
            if url in self.tried:
                continue
            if addr == self.addr:
                if self.promote is None:
                    continue
                self.promote(self.copy, self.copied)
            say(f"railtrain supervisor: the gang's coordinator at {self.url} is silent; turning to {url}")
            self.url, self.heard = url, now
            self.moves += 1
            return


class Supervisor:
    """One rank's supervisor: runs ``command`` attempt after attempt as the coordinator decides.

    Args:
        command: the training command (argv).
        environ: the pod's environment.
        coordinator: node rank 0's own :class:`~railtrain.crds.coordinator.Coordinator` (it also steps it), else None.
        who: the spare this supervisor started as ("": a rank of its own).
        link: the spare's :class:`Link` (and its seat) to carry on with; None: a new one, with a server of its own.
    """

    def __init__(self, command: Sequence[str], environ: Mapping[str, str], coordinator: Any = None, who: str = "", link: Link | None = None) -> None:
        self.who = who
        """The spare this supervisor started as ("": a rank of its own)."""
        self.command, self.env = list(command), dict(environ)
        self.rank = int(environ.get(contract.ENV_NODE_RANK) or 0)
        self.coordinator = coordinator
        if link is None:
            seat, addr = (coordinator, "") if coordinator is not None else open_seat(environ)
            if coordinator is not None:
                host = own_host(environ)
                addr = f"{host}:{coordinator.server.server_port}" if host and hasattr(coordinator, "server") else ""
            link = Link(coordinator_url(environ), addr, seat if coordinator is None else None, lost_seconds=lost_after(environ))
        link.promote = self._promote
        self.link = link
        self.final_path = environ.get(contract.ENV_TERMINATION_MESSAGE_PATH) or contract.TERMINATION_MESSAGE_PATH
        self.dir = Path(tempfile.mkdtemp(prefix="railtrain-attempts-"))
        self.ledger = inplace.Ledger(restarts=int(environ.get(contract.ENV_RESTART_COUNT) or 0))
        self.wait_first = float(json.loads(environ.get(ENV_RUN_POLICY) or "{}").get("gangTimeoutSeconds", 300))
        self.proc: subprocess.Popen[bytes] | None = None
        self.warm: WarmLauncher | None = None
        """The next attempt's warm launcher (:class:`WarmLauncher`), once the current attempt has run a while."""

    def terminate(self, *_: Any) -> None:
        """SIGTERM to the supervisor (the pod deleted or evicted, ``run --local`` stopping a node): stop the workers,
        then leave. While hot spares wait, it first tells the coordinator it is leaving (its rank is lost at once) and
        stays until a spare took the rank (at most :data:`LINGER_SECONDS`), usually until the operator, following
        the takeover, deletes the pod at once. It leaves with 143 either way (never 0: a pod that exited 0 would
        count its rank as finished)."""
        leaving = self._say_leaving()
        if self.warm is not None:
            self.warm.drop()
        if self.proc is not None and self.proc.poll() is None:
            stop(self.proc, PEER_STOP_GRACE_SECONDS if leaving else GRACE_SECONDS)
        if leaving:
            self._linger()
        raise SystemExit(128 + signal.SIGTERM)

    def _say_leaving(self) -> bool:
        """Tell the coordinator this rank is leaving when a spare waits to take it; whether it was told."""
        state = self.link.copy
        if not state.get("spares") or state.get("final") or self.proc is None:
            return False
        try:
            if self.coordinator is not None:
                return bool(self.coordinator.report({"attempt": int(state.get("attempt", 0)), "rank": self.rank, "leaving": True}))
            return bool(self.link.call("/report", {"attempt": int(state.get("attempt", 0)), "rank": self.rank, "leaving": True}).get("accepted"))
        except (OSError, ValueError):
            return False

    def _linger(self) -> bool:
        """Wait for a spare to take this rank (then :data:`FOLLOW_SECONDS` more); whether one took it."""
        end, taken = time.monotonic() + LINGER_SECONDS, None
        query = urllib.parse.urlencode({"rank": self.rank, "who": self.who})
        while time.monotonic() < end and (taken is None or time.monotonic() < taken + FOLLOW_SECONDS):
            if self.coordinator is not None:
                self.coordinator.step()
            try:
                state = self.link.call(f"/state?{query}")
            except (OSError, ValueError):
                state = {}
            if taken is None and str(self.rank) in (state.get("holders") or {}):
                taken = time.monotonic()
                say(f"railtrain supervisor (rank {self.rank}): stopped; hot spare {state['holders'][str(self.rank)]} took this rank")
            if state.get("final"):
                break
            time.sleep(POLL_SECONDS)
        return taken is not None

    @property
    def url(self) -> str:
        """The coordinator this supervisor follows now."""
        return self.link.url

    def _promote(self, copy: dict[str, Any], heard: float) -> None:
        """The coordinator fell silent and the succession names this supervisor: host a coordinator from ``copy``."""
        from railtrain.crds.coordinator import STALL_SECONDS, Coordinator

        seat = self.link.seat
        c = Coordinator.successor(copy, int(self.env.get(contract.ENV_NNODES) or 1), _run_policy(self.env), self.rank, heard, lost_seconds=lost_after(self.env),
                                  stall_seconds=STALL_SECONDS)  # fmt: skip
        self.coordinator = c
        if seat is not None:
            seat.coordinator = c
        say(f"railtrain supervisor (rank {self.rank}): the gang's coordinator (node rank {copy.get('host', 0)}'s) is silent; "
            f"this supervisor hosts it from attempt {c.ledger.attempt} on" + (f" at {self.link.addr}" if self.link.addr else ""))  # fmt: skip

    def _state(self, deadline: float) -> dict[str, Any]:
        """The coordinator's state; raises TimeoutError once it stayed unreachable until ``deadline`` (monotonic;
        a turn to a successor moves it :data:`UNREACHABLE_SECONDS` on)."""
        moves = self.link.moves
        while True:
            if self.coordinator is not None:
                self.coordinator.step()
            try:
                state = self.link.call(f"/state?{self._ask()}")
                if state.get("replaced"):
                    raise Replaced(f"node rank {self.rank} was given to hot spare {(state.get('holders') or {}).get(str(self.rank), '?')}: "
                                   f"{state.get('why') or 'it was silent long enough to count as lost'}")  # fmt: skip
                self.ledger = inplace.Ledger.from_json(state.get("ledger")) or self.ledger
                return state
            except (OSError, ValueError):
                if self.link.moves != moves:
                    moves, deadline = self.link.moves, max(deadline, time.monotonic() + UNREACHABLE_SECONDS)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the gang's coordinator at {self.url} did not answer") from None
                time.sleep(POLL_SECONDS)

    def _ask(self) -> str:
        """The query of this rank's ``GET /state``, its heartbeat: rank, node, the spare it started as, its address."""
        return urllib.parse.urlencode({"rank": self.rank, "node": self.env.get(contract.ENV_NODE_NAME, ""), "who": self.who, "addr": self.link.addr})

    def _attempt_env(self, attempt: int, spent: set[str], message: Path) -> dict[str, str]:
        job = self.env.get(contract.ENV_JOB_NAME) or "job"
        env = {k: v for k, v in self.env.items() if k not in spent}
        master = str(self.link.copy.get("master") or (self.coordinator.master if self.coordinator is not None else ""))
        if master:  # a spare took node rank 0: torch's rendezvous store is on its host now
            env[contract.ENV_PET_MASTER_ADDR] = master
        return env | {ENV_ATTEMPT: str(attempt), ENV_RDZV_ID: f"{job}-{self.ledger.restarts}-{attempt}", contract.ENV_TERMINATION_MESSAGE_PATH: str(message)}

    def run(self) -> int:
        """Run attempts until the gang's decision is final; returns the exit status for the pod (0 when this rank
        was given to a spare meanwhile: this pod is out of the gang and nothing of it is to blame)."""
        try:
            return self._run()
        except Replaced as out:
            if self.warm is not None:
                self.warm.drop()
            if self.proc is not None and self.proc.poll() is None:
                stop(self.proc, PEER_STOP_GRACE_SECONDS)
            say(f"railtrain supervisor (rank {self.rank}): {out}; leaving")
            if self.coordinator is not None:  # it hosts the coordinator: the others read the takeover from here first
                end = time.monotonic() + FOLLOW_SECONDS
                while time.monotonic() < end and not self.coordinator.final:
                    self.coordinator.step()
                    time.sleep(POLL_SECONDS)
                if self.coordinator.final:
                    stay_until_the_end_is_read(self.coordinator, [self.coordinator, self.link.seat], end)
            return 0

    def _run(self) -> int:
        spent: set[str] = set()
        try:
            attempt = int(self._state(time.monotonic() + self.wait_first)["attempt"])
        except TimeoutError as err:
            return self._leave(contract.EXIT_FAILED, None, str(err))
        while True:
            message = self.dir / f"attempt-{attempt}.msg"
            message.write_text("")  # the kubelet creates the file before the container starts; so do we, per attempt
            env = self._attempt_env(attempt, spent, message)
            warm, self.warm = self.warm, None
            proc = warm.start(env) if warm is not None else None
            if proc is not None:
                say(f"railtrain supervisor (rank {self.rank}): attempt {attempt} started in the warm launcher")
            self.proc = proc = proc or subprocess.Popen(self.command, env=env, start_new_session=True)
            code, stopped = self._watch(proc, attempt)
            if stopped:
                code = contract.EXIT_FAILED  # stopped for a peer's failure: never blamed before the rank that failed
            text = message.read_text() or None
            report = {"attempt": attempt, "rank": self.rank, "code": code, "message": text, "finished": time.time(), "stopped": stopped,
                      "node": self.env.get(contract.ENV_NODE_NAME, "")}  # fmt: skip
            try:
                decision = self._decision(attempt, report)
            except TimeoutError as err:
                return self._leave(code or contract.EXIT_FAILED, text, str(err), stopped)
            if self.coordinator is not None and decision.get("path") != "done":
                say(f"railtrain supervisor: attempt {attempt}: {decision.get('message')} [path {decision.get('path')}, verdict {decision.get('verdict')}]")
            if decision.get("path") not in (inplace.PATH_IN_PLACE, inplace.PATH_SPARE):  # a spare's takeover: the others go on in place
                return self._leave(0 if decision.get("path") == "done" and code == 0 else (code or contract.EXIT_FAILED), text, "", stopped)
            spent |= spent_faults({k: v for k, v in self.env.items() if k not in spent}, [text])
            attempt = int(decision["next"])

    def _watch(self, proc: subprocess.Popen[bytes], attempt: int) -> tuple[int, bool]:
        """Wait for the attempt's workers to end, or stop them once a peer failed; returns ``(exit status, stopped)``."""
        deadline = time.monotonic() + UNREACHABLE_SECONDS
        started, after = time.monotonic(), warm_after(self.env)
        while (rc := proc.poll()) is None:
            if self.warm is None and after is not None and time.monotonic() - started >= after:
                self.warm = WarmLauncher(self.command, self.env)  # the next attempt's torchrun, imported while this one trains
            try:
                state = self._state(deadline)
                deadline = time.monotonic() + UNREACHABLE_SECONDS
            except TimeoutError:
                state = {"attempt": attempt, "failed": True}  # node rank 0 is gone: this gang cannot restart in place
            if int(state["attempt"]) != attempt or state.get("failed"):
                with self._beating():  # SIGTERM, a grace, SIGKILL: seconds under load, and this rank must not fall silent
                    return stop(proc, PEER_STOP_GRACE_SECONDS), True
            time.sleep(POLL_SECONDS)
        return (128 - rc if rc < 0 else rc), False

    @contextlib.contextmanager
    def _beating(self) -> Iterator[None]:
        """While the block runs (the main loop blocked, e.g. stopping its workers), ask the coordinator every
        :data:`POLL_SECONDS` from a thread, and step it where this supervisor hosts it: this rank's heartbeat goes on,
        so a supervisor that is busy is never taken for lost (a spare given its rank, or the gang restarted: seen under
        load, docs/testing.md). The answers are not acted on; the main loop asks again after the block. The link
        is used by the thread only while the main loop waits in the block."""
        done = threading.Event()
        query = self._ask()

        def beat() -> None:
            while not done.wait(POLL_SECONDS):
                try:
                    if self.coordinator is not None:
                        self.coordinator.step()
                    self.link.call(f"/state?{query}")
                except (OSError, ValueError):
                    pass

        thread = threading.Thread(target=beat, name="railtrain-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _decision(self, attempt: int, report: dict[str, Any]) -> dict[str, Any]:
        """Report how this rank's attempt ended and wait for the coordinator's decision on it."""
        deadline, told = time.monotonic() + UNREACHABLE_SECONDS, ""
        while True:
            if told != self.url:  # first, and again to a successor: it starts without the old coordinator's reports
                try:
                    if self.coordinator is not None:
                        self.coordinator.step()
                    self.link.call("/report", report)
                    told, deadline = self.url, time.monotonic() + UNREACHABLE_SECONDS
                except (OSError, ValueError):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the gang's coordinator at {self.url} did not answer") from None
                    time.sleep(POLL_SECONDS)
                    continue
            state = self._state(time.monotonic() + UNREACHABLE_SECONDS)
            decision = (state.get("decisions") or {}).get(str(attempt))
            if decision is not None:
                return decision
            time.sleep(POLL_SECONDS)

    def _leave(self, code: int, verdict: str | None, why: str, stopped: bool = False) -> int:
        """Write the pod's termination message (the last verdict plus the ledger) and return ``code``."""
        if self.warm is not None:
            self.warm.drop()
        if why:
            say(f"railtrain supervisor (rank {self.rank}): {why}")
        try:
            if os.path.isfile(self.final_path):
                text = inplace.with_ledger(verdict, self.ledger, stopped) if code else (verdict or "")
                if self.who and code:
                    text = json.dumps(json.loads(text) | {NODE_RANK_KEY: self.rank}, separators=(",", ":"))
                Path(self.final_path).write_text(text)
        except OSError:
            pass
        if self.coordinator is not None:  # the others read the final decision from here: stay until they did
            stay_until_the_end_is_read(self.coordinator, [self.coordinator, self.link.seat], time.monotonic() + UNREACHABLE_SECONDS)
        return code


def stay_until_the_end_is_read(coordinator: Any, holders: Sequence[Any], deadline: float) -> bool:
    """A host supervisor's last wait: until every other live rank has read the final decision
    (:meth:`~railtrain.crds.coordinator.Coordinator.everyone_saw_the_end`) and then until the servers of ``holders``
    (objects with a ``server`` attribute: the coordinator, the supervisor's seat; None or serverless ones skipped) have
    answered every request they accepted (:meth:`~railtrain.crds.coordinator.AnsweringServer.wait_answered`): a rank's
    read counts when its request arrives, and an exit then cut the answer off (the rank took the host for lost).

    Args:
        coordinator: the hosted coordinator; holders: see above; deadline: ``time.monotonic()`` to give up at.

    Returns:
        Whether both waits ended before ``deadline``.
    """
    while not coordinator.everyone_saw_the_end():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    done = True
    for server in {id(s): s for h in holders if (s := getattr(h, "server", None)) is not None}.values():
        wait = getattr(server, "wait_answered", None)
        done = (wait is None or wait(max(0.0, deadline - time.monotonic()))) and done
    return done


def torchrun_args(command: Sequence[str], path: str | None = None) -> tuple[str, list[str]] | None:
    """``(python, torchrun's arguments)`` when ``command`` starts torchrun, else None.

    Args:
        command: the training command: ``torchrun ARGS`` (its console script, found on ``path``; its interpreter is
            the script's ``#!`` line) or ``PYTHON -m torch.distributed.run ARGS``.
        path: the ``PATH`` to find ``torchrun`` on (None: this process's).

    Returns:
        The interpreter that would run torchrun and the arguments after the launcher's name; None for any other
        command, or a ``torchrun`` whose script cannot be read.
    """
    import shutil

    if not command:
        return None
    if len(command) >= 3 and os.path.basename(command[0]).startswith("python") and command[1:3] == ["-m", "torch.distributed.run"]:
        return command[0], list(command[3:])
    if os.path.basename(command[0]) != "torchrun":
        return None
    script = shutil.which(command[0], path=path)
    try:
        first = Path(script).read_bytes()[:512].split(b"\n", 1)[0].decode() if script else ""
    except (OSError, UnicodeDecodeError):
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if len(words) == 2 and os.path.basename(words[0]) == "env":  # #!/usr/bin/env python3
        words = words[1:]
    python = words[0] if len(words) == 1 else ""
    return (python, list(command[1:])) if os.path.basename(python).startswith("python") else None


class WarmLauncher:
    """The next attempt's torchrun, started ahead with its module already imported (an in-place restart's own start).

    Every attempt of an in-place restart starts torchrun from nothing: a Python process that imports
    ``torch.distributed`` (1.6–2.7 s on this project's 2-core machines) before it starts the workers, which import
    torch again. The supervisor starts a :data:`WARM_CODE` process for the next attempt while the current one trains
    (after :data:`WARM_AFTER_SECONDS`); when the next attempt starts, it hands that process the attempt's arguments and
    environment and torchrun runs at once. Only a command that starts torchrun is warmed (:func:`torchrun_args`);
    ``RAILTRAIN_SUPERVISOR_WARM=off`` (:data:`ENV_WARM`) turns it off.

    Args:
        command: the training command; environ: the environment the process imports in (the attempt's differs only in
            its per-attempt variables, read when torchrun parses its arguments).
    """

    def __init__(self, command: Sequence[str], environ: Mapping[str, str]) -> None:
        self.args = torchrun_args(command, environ.get("PATH"))
        self.proc: subprocess.Popen[bytes] | None = None
        if self.args is not None:
            try:
                self.proc = subprocess.Popen([self.args[0], "-c", WARM_CODE], stdin=subprocess.PIPE, env=dict(environ), start_new_session=True)
            except OSError:
                self.proc = None

    @property
    def ready(self) -> bool:
        """Whether the process waits to be used (started, still alive)."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, environ: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """Run the attempt with ``environ`` in the warm process; returns it, or None when it cannot be used (not
        started, ended, or its standard input closed): start the command the usual way then."""
        if not self.ready or self.args is None:
            return None
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"argv": self.args[1], "env": dict(environ)}) + "\n").encode())
            self.proc.stdin.close()
        except (OSError, ValueError):
            self.drop()
            return None
        proc, self.proc = self.proc, None
        return proc

    def drop(self) -> None:
        """Stop the process if it was never used (the gang ended, or this supervisor leaves)."""
        if self.proc is not None and self.proc.poll() is None:
            stop(self.proc, 0.5)
        self.proc = None


class Replaced(Exception):
    """The coordinator gave this supervisor's rank to a hot spare (it was silent long enough to count as lost, or its node must be left)."""


class Spare:
    """A hot spare's supervisor (``spec.spares``): it waits outside the world, heard by the coordinator, until it is
    given a lost node's rank; then it runs that rank's attempts as a :class:`Supervisor`.

    Args:
        command: the training command; environ: the spare pod's environment (:data:`ENV_SPARE` names it).
    """

    def __init__(self, command: Sequence[str], environ: Mapping[str, str]) -> None:
        self.command, self.env = list(command), dict(environ)
        self.name = environ.get(ENV_SPARE) or "spare"
        seat, addr = open_seat(environ)
        self.link = Link(coordinator_url(environ), addr, seat, lost_seconds=lost_after(environ))
        self.wait_first = float(json.loads(environ.get(ENV_RUN_POLICY) or "{}").get("gangTimeoutSeconds", 300))
        self.supervisor: Supervisor | None = None
        self.warm: subprocess.Popen[bytes] | None = None

    def terminate(self, *args: Any) -> None:
        """SIGTERM: as :meth:`Supervisor.terminate` once a rank is taken; before that, just leave."""
        if self.warm is not None and self.warm.poll() is None:
            self.warm.kill()
        if self.supervisor is not None:
            self.supervisor.terminate(*args)
        raise SystemExit(128 + signal.SIGTERM)

    def _warm_up(self) -> None:
        modules = [m.strip() for m in self.env.get(ENV_SPARE_WARMUP, "torch").split(",") if m.strip()]
        if modules:
            code = "import importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass" % modules
            self.warm = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def run(self) -> int:
        """Wait for a rank; returns the pod's exit status: the taken rank's (:meth:`Supervisor.run`), or 0 when the
        gang ended (or its coordinator went away) while this spare waited: a spare is never blamed."""
        self._warm_up()
        query = urllib.parse.urlencode({"spare": self.name, "node": self.env.get(contract.ENV_NODE_NAME, ""), "addr": self.link.addr})
        heard, limit, moves, said = time.monotonic(), self.wait_first, 0, False
        while True:
            try:
                state = self.link.call(f"/state?{query}")
                if not said:  # the first answer: the coordinator counts this spare as ready
                    said = True
                    say(f"railtrain spare {self.name}: waiting beside the gang at attempt {state.get('attempt')}")
                heard, limit = time.monotonic(), UNREACHABLE_SECONDS
            except (OSError, ValueError):
                if self.link.moves != moves:  # turned to the coordinator's successor: give it its time
                    moves, heard, limit = self.link.moves, time.monotonic(), UNREACHABLE_SECONDS
                if time.monotonic() - heard > limit:
                    say(f"railtrain spare {self.name}: the gang's coordinator at {self.link.url} did not answer; leaving")
                    return 0
                time.sleep(POLL_SECONDS)
                continue
            if state.get("final"):
                return 0
            if state.get("assigned") is not None:
                break
            time.sleep(POLL_SECONDS)
        if self.warm is not None and self.warm.poll() is None:
            self.warm.kill()
        rank = int(state["assigned"])
        say(f"railtrain spare {self.name}: takes node rank {rank} at attempt {state.get('attempt')}")
        # the rank's injected faults (tests only) stood for its old machine's faults and events: this is another machine
        env = {k: v for k, v in self.env.items() if k != ENV_SPARE and k not in FAULT_VARIABLES} | {contract.ENV_NODE_RANK: str(rank), contract.ENV_PET_NODE_RANK: str(rank)}
        self.supervisor = Supervisor(self.command, env, who=self.name, link=self.link)
        return self.supervisor.run()


def stop(proc: subprocess.Popen[bytes], grace: float = GRACE_SECONDS) -> int:
    """Stop a worker command's process group: SIGTERM, SIGKILL after ``grace`` s; returns its exit status (128+N for signal N)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            rc = proc.wait(wait)
            return 128 - rc if rc < 0 else rc
        except subprocess.TimeoutExpired:
            continue
    return 128 + signal.SIGKILL


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point: ``-- COMMAND...`` after the options; returns the pod's exit status (2: usage)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        say(USAGE)
        return contract.EXIT_USER_ERROR
    environ = dict(os.environ)
    if environ.get(ENV_SPARE):
        spare = Spare(args, environ)
        signal.signal(signal.SIGTERM, spare.terminate)
        return spare.run()
    coordinator = start_coordinator(environ) if int(environ.get(contract.ENV_NODE_RANK) or 0) == 0 else None
    supervisor = Supervisor(args, environ, coordinator)
    signal.signal(signal.SIGTERM, supervisor.terminate)  # the workers run in their own session: they hear it from here
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
