"""Leaving a process without interpreter finalization, for the operator's and the trainer's entry points (stdlib only).

Both processes end with threads they cannot join: the trainer's gloo threads, kept alive by DTensor's process-wide
caches (issue 27: 12 worker threads and 6 TCP loops at context 2, measured in /proc/self/task after
``destroy_process_group``), and the operator's watch threads, blocked in calls to an API server that stopped
answering. Interpreter finalization then tears them down in no set order: it costs seconds per process, and now and
then aborts the process (SIGABRT; "terminate called without an active exception" in the trainer, a bare abort in
the operator, seen by tests/operator/test_fencing_cluster.py). An entry point that has written everything it owes
leaves through :func:`leave_process` instead.

May import: the standard library only.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn, TextIO


def say(line: str, stream: TextIO | None = None) -> None:
    """Write ``line`` and its newline to ``stream`` (standard error when None) in one write, then flush.

    Every process of a pod (the supervisor, torchrun, each worker) writes to the same pipe, and the runner and the
    kubelet read it line by line. Under ``PYTHONUNBUFFERED=1`` (how the local runner streams output live)
    :func:`print` writes the text and its end as two ``write`` calls, so another process's line can land between
    them: a CI run read ``... at 127.0.0.1:41769step=29`` and took ``41769step=29`` for a port. One ``write`` of
    fewer than ``PIPE_BUF`` (4096) bytes to a pipe is atomic (POSIX ``write(2)``), so a line written here arrives whole.

    Args:
        line: the text, without its newline.
        stream: where to write; standard error when None (looked up at the call, so a redirected stream is used).
    """
    out = sys.stderr if stream is None else stream
    out.write(line + "\n")
    out.flush()


def exit_status(code: object) -> int:
    """The exit status ``sys.exit(code)`` would give: ``None`` is 0, an int is itself, anything else (a message) is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def leave_process(code: int) -> NoReturn:
    """End this process now with exit status ``code``: logging shut down and the standard streams flushed first,
    then ``os._exit`` (no ``atexit`` handlers, no finalization of threads still running).

    Args:
        code: the exit status (0 to 255).
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing left to save
            pass
    os._exit(code)
