"""Run the railtrain operator in the foreground (``railtrain operator`` / ``railtrain-operator``).

May import: any operator wing, ``railtrain.crds`` and kopf (the runtime sits above the wings); never the kubernetes client (that is ``operator/kube``) or torch.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Collection

import kopf

from railtrain.operator import handlers, metrics, serve  # noqa: F401 (handlers: registers the kopf handlers)
from railtrain.operator.kube import fence
from railtrain.operator import kube
from railtrain.operator.kube import connection
from railtrain.operator import lease
from railtrain.operator.kube.cached import CachedKube
from railtrain.operator.context import OperatorContext, RuntimeState
from railtrain.operator.reconciler import Reconciler, call_pool
from railtrain.operator.logformat import JsonFormatter
from railtrain.operator.settings import Settings

log = logging.getLogger("railtrain.operator")

STARTUP_WAIT_SECONDS = 60.0
"""How long the first request may keep getting 429/5xx (an API server still starting) before the operator gives up."""
CONNECT_SECONDS = 10.0
"""Longest wait for a connection to the API server (TCP and TLS), within ``--request-seconds``."""


def request_timeout(settings: Settings) -> tuple[float, float]:
    """``(connect, read)`` seconds every API call of the operator waits at most unless it names its own (``--request-seconds``)."""
    return min(CONNECT_SECONDS, settings.request_seconds), settings.request_seconds


class OperatorError(Exception):
    """The operator cannot start or had to stop; ``str()`` is one sentence for the user (exit status 1)."""


def run(settings: Settings) -> None:
    """Run the operator until SIGTERM or SIGINT, which stop it within ``settings.stop_seconds`` (Lease given up; see :func:`railtrain.operator.resync.stop`).

    Builds the API edge and the :class:`~railtrain.operator.reconciler.Reconciler` once, on one bounded pool, and hands
    them to every kopf handler in the memo (:class:`~railtrain.operator.context.OperatorContext`).

    Args:
        settings: the frozen settings, from :func:`railtrain.operator.settings.parse`.

    Raises:
        OperatorError: no usable kubeconfig, or the API server cannot be reached
            or refuses the credentials, or the served CRD lacks a field the operator
            writes (before anything starts); or the API
            server stopped answering for ``settings.unreachable_seconds`` while running.
    """
    configure_logging(json_lines=settings.log_format == "json")
    # Every write is fenced by the Lease, as this process's own clock sees it: by each write verb, and by the client
    # right before the request is sent (operator/kube/fence.py, docs/operator.md "Leader fencing").
    leadership = fence.Leadership(fence.renew_deadline(settings.lease_seconds), f"{settings.lease_namespace}/{lease.LEASE_NAME}")
    try:
        api = preflight(settings.kubeconfig, request_timeout=request_timeout(settings), fence=leadership.check)
    except KeyboardInterrupt:  # Ctrl-C before kopf (and its signal handlers) started
        log.info("the operator stopped before it started")
        return
    check_crd(api)
    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig  # kopf's login handler reads $KUBECONFIG
    pool = call_pool()  # the one bounded pool: the Reconciler's decisions and per-pod calls, and the API edge's creates
    cached = CachedKube(api, settings.namespace, fence=leadership.check, lease_timeout=fence.lease_call_seconds(settings.lease_seconds), pool=pool)
    cached.start()  # leader and standby alike: a standby that takes over plans on a warm cache
    reconciler = Reconciler(cached, settings.plan, settings.namespace, pool=pool)
    ctx = OperatorContext(
        settings=settings, kube=cached, health=serve.Health(stale_seconds=settings.stale_seconds), state=RuntimeState(leadership=leadership), reconciler=reconciler,
    )
    log.info("topology levels, widest first: %s", ", ".join(settings.topology_levels))
    log.info("fabric profile %s: %s", settings.fabric.name, settings.fabric.summary)
    port = os.environ.get(metrics.ENV_PORT, "")
    if port.isdigit() and int(port):
        try:
            serve.start(int(port), ctx.health)
        except OSError as err:
            raise OperatorError(f"${metrics.ENV_PORT}={port}: cannot serve /metrics there: {err.strerror or err}") from None
        log.info("metrics on :%s/metrics, health on /healthz and /readyz", port)
    namespace = settings.namespace
    kopf.run(clusterwide=namespace is None, namespaces=[namespace] if namespace else [], standalone=True, stop_flag=ctx.stop, memo=ctx)
    if ctx.state.fatal:
        cached.stop()
        # The caches' daemon threads still wake when their calls time out (a frozen API server) and would log while the
        # interpreter shuts down, which aborts it (SIGABRT, "could not acquire lock for <stderr>"): they log nothing more.
        logging.disable(logging.CRITICAL)
        raise OperatorError(ctx.state.fatal)


def threads_left(before: Collection[threading.Thread] = ()) -> bool:
    """Whether a thread the operator started (its caches' watches, the cache refresher, the metrics server: each
    named ``railtrain-*``) is still alive, e.g. blocked in a call to an API server that stopped answering. A caller
    that ran :func:`run` in its own process then leaves with :func:`railtrain.crds.process.leave_process`.

    Args:
        before: the threads alive before :func:`run` started (``threading.enumerate()``); they are not this run's
            and never count (a process that ran other railtrain code first, e.g. a test worker, keeps its threads).
    """
    return any(t.name.startswith("railtrain-") and t.is_alive() and t not in before for t in threading.enumerate())


def preflight(
    kubeconfig: str | None, wait_seconds: float = STARTUP_WAIT_SECONDS, request_timeout: tuple[float, float] | None = None,
    fence: Callable[[], None] | None = None,
) -> connection.ApiClient:
    """Connect and make one request, so that a bad kubeconfig or a dead server is one sentence before kopf starts.

    An API server that answers 429 ("storage is (re)initializing", right after
    it starts) or 5xx is waited for, one line per try, up to ``wait_seconds``.

    Args:
        kubeconfig: as ``--kubeconfig`` (None: $KUBECONFIG, ~/.kube/config, in-cluster).
        wait_seconds: how long 429/5xx answers are waited for.
        request_timeout, fence: the client's default timeout of every call and its leadership check before every
            write (:func:`railtrain.operator.kube.connection.connect`).

    Returns:
        The connected client.

    Raises:
        OperatorError: no kubeconfig or in-cluster credentials, a kubeconfig
            that cannot be used, no answer, credentials refused (401/403), or
            still not ready after ``wait_seconds``.
    """
    try:
        api = connection.connect(kubeconfig, request_timeout=request_timeout, fence=fence).api  # the command line's kubeconfig rules and sentences
    except connection.ConnectError as err:
        raise OperatorError(str(err)) from None
    host = api.configuration.host
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            connection.probe(api)
            return api
        except Exception as err:
            if kube.unreachable(err):
                raise OperatorError(connection.sentence(err, host)) from None  # the same sentence as railtrain get's
            if not kube.transient(err):
                raise OperatorError(f"the Kubernetes API server at {host} refused the operator: {kube.describe(err)}") from None
            if time.monotonic() >= deadline:
                raise OperatorError(f"the Kubernetes API server at {host} is still not ready after {wait_seconds:.0f} s: {kube.describe(err)}") from None
            log.warning("the API server at %s is not ready yet (%s); retrying", host, kube.describe(err))
            time.sleep(1.0)


def check_crd(api: connection.ApiClient) -> None:
    """Refuse to start when the served TrainingJob CRD lacks a field the operator writes (:func:`railtrain.operator.kube.crdcheck.check`).

    Raises:
        OperatorError: the CRD is missing, unreadable or stale; the sentence names the missing fields.
    """
    from railtrain.operator.kube import crdcheck

    try:
        crdcheck.check(api)
    except crdcheck.CRDError as err:
        raise OperatorError(str(err)) from None


class QuietKopf(logging.Filter):
    """Keep kopf's routine lines out of the operator's log (a logging filter on the root handler).

    * ``Handler '...' succeeded.`` (one per event, INFO in kopf) → DEBUG;
    * a request kopf retries on its own (``Request attempt ... will retry``,
      ERROR in kopf, e.g. the 429 of an API server still starting) → WARNING.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kopf"):
            return True
        message = record.getMessage()
        if record.levelno == logging.INFO and message.endswith(" succeeded."):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        if record.levelno == logging.ERROR and "will retry" in message:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure_logging(level: int = logging.INFO, json_lines: bool = False) -> None:
    """One line per record (``time LEVEL logger: message``, or one JSON object with ``json_lines``) at ``level``, through :class:`QuietKopf`."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if json_lines:
        for h in logging.getLogger().handlers:
            h.setFormatter(JsonFormatter())
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its per-try "Retrying" lines; the operator logs one line per failed call
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, QuietKopf) for f in h.filters):
            h.addFilter(QuietKopf())
