"""The railtrain operator as a restartable subprocess, for tests and benchmarks on a local cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from .cluster import stop_process


class OperatorProcess:
    """``python -m railtrain.operator`` against one cluster, logging to a file.

    Args:
        kubeconfig: the cluster's kubeconfig.
        log_path: file the operator's output is appended to (parents created).
        namespace: watch only this namespace; None watches every namespace.
        resync_seconds: ``--resync-seconds``; None keeps the operator's default.
        extra_args: further operator flags, e.g. ``("--topology-preset", "railtrain")``.
        env: further environment variables, e.g. ``{"RAILTRAIN_OPERATOR_METRICS_PORT": "9401"}``.
    """

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        namespace: str | None = None,
        resync_seconds: float | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ):
        self.args = [sys.executable, "-m", "railtrain.operator", "--kubeconfig", str(kubeconfig)]
        if namespace:
            self.args += ["--namespace", namespace]
        if resync_seconds is not None:
            self.args += ["--resync-seconds", str(resync_seconds)]
        self.args += list(extra_args)
        self.env = dict(env or {})
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the process; its output is appended to :attr:`log_path`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=os.environ | self.env | {"PYTHONUNBUFFERED": "1"})

    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise RuntimeError with the log tail if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"the operator exited with {self.proc.returncode}:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crashed operator pod would end."""
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=30)

    def interrupt(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Send ``sig`` (SIGTERM, SIGINT) and wait up to ``timeout`` seconds for the process to end.

        Returns:
            Its exit status, or None when it was still running after ``timeout``
            (it is then killed with SIGKILL).
        """
        if not self.running():
            return self.proc.returncode if self.proc is not None else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.running():
            stop_process(self.proc, grace=20)

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log ("" before the first start)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""
