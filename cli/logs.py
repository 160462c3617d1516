"""``railtrain logs``: one rank's log, or every rank's interleaved in time order with a ``[rank N]`` prefix.

A TrainingJob has one pod per node rank (label ``railtrain.dev/node-rank``);
its training container's log holds the output of every local process torchrun
started there. Logs are read with the kubelet's timestamps (``timestamps=true``:
each line starts with an RFC 3339 time with up to nanoseconds), which order the
lines of different pods: :func:`merge` is the pure interleaving, :func:`follow`
the live one (one reader thread per pod, lines printed as they arrive).

Which pods: the current gang (``status.restarts``, each pod's restart-count
annotation), or with ``previous`` the latest earlier gang whose pods are still
kept (:func:`pick_pods`).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
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


def follow(readers: dict[int, Callable[[], Iterator[str]]], emit: Callable[[str], None]) -> None:
    """Print every rank's lines as they come, prefixed, until every stream ends (Ctrl-C stops it too).

    Args:
        readers: rank → a function opening that rank's followed log (raw lines with timestamps).
        emit: called with each printed line (``[rank N] text``), from this thread only.

    Raises:
        CliError: the first stream that could not be opened or broke off with an error.
    """
    lines: queue.Queue[tuple[int, str | None, BaseException | None]] = queue.Queue()

    def pump(rank: int, open_: Callable[[], Iterator[str]]) -> None:
        try:
            for raw in open_():
                lines.put((rank, raw, None))
        except BaseException as err:  # handed to the printing thread
            lines.put((rank, None, err))
            return
        lines.put((rank, None, None))

    for rank, open_ in readers.items():
        threading.Thread(target=pump, args=(rank, open_), daemon=True).start()
    open_streams = len(readers)
    while open_streams:
        rank, raw, err = lines.get()
        if raw is None:
            open_streams -= 1
            if err is not None:
                raise err
            continue
        emit(prefixed(rank, split_timestamp(raw)[1]) if len(readers) > 1 else split_timestamp(raw)[1])
