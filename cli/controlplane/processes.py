"""Processes and ports of a local cluster: liveness and killing by pid (Linux ``/proc``), free ports."""

from __future__ import annotations

import os
import signal
import socket
import time
from contextlib import ExitStack
from pathlib import Path


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports that were free on ``host`` a moment ago.

    The kernel picks them (bind to port 0), so concurrent callers get random,
    almost surely different ports; all sockets stay open until every port is
    picked, so the ports are distinct. Someone may still take one before it is
    used: callers serialise their own starts (see ``LocalCluster.start``).
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _owned(pid: int, marker: str) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def kill_processes(pids: list[int], marker: str, wait: float = 10.0) -> None:
    """SIGKILL the process group of each pid whose command line contains ``marker``.

    Every component leads its own session (``setsid``), so its pid is its
    process-group id. The ``marker`` check (the cluster's state folder appears
    in every component's arguments) guards against pids recycled since a
    pidfile was written. SIGKILL at once: a throwaway cluster's state is
    deleted anyway, and kube-apiserver takes over 15 s to stop on SIGTERM.
    Waits up to ``wait`` seconds until they are gone.
    """
    targets = [p for p in pids if p != os.getpid() and pid_alive(p) and _owned(p, marker)]
    for pid in targets:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(pid_alive(p) for p in targets):
        time.sleep(0.05)
