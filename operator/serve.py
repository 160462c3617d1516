"""The operator's HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (liveness) and ``/readyz`` (readiness).

One port serves all three (the Helm chart's probes and its metrics Service use
the container port ``metrics``). ``/healthz`` answers 503 once the last
completed resync pass is older than ``stale_seconds`` (the reconcile loop is
stuck: a deadlock, a call that never returns), so the kubelet restarts the
container; ``/readyz`` answers 200 once a first pass completed and the loop
is not stale. A standby operator's loop completes a pass each time it checks
the Lease, so a healthy standby is live and ready too.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from railtrain.operator import metrics


@dataclass
class Health:
    """When the operator's loop last completed a pass (thread-safe; monotonic clock).

    Args:
        stale_seconds: ``/healthz`` fails once the last pass is older than this.
        clock: seconds of a monotonic clock (tests pass a fake).
    """

    stale_seconds: float = 120.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0, init=False)
    last_pass: float | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def passed(self) -> None:
        """Record a completed pass now (also sets ``railtrain_resync_last_completed_timestamp_seconds``)."""
        with self._lock:
            self.last_pass = self.clock()
        metrics.RESYNC_COMPLETED.set_to_current_time()

    def live(self) -> tuple[bool, str]:
        """``(ok, one line)``: ok while the last pass (or, before the first, the start) is at most ``stale_seconds`` old."""
        with self._lock:
            since = self.last_pass if self.last_pass is not None else self.started
            age = self.clock() - since
        what = "the last resync pass completed" if self.last_pass is not None else "no resync pass completed yet; started"
        ok = age <= self.stale_seconds
        return ok, f"{'ok' if ok else 'stuck'}: {what} {age:.1f} s ago (limit {self.stale_seconds:g} s)"

    def ready(self) -> tuple[bool, str]:
        """``(ok, one line)``: ok once a first pass completed and the loop is live."""
        ok, line = self.live()
        if self.last_pass is None:
            return False, line
        return ok, line


def app(health: Health) -> Callable[..., Iterable[bytes]]:
    """A WSGI app: ``/healthz`` and ``/readyz`` from ``health``, anything else prometheus-client's ``/metrics``."""
    prometheus = make_wsgi_app()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            ok, line = health.live() if path == "/healthz" else health.ready()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
            return [(line + "\n").encode()]
        return prometheus(environ, start_response)

    return serve


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the probes would log a line every few seconds
        pass


def start(port: int, health: Health, addr: str = "0.0.0.0") -> Any:
    """Serve :func:`app` on ``addr:port`` from a daemon thread; returns the server (``.shutdown()`` stops it).

    Raises:
        OSError: the port cannot be bound.
    """
    server = make_server(addr, port, app(health), ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="railtrain-metrics", daemon=True).start()
    return server
