"""``railtrain logs``: one rank's log, or every rank's interleaved in time order with a ``[rank N]`` prefix.

A TrainingJob has one pod per node rank (label ``railtrain.dev/node-rank``);
its training container's log holds the output of every local process torchrun
started there. Logs are read with the kubelet's timestamps (``timestamps=true``:
each line starts with an RFC 3339 time with up to nanoseconds), which order the
lines of different pods: :func:`merge` is the pure interleaving, :func:`follow_job`
the live one (one reader thread per pod, lines printed as they arrive).

Which pods: the current gang (``status.restarts``, each pod's restart-count
annotation), or with ``previous`` the latest earlier gang whose pods are still
kept (:func:`pick_pods`).

``logs -f`` follows the job, not one gang (:func:`follow_job`): when the
operator restarts the gang it prints an attempt marker (:func:`attempt_marker`)
and goes on with the new pods, and it ends when the job ends, with the job's
outcome as its exit status (0 Succeeded, 1 Failed or deleted).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from railtrain.cli.errors import CliError
from railtrain.crds import contract


@dataclass(frozen=True)
class Line:
    """One log line: ``when`` is a sortable key of its timestamp ("" when it has none), ``text`` without the timestamp."""

    when: str
    rank: int
    seq: int
    text: str


def split_timestamp(raw: str) -> tuple[str, str]:
    """``("2024-05-01T12:00:00.5Z", "text")`` → a sort key and the text.

    The kubelet writes RFC 3339 with nanoseconds and trailing zeros removed
    (``...:00Z``, ``...:00.5Z``, ``...:00.123456789Z``), which does not sort as
    text; the key pads the fraction to 9 digits. A line without a timestamp
    keeps its whole text and the key "".
    """
    stamp, sep, text = raw.partition(" ")
    if not sep or len(stamp) < 20 or stamp[4:5] != "-" or stamp[10:11] != "T":
        return "", raw
    base, dot, frac = stamp.rstrip("Z").partition(".")
    return f"{base}.{(frac if dot else '').ljust(9, '0')[:9]}", text


def prefixed(rank: int, text: str) -> str:
    """The printed form of a line of ``rank`` in an interleaved log: ``[rank 3] text``."""
    return f"[rank {rank}] {text}"


def merge(logs: dict[int, Iterable[str]]) -> list[Line]:
    """Interleave whole logs in time order.

    Args:
        logs: rank → its raw lines, each starting with the kubelet's timestamp.

    Returns:
        Every line, ordered by timestamp, then rank, then position in its own
        log (so one rank's lines keep their order even where timestamps tie or are missing:
        a line without one takes the time of the line before it).
    """
    out = []
    for rank, lines in logs.items():
        last = ""
        for seq, raw in enumerate(lines):
            when, text = split_timestamp(raw)
            last = when or last
            out.append(Line(last, rank, seq, text))
    return sorted(out, key=lambda line: (line.when, line.rank, line.seq))


def pod_rank(pod: dict[str, Any]) -> int:
    """The node rank of a job's pod (its ``railtrain.dev/node-rank`` label; -1 when absent or malformed)."""
    try:
        return int(((pod.get("metadata") or {}).get("labels") or {}).get(contract.LABEL_NODE_RANK, -1))
    except ValueError:
        return -1


def pod_restart(pod: dict[str, Any]) -> int:
    """The restart count (gang attempt) a pod belongs to (its annotation; -1 when malformed)."""
    try:
        return int(((pod.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_RESTART, 0))
    except ValueError:
        return -1


def pick_pods(job: dict[str, Any], pods: list[dict[str, Any]], rank: int | None, previous: bool) -> list[dict[str, Any]]:
    """The pods whose logs to show, one per rank, ordered by rank.

    Args:
        job: the TrainingJob.
        pods: every pod labelled with its name.
        rank: one node rank, or None for all.
        previous: the latest earlier gang that still has pods, instead of the current one.

    Raises:
        CliError: no such pods (the sentence says which gang, and what exists).
    """
    name = job["metadata"]["name"]
    current = int((job.get("status") or {}).get("restarts") or 0)
    attempts = sorted({pod_restart(p) for p in pods})
    if previous:
        earlier = [a for a in attempts if a < current]
        if not earlier:
            raise CliError(f"trainingjob {name} has no earlier gang with pods kept (it is on restart {current}; a restarted gang's pods are deleted)")
        attempt = earlier[-1]
    else:
        attempt = current if current in attempts else (attempts[-1] if attempts else current)
    chosen = [p for p in pods if pod_restart(p) == attempt]
    if rank is not None:
        chosen = [p for p in chosen if pod_rank(p) == rank]
        if not chosen:
            nodes = int((job.get("spec") or {}).get("nodes") or 1)
            if not 0 <= rank < nodes:
                raise CliError(f"--rank {rank}: trainingjob {name} has node ranks 0..{nodes - 1}")
            raise CliError(f"trainingjob {name} has no pod for rank {rank} yet (restart {attempt})")
    if not chosen:
        raise CliError(f"trainingjob {name} has no pods yet; 'railtrain describe {name}' says why")
    return sorted(chosen, key=pod_rank)


def attempt_of(job: dict[str, Any]) -> int:
    """The job's current gang attempt: its ``status.restarts`` (0 for the first gang)."""
    try:
        return int((job.get("status") or {}).get("restarts") or 0)
    except (TypeError, ValueError):
        return 0


def attempt_marker(name: str, attempt: int) -> str:
    """The line ``logs -f`` prints before the lines of a restarted gang: ``==> trainingjob NAME: attempt 2 (restart 1) <==``."""
    return f"==> trainingjob {name}: attempt {attempt + 1} (restart {attempt}) <=="


def check_rank(job: dict[str, Any], rank: int | None) -> None:
    """Refuse a ``--rank`` outside the job's node ranks.

    Raises:
        CliError: ``rank`` is not in ``0..spec.nodes-1`` (the sentence names both).
    """
    nodes = int((job.get("spec") or {}).get("nodes") or 1)
    if rank is not None and not 0 <= rank < nodes:
        raise CliError(f"--rank {rank}: trainingjob {job['metadata']['name']} has node ranks 0..{nodes - 1}")


def log_ready(pod: dict[str, Any], container: str) -> bool:
    """Whether ``pod``'s ``container`` has a log to open: it runs or has ended (a Pending or gated pod has none yet)."""
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        if c.get("name") == container:
            state = c.get("state") or {}
            return bool(state.get("running") or state.get("terminated"))
    return status.get("phase") in ("Running", "Succeeded", "Failed")


FINISHED = ("Succeeded", "Failed")
DRAIN_S = 30.0
"""Seconds ``logs -f`` still waits for open streams after the job ended (their containers have ended; the streams close soon)."""


def follow_job(
    name: str, watch_job: Callable[[], Iterator[dict[str, Any] | None]], list_pods: Callable[[], list[dict[str, Any]]],
    open_log: Callable[[dict[str, Any]], Iterator[str]], emit: Callable[[str], None], note: Callable[[str], None],
    rank: int | None, container: str, retry_s: float = 2.0, patience_s: float = 60.0,
) -> int:
    """Follow a job's logs across its gang's restarts until the job ends.

    Each pod of the current attempt (one rank, or every rank when ``rank`` is None) is read as soon as its
    container runs or has ended, one reader thread per pod; when ``status.restarts`` moves on, the marker of
    :func:`attempt_marker` is printed and the new gang's pods are read as they start. A pod whose log cannot be
    opened is said once (``note``) and following goes on.

    Args:
        name: the job's name, for the sentences.
        watch_job: opens a stream of the job: the object, again after every change, ``None`` as a clock tick
            (:func:`railtrain.cli.k8s_jobs.watch_job`); raises :class:`CliError` (a sentence with "not found"
            once the job is deleted). It is opened again after any other error.
        list_pods: every pod of the job (all attempts).
        open_log: a pod → its followed log, raw lines with the kubelet's timestamps; raises :class:`CliError`.
        emit: prints one log line or marker (stdout); note: prints one sentence of railtrain's own (stderr).
        rank: one node rank, or None for every rank (then each line is prefixed ``[rank N]`` when the job has
            more than one node).
        container: the container whose log is read (for :func:`log_ready`).
        retry_s: seconds between attempts to watch the job again after an error.
        patience_s: how long the API server may fail before following gives up.

    Returns:
        0 when the job Succeeded; 1 when it Failed (the last note names the cause) or was deleted.

    Raises:
        CliError: the API server did not answer for ``patience_s``.
        KeyboardInterrupt: Ctrl-C (the caller exits 130; the job is untouched).
    """
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=_watch_job, args=(events, stop, watch_job, retry_s, patience_s), daemon=True).start()
    state = _Following()
    try:
        while True:
            kind, payload = events.get()
            if kind == "line":
                emit(state.line(*payload))
                continue
            if kind == "deleted":
                note(f"trainingjob {name} was deleted while its logs were followed")
                return 1
            if kind == "error":
                raise payload
            if kind == "ended":
                state.ended(*payload, note)
            else:  # the job changed, or a tick: pods of the attempt may have started
                pods = state.update(payload, name, list_pods, rank, container, emit)
                if pods is None:
                    continue
                for pod in pods:
                    threading.Thread(target=_pump_log, args=(events, open_log, pod), daemon=True).start()
            if state.finished():
                return _outcome(name, state.job, note)
    finally:
        stop.set()


def _watch_job(
    events: queue.Queue[tuple[str, Any]], stop: threading.Event, watch_job: Callable[[], Iterator[dict[str, Any] | None]], retry_s: float, patience_s: float,
) -> None:
    """The body of ``logs -f``'s watcher thread: the job's stream, opened again after an error, fed into ``events``.

    Puts ``("job", obj)`` per object or tick (``None``) of ``watch_job``; ``("deleted", err)`` once the job is not
    found; ``("error", err)`` when the API server failed for more than ``patience_s`` (retrying every ``retry_s``)
    or on any other exception, which the printing thread raises. Returns when ``stop`` is set or after either.
    """
    failing_since: float | None = None
    while not stop.is_set():
        try:
            for obj in watch_job():
                failing_since = None
                events.put(("job", obj))
                if stop.is_set():
                    return
        except CliError as err:
            if any("not found" in m for m in err.messages):
                events.put(("deleted", err))
                return
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > patience_s:
                events.put(("error", err))
                return
            time.sleep(retry_s)
        except BaseException as err:  # handed to the printing thread
            events.put(("error", err))
            return


def _pod_key(pod: dict[str, Any]) -> str:
    """The key ``logs -f`` tells pods apart by: the pod's uid, or its name when it has none."""
    return pod["metadata"].get("uid") or pod["metadata"]["name"]


def _pump_log(events: queue.Queue[tuple[str, Any]], open_log: Callable[[dict[str, Any]], Iterator[str]], pod: dict[str, Any]) -> None:
    """The body of one pod's reader thread: each raw line of its followed log into ``events`` as ``("line", (rank, raw))``.

    Ends with ``("ended", (key, why))``: ``why`` None when the stream closed, the sentence of a :class:`CliError`
    (said once, following goes on), or any other exception (raised by the printing thread).
    """
    uid = _pod_key(pod)
    try:
        for raw in open_log(pod):
            events.put(("line", (pod_rank(pod), raw)))
    except CliError as err:
        events.put(("ended", (uid, " ".join(err.messages))))
        return
    except BaseException as err:  # handed to the printing thread
        events.put(("ended", (uid, err)))
        return
    events.put(("ended", (uid, None)))


@dataclass
class _Following:
    """What ``logs -f`` knows while it follows a job: the job as last seen, whether lines get a ``[rank N]`` prefix,
    the pods it has read (``opened``, by :func:`_pod_key`) and those whose stream is still open (``reading``),
    ``shown``, the attempt whose pods it printed last (None before the first), and when the job was first seen
    finished (``ended_at``, monotonic seconds)."""

    job: dict[str, Any] | None = None
    prefix: bool = False
    opened: set[str] = field(default_factory=set)
    reading: set[str] = field(default_factory=set)
    shown: int | None = None
    ended_at: float | None = None

    def line(self, rank: int, raw: str) -> str:
        """The printed form of one raw log line of ``rank``: its timestamp dropped, prefixed when :attr:`prefix`."""
        text = split_timestamp(raw)[1]
        return prefixed(rank, text) if self.prefix else text

    def ended(self, uid: str, why: str | BaseException | None, note: Callable[[str], None]) -> None:
        """A pod's stream closed (:func:`_pump_log`): a sentence is said (``note``), an exception raised."""
        self.reading.discard(uid)
        if isinstance(why, BaseException):
            raise why
        if why:
            note(why)

    def update(
        self, seen: dict[str, Any] | None, name: str, list_pods: Callable[[], list[dict[str, Any]]], rank: int | None, container: str,
        emit: Callable[[str], None],
    ) -> list[dict[str, Any]] | None:
        """The job changed (``seen``) or a tick came (None): the pods to start reading now (:meth:`take`), or None
        when there is no job yet or ``list_pods`` failed this time (the next tick asks again)."""
        self.job = seen if seen is not None else self.job
        if self.job is None:
            return None
        self.prefix = rank is None and int((self.job.get("spec") or {}).get("nodes") or 1) > 1
        try:
            every = list_pods()
        except CliError:  # the API server did not answer this time: the next tick asks again (the watch has patience)
            return None
        return self.take(name, attempt_of(self.job), every, rank, container, emit)

    def take(self, name: str, attempt: int, pods: list[dict[str, Any]], rank: int | None, container: str, emit: Callable[[str], None]) -> list[dict[str, Any]]:
        """The pods of ``attempt`` (of ``rank``, or all when None) among ``pods`` whose log can be read now and is not
        read yet, in rank order, marked as read; the attempt marker is emitted first when the attempt moved on."""
        new = []
        for pod in sorted((p for p in pods if pod_restart(p) == attempt and (rank is None or pod_rank(p) == rank)), key=pod_rank):
            uid = _pod_key(pod)
            if uid in self.opened or not log_ready(pod, container):
                continue
            if self.shown is not None and attempt != self.shown:
                emit(attempt_marker(name, attempt))
            self.shown = attempt
            self.opened.add(uid)
            self.reading.add(uid)
            new.append(pod)
        return new

    def finished(self) -> bool:
        """Whether following is over: the job Succeeded or Failed and its open streams closed, or :data:`DRAIN_S` passed since."""
        if self.job is None or (self.job.get("status") or {}).get("phase") not in FINISHED:
            return False
        self.ended_at = self.ended_at or time.monotonic()
        return not (self.reading and time.monotonic() - self.ended_at < DRAIN_S)  # the ended streams close soon; their last lines come first


def _outcome(name: str, job: dict[str, Any], note: Callable[[str], None]) -> int:
    """Say how the finished ``job`` ended (``note``) and return ``logs -f``'s exit status: 0 Succeeded, 1 Failed."""
    from railtrain.cli.describe import failure_sentence

    if job["status"]["phase"] == "Succeeded":
        note(f"trainingjob {name} succeeded")
        return 0
    note(failure_sentence(job) or f"trainingjob {name} failed")
    return 1
