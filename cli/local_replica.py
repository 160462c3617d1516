"""``railtrain run --local`` of a job with replica groups (``spec.faultTolerance``): R torchrun worlds and a Lighthouse.

Each replica group runs as a gang of its own (:class:`railtrain.cli.local.LocalGang`): ``nodes / R`` local nodes with
their own rendezvous port, the job's pod contract with the group's degrees (``spec.nodes`` and
``spec.parallelism.data`` divided by R), and the replica-group variables of
:func:`railtrain.crds.replica_groups.replica_group_env`. One torchft Lighthouse (``torchft_lighthouse``, the console
script of the ``ft`` extra) runs beside them on a free local port, as the operator runs one per job.

When a group fails, only that group is stopped and started again (fresh rendezvous, no injected faults): the local
analogue of the operator replacing one group's pods. The other groups keep stepping; the new group heals from a
live peer at its first quorum. A group whose trainer ends with reason ``QuorumLost`` (no quorum of ``minReplicas``
within ``quorumTimeoutSeconds``) fails the run; a group that failed ``spec.runPolicy.backoffLimit`` times is not
started again (the others train on while they keep the quorum).

May import: ``railtrain.crds`` and other ``railtrain.cli`` modules (never :mod:`railtrain.cli.main`); never torch:
the Lighthouse is a separate process.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from railtrain.cli import local as local_run
from railtrain.cli.errors import CliError
from railtrain.crds import contract, replica_groups
from railtrain.crds.faults import FAULT_VARIABLES, KillGroupFault
from railtrain.crds.verdicts import REASON_QUORUM_LOST, parse_termination_message

STEP_LINE = re.compile(r"^step=(\d+) loss=")
"""A trainer's per-step log line (:func:`railtrain.trainer.train.format_step`)."""
RESUMED_LINE = re.compile(r"^resumed from step (\d+)")
"""The trainer's line when it resumed from a checkpoint (:meth:`railtrain.trainer.train.Trainer.resume`)."""
HEALED_LINE = re.compile(r"^replica group \d+: healed from a peer at step (\d+)")
"""The trainer's line when its group loaded a peer's state (:class:`railtrain.trainer.replica.ReplicaSync`)."""
CHECKPOINT_LINE = re.compile(r"^checkpoint step=(\d+) tiers=")
"""The trainer's line after it saved a checkpoint (the group that writes them: the lowest of the quorum)."""

HEARTBEAT_TIMEOUT_MS = 1000
"""The local Lighthouse's heartbeat timeout: a group silent this long is out of the next quorum (torchft's default is
5000; an earlier drill on these CPUs (docs/fault-tolerance.md) measured a survivor's stall of about this much with 1000)."""
JOIN_TIMEOUT_MS = 500
"""How long the local Lighthouse waits for heartbeating groups to join before it forms a quorum without them."""
QUORUM_TICK_MS = 50
"""How often the local Lighthouse re-checks a pending quorum."""
LIGHTHOUSE_START_S = 60.0
"""Seconds the Lighthouse may take to listen (it imports torch first on these loaded machines)."""


def group_job(job: Any) -> Any:
    """One replica group of ``job`` as a job of its own: ``spec.nodes`` and ``spec.parallelism.data`` divided by R,
    without ``spec.faultTolerance`` (a group's pods see the group's torchrun world, as the operator renders them)."""
    spec = job.spec
    groups = spec.fault_tolerance.replica_groups
    parallelism = spec.parallelism.model_copy(update={"data": spec.parallelism.data // groups}) if spec.parallelism is not None else None
    new_spec = spec.model_copy(update={"nodes": spec.nodes // groups, "fault_tolerance": None, "parallelism": parallelism})
    return job.model_copy(update={"spec": new_spec})


@dataclass
class GroupState:
    """What ``run --local`` knows of one replica group.

    Attributes:
        group: the group's index.
        launches: times its gang was started (1 + replacements).
        replacements: times it was started again alone after a failure.
        step: the newest step its rank 0 logged (any launch).
        healed: times it loaded a live peer's state.
        step_times: ``(time.monotonic(), step)`` of every step line of its rank 0.
        launched_at: ``time.monotonic()`` of each launch.
        checkpoints: ``(time.monotonic(), step)`` of every checkpoint its rank 0 saved.
        joined: its current launch logged a step or healed (it is in the quorum).
        code: the exit status of its last gang (None while running).
        ends: ``(time.monotonic(), exit status, reason)`` of each of its gangs that failed, in order.
        reason: the termination reason of its last failed gang, if written.
        lost: it failed ``backoffLimit`` times and is not started again (or, with ``unneeded``, was stopped).
        unneeded: its replacement was stopped before it joined because another group had finished training.
    """

    group: int
    launches: int = 0
    replacements: int = 0
    step: int = 0
    healed: int = 0
    step_times: list[tuple[float, int]] = field(default_factory=list)
    launched_at: list[float] = field(default_factory=list)
    checkpoints: list[tuple[float, int]] = field(default_factory=list)
    joined: bool = False
    code: int | None = None
    reason: str | None = None
    ends: list[tuple[float, int | None, str | None]] = field(default_factory=list)
    lost: bool = False
    unneeded: bool = False

    def stepped_since_launch(self) -> int:
        """The newest step its rank 0 logged a step line for in its current launch; 0 when none yet (a heal is no step line)."""
        since = self.launched_at[-1] if self.launched_at else float("-inf")
        newest = 0
        for t, n in reversed(self.step_times):  # newest first: stop at the current launch's start
            if t < since:
                break
            newest = max(newest, n)
        return newest

    def summary(self) -> str:
        """One sentence: ``replica group 1: step 20, healed 1 time(s), 1 replacement(s)``."""
        lost = ", its replacement stopped: training had finished" if self.unneeded else ", lost" if self.lost else ""
        return f"replica group {self.group}: step {self.step}, healed {self.healed} time(s), {self.replacements} replacement(s){lost}"


class Lighthouse:
    """torchft's Lighthouse as a local process on ``127.0.0.1:port`` (the console script ``torchft_lighthouse``).

    Args:
        min_replicas: spec.faultTolerance.minReplicas.
        port: a free local port.
        log: its output file.

    Raises:
        CliError: torchft is not installed (``pip install 'railtrain[ft]'``).
    """

    def __init__(self, min_replicas: int, port: int, log: Path) -> None:
        program = Path(sys.executable).with_name("torchft_lighthouse")
        found = str(program) if program.exists() else shutil.which("torchft_lighthouse")
        if not found:
            raise CliError("spec.faultTolerance needs torchft's Lighthouse (torchft_lighthouse): pip install 'railtrain[ft]'")
        self.port = port
        self.address = replica_groups.lighthouse_address(local_run.LOCAL_ADDR, port)
        argv = [found, "--min_replicas", str(min_replicas), "--bind", f"{local_run.LOCAL_ADDR}:{port}",
                "--heartbeat_timeout_ms", str(HEARTBEAT_TIMEOUT_MS), "--join_timeout_ms", str(JOIN_TIMEOUT_MS),
                "--quorum_tick_ms", str(QUORUM_TICK_MS)]  # fmt: skip
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_listening(self, timeout: float = LIGHTHOUSE_START_S) -> None:
        """Return once the Lighthouse accepts connections (polled).

        Raises:
            CliError: it exited or did not listen within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CliError(f"torchft's Lighthouse exited with status {self.proc.returncode} before listening on port {self.port}")
            try:
                with socket.create_connection((local_run.LOCAL_ADDR, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise CliError(f"torchft's Lighthouse did not listen on port {self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class ReplicaGroupRun:
    """Runs a job's R replica groups locally and replaces a failed group alone (module docstring).

    Args:
        job: a validated TrainingJob with ``spec.faultTolerance``.
        base_dir: where a relative checkpoint location resolves (``--workdir``).
        uid: this run's stand-in for the job's uid.
        faults: the ``--fault-*`` variables, given to every group's first launch.
        kill: ``--fault-kill-group``: the group whose processes are SIGKILLed once its rank 0 logged the step or a later
            one while every other group has logged the step before or a later one (so the others are in the run and
            the kill takes a peer from them); its first launch only. A sequence of them (the Python API, e.g. a
            benchmark's two failures) fires in order: each once the earlier ones fired and every group trains again.
        gang: builds a group's :class:`~railtrain.cli.local.LocalGang` from ``(nodes, group, on_line, log_dir)``.
        notify: prints one status sentence.
        messages: a folder for the termination messages.
        log_dir: the run's log folder (a ``group-<g>`` folder per group, ``lighthouse.log``).
    """

    def __init__(self, job: Any, base_dir: Path, uid: str, faults: dict[str, str], kill: KillGroupFault | Sequence[KillGroupFault] | None,
                 gang: Callable[[list[local_run.LocalNode], int, Callable[[int, str], None], Path], local_run.LocalGang],
                 notify: Callable[[str], None], messages: Path, log_dir: Path) -> None:  # fmt: skip
        ft = job.spec.fault_tolerance
        if ft is None:
            raise ValueError("ReplicaGroupRun needs spec.faultTolerance")
        self.job, self.ft, self.base_dir, self.uid = job, ft, base_dir, uid
        self.faults, self.gang, self.notify = faults, gang, notify
        self.kills: list[KillGroupFault] = [] if kill is None else [kill] if isinstance(kill, KillGroupFault) else list(kill)
        self.kill_times: list[float] = []
        """``time.monotonic()`` of each kill of :attr:`kills` that fired, in order."""
        self.messages, self.log_dir = messages, log_dir
        self.groups = [GroupState(g) for g in range(ft.replica_groups)]
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._gangs: dict[int, local_run.LocalGang] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._files: dict[int, list[Path]] = {}
        self.lighthouse: Lighthouse | None = None
        self.killed: float | None = None
        """``time.monotonic()`` when the first kill fired (None: not yet, or no kill)."""
        self._stop_requested = threading.Event()
        self.lighthouse_restarts: list[tuple[float, float]] = []
        """``(seen dead, listening again)`` in ``time.monotonic()`` for each Lighthouse restarted (:meth:`_keep_lighthouse`)."""
        self.unneeded: list[int] = []
        """Groups whose replacement was stopped before it joined because another group had finished training."""

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop every group and return 130, as Ctrl-C does (from any thread; tests and benchmarks)."""
        self._stop_requested.set()

    # -- planning ---------------------------------------------------------------------------------
    def plan(self, group: int) -> list[local_run.LocalNode]:
        """The nodes of ``group``'s next launch: its own rendezvous port, the replica-group variables, and the faults
        on its first launch only (a replacement gets none)."""
        state = self.groups[group]
        sub = group_job(self.job)
        ports = local_run.free_ports(sub.spec.nodes + 1)
        assert self.lighthouse is not None
        extra = replica_groups.replica_group_env(self.ft, group, self.lighthouse.address)
        if not state.launches:
            extra = {**self.faults, **extra}
        nodes = local_run.plan_local(sub, rdzv_port=ports[0], metrics_ports=ports[1:], base_dir=self.base_dir,
                                     restarts=state.replacements, extra_env=extra, uid=self.uid)  # fmt: skip
        files = []
        out = []
        for node in nodes:
            path = self.messages / f"group-{group}-launch-{state.launches}-node-{node.rank}"
            path.write_text("")
            files.append(path)
            env = local_run.local_thread_env(self.job, dict(node.env), os.environ)  # every group shares this machine's CPUs
            if state.launches:
                env = {k: v for k, v in env.items() if k not in FAULT_VARIABLES}
            env[contract.ENV_TERMINATION_MESSAGE_PATH] = str(path)
            out.append(dataclasses.replace(node, env=env))
        self._files[group] = files
        return out

    # -- running ----------------------------------------------------------------------------------
    def _line(self, group: int, rank: int, line: str) -> None:
        if rank != 0:
            return
        state = self.groups[group]
        if m := STEP_LINE.match(line):
            with self._lock:
                state.step = max(state.step, int(m.group(1)))
                state.step_times.append((time.monotonic(), int(m.group(1))))
                state.joined = True
                fire = self._kill_due(state)
                if fire:
                    self.kill_times.append(time.monotonic())
                    self.killed = self.killed or self.kill_times[0]
            if fire:  # --fault-kill-group: every process of the group at once, as when its machines are lost
                self._gangs[group].kill()
        elif m := RESUMED_LINE.match(line):
            with self._lock:
                state.step = max(state.step, int(m.group(1)))
        elif m := CHECKPOINT_LINE.match(line):
            with self._lock:
                state.checkpoints.append((time.monotonic(), int(m.group(1))))
        elif m := HEALED_LINE.match(line):
            with self._lock:
                state.healed += 1
                state.step = max(state.step, int(m.group(1)))
                state.joined = True

    def _kill_due(self, state: GroupState) -> bool:
        """Whether the next kill of :attr:`kills` fires now, on ``state``'s step line (called under the lock): it names
        this group, the group logged its step or a later one in a launch after its earlier kills (a launch that failed
        on its own before the kill does not use the kill up), and every other group trains: its rank 0 logged a step
        line in its current launch, the step before or a later one.

        A heal is not enough: a group that joins late loads a peer's state (its healed line names the step) and logs its
        first step line a moment later. A kill fired in that moment replaced the group before the survivor had logged
        any step (a fresh-clone run, stop 47: the survivor healed at step 11 from group 1, group 1 was killed on its step-12
        line and relaunched before the survivor's own step-12 line)."""
        if len(self.kill_times) >= len(self.kills):
            return False
        kill = self.kills[len(self.kill_times)]
        earlier = sum(1 for k in self.kills[: len(self.kill_times)] if k.group == state.group)
        if kill.group != state.group or state.launches < earlier + 1 or state.step < kill.step:
            return False
        return all(o.stepped_since_launch() >= kill.step - 1 for o in self.groups if o is not state and not o.lost)  # the others step too

    def _launch(self, group: int) -> None:
        nodes = self.plan(group)
        state = self.groups[group]
        state.launches += 1
        state.launched_at.append(time.monotonic())
        state.code = None
        state.joined = False
        gang = self.gang(nodes, group, lambda rank, line: self._line(group, rank, line), self.log_dir / f"group-{group}")
        self._gangs[group] = gang

        def body() -> None:
            code = 1
            try:
                code = gang.run()
            finally:
                state.code = code

        thread = threading.Thread(target=body, name=f"replica-group-{group}", daemon=True)
        self._threads[group] = thread
        thread.start()

    def _reason(self, group: int) -> str | None:
        reasons = [v["reason"] for p in self._files.get(group, []) if (v := parse_termination_message(p.read_text() or None))]
        return REASON_QUORUM_LOST if REASON_QUORUM_LOST in reasons else (reasons[0] if reasons else None)

    def run(self) -> int:
        """Start the Lighthouse and every group, replace failed groups alone, and wait until every group ended.

        Returns:
            0 when every group that was not lost finished; the failing group's exit status when a group ended with
            ``QuorumLost`` or every group was lost; 130 after Ctrl-C.

        Raises:
            CliError: torchft is missing or its Lighthouse does not start.
        """
        with local_run._sigterm_as_interrupt():  # SIGTERM to railtrain stops every group, as Ctrl-C does
            return self._run()

    def _run(self) -> int:
        port = local_run.free_ports(1)[0]
        self.lighthouse = Lighthouse(self.ft.min_replicas, port, self.log_dir / "lighthouse.log")
        failed: int | None = None
        try:
            self.lighthouse.wait_listening()
            self.notify(f"lighthouse {self.lighthouse.address} (minReplicas {self.ft.min_replicas}); starting {len(self.groups)} replica groups")
            for state in self.groups:
                self._launch(state.group)
            while failed is None and any(t.is_alive() for t in self._threads.values()):
                if self._stop_requested.wait(0.1):  # supervising processes: each group's end is seen within 0.1 s
                    raise KeyboardInterrupt
                self._stop_unneeded()
                self._keep_lighthouse()
                for state in self.groups:
                    thread = self._threads.get(state.group)
                    if thread is None or thread.is_alive() or state.code in (None, 0) or state.lost:
                        continue
                    failed = self._ended(state)
                    if failed is not None:
                        break
        except KeyboardInterrupt:
            self.notify("interrupted: stopping every replica group")
            self._stop_all()
            return 130
        finally:
            if failed is not None:
                self._stop_all()
            for thread in self._threads.values():
                thread.join(timeout=60)
            self.lighthouse.stop()
        if failed is not None:
            return failed
        if all(s.lost for s in self.groups):
            return next((s.code for s in reversed(self.groups) if s.code), 1)
        return 0

    def _keep_lighthouse(self) -> None:
        """A Lighthouse that exited while groups run is started again at once on the same port, as the operator
        recreates its pod (docs/fault-tolerance.md, "The Lighthouse lost"): the groups' managers reconnect and ask it
        again (torchft's quorum retries, :func:`railtrain.trainer.replica.quorum_retries`).

        Raises:
            CliError: the new Lighthouse did not listen (:meth:`Lighthouse.wait_listening`).
        """
        lighthouse = self.lighthouse
        if lighthouse is None or lighthouse.proc.poll() is None:
            return
        seen = time.monotonic()
        code = lighthouse.proc.returncode
        lighthouse.stop()
        self.lighthouse = Lighthouse(self.ft.min_replicas, lighthouse.port, self.log_dir / "lighthouse.log")
        self.lighthouse.wait_listening()
        self.lighthouse_restarts.append((seen, time.monotonic()))
        self.notify(f"lighthouse exited with status {code}; started again on {self.lighthouse.address} in "
                    f"{time.monotonic() - seen:.1f}s (restart {len(self.lighthouse_restarts)}); the groups' quorum requests retry")  # fmt: skip

    def _ended(self, state: GroupState) -> int | None:
        """A group's gang failed: replace it alone, give it up, or (``QuorumLost``) fail the run (its exit status)."""
        state.reason = self._reason(state.group)
        state.ends.append((time.monotonic(), state.code, state.reason))
        if state.reason == REASON_QUORUM_LOST:
            self.notify(f"replica group {state.group} ended with reason {REASON_QUORUM_LOST} (exit status {state.code}): "
                        f"no quorum of minReplicas {self.ft.min_replicas} within quorumTimeoutSeconds {self.ft.quorum_timeout_seconds}; stopping the run")  # fmt: skip
            return state.code
        budget = self.job.spec.run_policy.backoff_limit
        if state.replacements >= budget:
            state.lost = True
            self.notify(f"replica group {state.group} failed (exit status {state.code}, {state.reason or 'no verdict'}) and spent "
                        f"spec.runPolicy.backoffLimit {budget}: not replaced; the other groups train on while they keep the quorum")  # fmt: skip
            return None
        state.replacements += 1
        self.notify(f"replica group {state.group} failed (exit status {state.code}, {state.reason or 'no verdict'}); "
                    f"replacing it alone (replacement {state.replacements} of {budget}), the other groups train on")  # fmt: skip
        self._launch(state.group)
        return None

    def _stop_unneeded(self) -> None:
        """Once a group finished training (exit 0), stop a replacement that has not joined the quorum yet: it would
        otherwise train the whole run again alone, with no live peer left to heal from."""
        if not any(s.code == 0 for s in self.groups):
            return
        for state in self.groups:
            thread = self._threads.get(state.group)
            if thread is not None and thread.is_alive() and state.launches > 1 and not state.joined and state.group not in self.unneeded:
                self.unneeded.append(state.group)
                self.notify(f"replica group {state.group}: the other groups finished training before its replacement joined; stopping it")
                state.lost = state.unneeded = True
                self._gangs[state.group].stop()

    def _stop_all(self) -> None:
        for gang in list(self._gangs.values()):
            gang.stop()

    def summaries(self) -> list[str]:
        """One sentence per group (:meth:`GroupState.summary`)."""
        return [s.summary() for s in self.groups]

    def record(self) -> dict[str, Any]:
        """The run as data: per group its steps, heals, replacements, step and checkpoint times, its failed gangs (time,
        exit status, reason), each Lighthouse restart (seen dead, listening again) and the kills; seconds since the run started."""
        return {
            "lighthouse_restarts": [(round(a - self.started, 3), round(b - self.started, 3)) for a, b in self.lighthouse_restarts],
            "kills": [round(t - self.started, 3) for t in self.kill_times],
            "groups": [
                {"group": s.group, "step": s.step, "healed": s.healed, "replacements": s.replacements, "lost": s.lost, "code": s.code,
                 "reason": s.reason, "launched_at": [round(t - self.started, 3) for t in s.launched_at],
                 "ends": [(round(t - self.started, 3), code, reason) for t, code, reason in s.ends],
                 "step_times": [(round(t - self.started, 3), n) for t, n in s.step_times],
                 "checkpoints": [(round(t - self.started, 3), n) for t, n in s.checkpoints]}
                for s in self.groups
            ]
        }  # fmt: skip


def survivor_stall(run: dict[str, Any], killed: int, after_step: int) -> tuple[float, list[int]]:
    """The survivors' longest gap between step lines from ``after_step`` on, and the steps they never logged there.

    Args:
        run: :meth:`ReplicaGroupRun.record`.
        killed: the group that was killed.
        after_step: the step the group was killed at.

    Returns:
        ``(seconds, missing steps)``: the longest wait of a surviving group for its next step line after it logged
        ``after_step − 1``; the steps between its first and last logged step that it never logged (steps lost).
    """
    worst, missing = 0.0, []
    for g in run["groups"]:
        if g["group"] == killed:
            continue
        times = [(t, n) for t, n in g["step_times"] if n >= after_step - 1]
        worst = max([worst, *(b[0] - a[0] for a, b in zip(times, times[1:]))])
        steps = sorted({n for _, n in g["step_times"]})
        if steps:
            missing += sorted(set(range(steps[0], steps[-1] + 1)) - set(steps))
    return worst, missing
