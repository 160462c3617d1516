"""kopf handlers: each one only routes an event to :func:`controller.reconcile_job`.

railtrain uses event handlers and its own periodic resync rather than kopf's
create/update handlers, so kopf never writes progress into the object's status
and never adds a finalizer: the status belongs to the API, and deleting a job
works even while the operator is down (ownerReferences clean up the gang).

Every handler gets the operator's context as kopf's ``memo``
(:class:`railtrain.operator.context.OperatorContext`: frozen settings, the
API client, the stop signal, the Lease state), given to ``kopf.run(memo=...)``
by :func:`railtrain.operator.main.run`; nothing here is module-level state.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from datetime import datetime, timezone
from typing import Any

import kopf

from railtrain.crds import contract
from railtrain.operator import controller, leader, metrics, progress
from railtrain.operator import kube
from railtrain.operator import lease as peers
from railtrain.operator.context import OperatorContext
from railtrain.operator.kube.errors import NotFound, classify
from railtrain.operator.kube.fence import NotLeader

log = logging.getLogger("railtrain.operator")

MAX_BACKOFF_SECONDS = 30.0
"""Longest wait between resync passes after consecutive failures."""


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff-base storage without the essence: railtrain registers no change-detecting handler.

    kopf builds every event's "essence" (a deep copy of the whole object, then
    trimmed) to diff it against the last handled one for create/update/resume
    handlers. railtrain has only event handlers, which kopf calls without a
    diff, so the essence is never used; building it was a full deep copy of
    every pod and node on every watch event (the largest single cost kopf
    added while a 256-pod gang started, by py-spy; docs/bench-operator.md).
    ``build`` returns an empty essence; ``fetch``/``store`` are kopf's.
    """

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        """An empty essence, whatever the object (takes kopf's arguments; returns ``{}``)."""
        return {}


@kopf.on.login()
def login(memo: OperatorContext, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """Authenticate kopf's own watches with the operator's kubeconfig, else in-cluster credentials."""
    if memo.settings.kubeconfig:
        return kopf.login_with_kubeconfig(**kwargs)  # reads $KUBECONFIG, set by main.run
    return kopf.login_via_client(**kwargs)


WATCH_SECONDS = 60
"""How long one of kopf's WATCH requests lasts (the server's ``timeoutSeconds``); kopf then resumes it."""


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: OperatorContext, **_: Any) -> None:
    """Adjust kopf once: no kopf Events, annotations-based storage under our group, a deadline on every request.

    kopf's own calls get the operator's ``--request-seconds`` (kopf's default is
    5 minutes), and its watches a client timeout :data:`WATCH_SECONDS` + 15 s next to
    the server-side one, so a frozen API server ends them too.
    """
    settings.posting.enabled = False
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=f"kopf.{contract.API_GROUP}")
    settings.persistence.diffbase_storage = NoDiffBase(prefix=f"kopf.{contract.API_GROUP}")
    settings.watching.server_timeout = WATCH_SECONDS
    settings.watching.client_timeout = WATCH_SECONDS + 15
    settings.networking.request_timeout = memo.settings.request_seconds
    settings.networking.connect_timeout = min(10.0, memo.settings.request_seconds)
    settings.execution.max_workers = 8


@kopf.on.startup()
async def start_resync(memo: OperatorContext, **_: Any) -> None:
    """Start the leader election and the periodic resync: capacity freed by any pod can admit a waiting gang."""
    memo.state.wake = asyncio.Event()
    memo.state.progress = progress.Reader()
    memo.state.lease = asyncio.create_task(leader.keep_lease(memo, memo.state.wake.set))
    memo.state.resync = asyncio.create_task(_resync_loop(memo))


@kopf.on.cleanup()
async def stop_resync(memo: OperatorContext, **_: Any) -> None:
    """On shutdown (SIGTERM, SIGINT, or the operator stopping itself): stop the resync, give up the Lease, and make sure the process ends.

    kopf waits for a ``threading.Event`` stop flag in a worker thread of the
    event loop's default executor, and ``asyncio.run`` joins that executor
    before it returns: after a signal nobody set the flag, so the process
    stayed alive, reconciling nothing, until SIGKILL. Setting it here ends that
    thread. A reconcile pass still in flight finishes (each is idempotent); one
    still running :data:`~railtrain.operator.settings.Settings.stop_seconds`
    minus 2 s after the stop began is abandoned by :func:`_exit_when_late`, so
    the whole stop takes at most ``stop_seconds`` (default 10). A leader gives
    the Lease up, so that a standby takes over at its next poll.
    """
    _exit_when_late(memo)
    memo.stop.set()
    for task in (memo.state.lease, memo.state.resync):
        if task:
            task.cancel()
    if memo.state.leader and not memo.state.fatal:
        memo.state.leader = False
        if memo.state.leadership is not None:
            memo.state.leadership.lost()  # a reconcile still in flight writes nothing more
        await asyncio.get_running_loop().run_in_executor(None, leader.release, memo)
        where = f"{memo.settings.lease_namespace}/{peers.LEASE_NAME}"
        log.info("the operator stopped: the Lease %s is given up; a standby (or the next operator) picks up the jobs in flight", where)


def _exit_when_late(ctx: OperatorContext) -> None:
    """Start a daemon timer that ends the process ``stop_seconds - 2`` s (at least 1 s) from now if it is still alive (one WARNING line).

    Exit status: 1 when the operator stopped itself (``state.fatal``), else 0.
    """
    seconds = max(1.0, ctx.settings.stop_seconds - 2.0)

    def late() -> None:
        log.warning("the operator has not stopped %.0f s after it was asked to; exiting now (a reconcile in flight is redone by the next operator)", seconds)
        logging.shutdown()
        os._exit(1 if ctx.state.fatal else 0)

    timer = threading.Timer(seconds, late)
    timer.daemon = True
    timer.start()


async def _resync_loop(ctx: OperatorContext) -> None:
    """Resync every ``resync_seconds`` forever: no error ends it (see :func:`_resync_pass`).

    A pass that fails is logged as one line and the next one waits longer
    (doubling up to :data:`MAX_BACKOFF_SECONDS`, or a quarter of
    ``unreachable_seconds`` when that is shorter); once every pass has failed to
    reach the API server for ``unreachable_seconds``, the operator stops with
    exit status 1 (:func:`railtrain.operator.main.run`).
    """
    loop = asyncio.get_running_loop()
    settings = ctx.settings
    failures, down_since = 0, None
    while True:
        longest = max(settings.resync_seconds, min(MAX_BACKOFF_SECONDS, settings.unreachable_seconds / 4))
        await _nap(ctx, min(settings.resync_seconds * 2**failures, longest))
        try:
            started = loop.time()
            await loop.run_in_executor(None, _resync_pass, ctx)
            if ctx.state.leader:
                ctx.health.passed()  # a standby's passes are its Lease checks (leader.keep_lease)
                metrics.RESYNC_SECONDS.observe(loop.time() - started)
            failures, down_since = 0, None
        except asyncio.CancelledError:
            raise
        except NotLeader:  # the Lease lapsed mid-pass: the fence said so once; the Lease loop steps down at its next poll
            continue
        except Exception as err:  # the next pass retries; never let the loop die
            failures = min(failures + 1, 16)
            if not kube.unreachable(err):
                down_since = None
                level = logging.WARNING if kube.transient(err) else logging.ERROR
                log.log(level, "resync pass failed, retrying: %s", kube.describe(err), exc_info=_trace(err))
                continue
            down_since = down_since or loop.time()
            down = loop.time() - down_since
            log.warning("resync pass failed: the API server does not answer (%.0f s so far): %s", down, kube.describe(err))
            if down >= settings.unreachable_seconds:
                ctx.state.fatal = (
                    f"the Kubernetes API server{_at_host(ctx)} has not answered for {down:.0f} s; "
                    "the operator stops (restart it once the cluster is up)"
                )
                ctx.stop.set()
                return


async def _nap(ctx: OperatorContext, seconds: float) -> None:
    """Sleep ``seconds``, or less when a new leader's first pass is due (``ctx.state.wake``)."""
    wake = ctx.state.wake
    if wake is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(wake.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    wake.clear()


def _at_host(ctx: OperatorContext) -> str:
    host = getattr(getattr(getattr(ctx.kube, "api", None), "configuration", None), "host", None)
    return f" at {host}" if host else ""


def _resync_pass(ctx: OperatorContext) -> None:
    """One resync: reconcile every unfinished job, each on its own, then one admission pass for all.

    An error reconciling one job is that job's alone (one line; the next pass
    retries it); an error reading the job list or running the admission pass
    is raised to the loop. Every pass reads the Lease (one GET), so that an API
    server that is gone is noticed even when every other read comes from the
    watch-fed caches; a standby does nothing else.
    """
    ctx.kube.get_lease(ctx.settings.lease_namespace, peers.LEASE_NAME)
    if not ctx.state.leading():
        return
    try:
        jobs = ctx.kube.list_jobs(ctx.settings.namespace)
    except NotFound:
        log.warning("the TrainingJob CRD is not installed; install crds/trainingjob.yaml")
        return
    for job in jobs:
        if (job.get("status") or {}).get("phase") == "Succeeded" and (job["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") is None:
            continue  # nothing left to do for a Succeeded job unless its TTL will delete it
        meta = job["metadata"]
        try:
            _reconcile(ctx, meta["namespace"], meta["name"], False)
        except NotLeader:
            raise  # the rest of the pass would be refused too
        except Exception as err:
            if kube.transient(err):
                raise  # the server's trouble, not this job's: one line for the pass, not one per job
            log.warning("%s/%s: reconcile failed, retried next pass: %s", meta["namespace"], meta["name"], kube.describe(err), exc_info=_trace(err))
    metrics.observe_nodes(ctx.kube.list_nodes())  # railtrain_quarantined_nodes
    if ctx.state.progress is not None:  # status.progress of Running jobs, read in the background (operator/progress.py)
        ctx.state.progress.poll(ctx.kube, jobs, datetime.now(timezone.utc), controller.job_lock)
    # One admission pass for the whole resync, not one per waiting job.
    controller.admission_pass(ctx.kube, None, ctx.settings.topology_levels, ctx.settings.namespace, ctx.settings.fabric)


@kopf.on.event(contract.API_GROUP, contract.API_VERSION, contract.PLURAL)
def on_job_event(
    type: str | None, name: str, namespace: str, memo: OperatorContext, event: dict[str, Any] | None = None, **_: Any
) -> None:
    """Any change to a TrainingJob (and the initial listing on startup) → reconcile it (the leader only); a deleted one's series are dropped.

    The event's job goes into the jobs cache first (the initial listing's as ``MODIFIED``), so the reconcile,
    which reads the job from it (:meth:`railtrain.operator.kube.cached.CachedKube.read_job`), sees at least this change.
    """
    if type == "DELETED":
        metrics.forget_job(namespace, name)
    if event and isinstance(event.get("object"), dict):
        memo.kube.observe_event("jobs", type or "MODIFIED", event["object"])
    if type == "DELETED" or not memo.state.leading():
        return
    _reconcile_quietly(memo, namespace, name)


@kopf.on.event("", "v1", "pods", labels={contract.LABEL_JOB_NAME: kopf.PRESENT})
def on_pod_event(labels: dict[str, str], namespace: str, memo: OperatorContext, event: dict[str, Any] | None = None, **_: Any) -> None:
    """A gang pod changed (created, bound, Running, finished, deleted) → reconcile its job (the leader only).

    The event's pod goes into the operator's caches first, so the reconcile, which reads the job's pods from them
    (:meth:`railtrain.operator.kube.cached.CachedKube.list_job_pods`), sees at least this change.
    """
    if not memo.state.leading():
        return
    if event and isinstance(event.get("object"), dict) and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
        memo.kube.observe_event("pods", event["type"], event["object"])
    _reconcile_quietly(memo, namespace, labels[contract.LABEL_JOB_NAME])


@kopf.on.event("", "v1", "nodes")
def on_node_event(type: str | None, name: str, status: dict[str, Any], memo: OperatorContext, **_: Any) -> None:
    """A Node deleted or not Ready → reconcile every job with a pod on it at once (node loss, not after the next resync)."""
    ready = next((c for c in (status or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    if not memo.state.leading() or (type != "DELETED" and ready is not None and ready.get("status") == "True"):
        return
    try:
        jobs = controller.jobs_on_node(memo.kube, name)
    except Exception as err:
        log.warning("node %s: could not list its jobs, the resync retries: %s", name, kube.describe(err))
        return
    for namespace, job in jobs:
        if memo.settings.namespace in (None, namespace):
            _reconcile_quietly(memo, namespace, job)


def _reconcile(ctx: OperatorContext, namespace: str, name: str, admit: bool = True, coalesce: bool = False) -> None:
    s = ctx.settings
    controller.reconcile_job(
        ctx.kube, namespace, name, levels=s.topology_levels, admit=admit, watch_namespace=s.namespace, fabric=s.fabric,
        max_quarantines_per_hour=s.max_quarantines_per_hour, coalesce=coalesce,
    )


def _reconcile_quietly(ctx: OperatorContext, namespace: str, name: str) -> None:
    """Reconcile from an event handler, coalesced with a request of the same job that waits to start
    (:mod:`railtrain.operator.coalescer`): an error is one line (the resync retries the job), never a kopf traceback."""
    try:
        _reconcile(ctx, namespace, name, coalesce=True)
    except NotLeader:
        return  # the Lease lapsed: the fence said so once
    except Exception as err:
        log.warning("%s/%s: reconcile failed, the resync retries: %s", namespace, name, kube.describe(err), exc_info=_trace(err))


def _trace(err: BaseException) -> BaseException | None:
    """The exception to log with its traceback: only an unexpected one (a bug, not an API answer) and only with DEBUG on."""
    expected = classify(err) is not None or kube.unreachable(err)
    return err if not expected and log.isEnabledFor(logging.DEBUG) else None
