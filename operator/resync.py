"""The operator's background work: the periodic resync with its backoff, the stop when the API server is gone, and a clean shutdown.

:func:`start` (kopf's startup) starts the leader election and :func:`loop`;
:func:`stop` (kopf's cleanup) ends them, gives the Lease up and makes sure the
process ends. Every ``resync_seconds`` the loop runs :func:`resync_pass`: the
leader reconciles every unfinished job through the
:class:`~railtrain.operator.reconciler.Reconciler` in the memo, then runs one
admission pass, so capacity freed by any pod can admit a waiting gang even when
no event says so. A pass that fails waits longer before the next (doubling up to
:data:`MAX_BACKOFF_SECONDS`); once no pass has reached the API server for
``unreachable_seconds`` the operator stops itself with exit status 1
(``state.fatal``; :func:`railtrain.operator.main.run`).

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from datetime import datetime
from typing import Any

from railtrain.operator import kube, kueue, leader, metrics, progress
from railtrain.operator import lease
from railtrain.operator.context import OperatorContext
from railtrain.operator.job import workload
from railtrain.operator.job.conditions import SUCCEEDED
from railtrain.operator.job.observed import observe_job
from railtrain.operator.kube.errors import NotFound, WebhookFailed, classify
from railtrain.operator.kube.fence import NotLeader

log = logging.getLogger("railtrain.operator")


MAX_BACKOFF_SECONDS = 30.0
"""Longest wait between resync passes after consecutive failures."""
KUEUE_FINISHED_RESYNC_SECONDS = 600.0
"""How long after a Kueue job succeeded the resync still reconciles it (:func:`resyncs`)."""


def resyncs(job: dict[str, Any], now: datetime) -> bool:
    """Whether the resync reconciles ``job`` (pure; ``job`` as read, ``now`` aware).

    Every job but a Succeeded one. A Succeeded job only while there is something left to do: its
    ``ttlSecondsAfterFinished`` will delete it; or it names a Kueue LocalQueue and finished less than
    :data:`KUEUE_FINISHED_RESYNC_SECONDS` ago (or says no ``completionTime``): its Workload keeps railtrain's
    finalizer until the job's last pod has ended (operator/kueue.py, ``_finish``), and that pod's own event, which
    would reconcile it, is lost when the operator restarts or leadership moves in between. Past that window its
    pods are long gone (their grace period is far shorter), so a finished job costs the resync nothing for good.
    """
    seen = observe_job(job)
    if seen.status.phase != SUCCEEDED or (job["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") is not None:
        return True
    if workload.queue_name(job) is None:
        return False
    finished = seen.status.completion_time
    return finished is None or (now - finished).total_seconds() < KUEUE_FINISHED_RESYNC_SECONDS


async def start(memo: OperatorContext) -> None:
    """Start the leader election and the periodic resync: capacity freed by any pod can admit a waiting gang."""
    memo.state.wake = asyncio.Event()
    memo.state.progress = progress.Reader(quarantine_limit=memo.settings.max_quarantines_per_hour)
    memo.state.lease = asyncio.create_task(leader.keep_lease(memo, memo.state.wake.set))
    memo.state.resync = asyncio.create_task(loop(memo))


async def stop(memo: OperatorContext) -> None:
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
        if not await asyncio.get_running_loop().run_in_executor(None, leader.release, memo):
            return  # release() said why in one line; the Lease expires by itself
        where = f"{memo.settings.lease_namespace}/{lease.LEASE_NAME}"
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


async def loop(ctx: OperatorContext) -> None:
    """Resync every ``resync_seconds`` forever: no error ends it (see :func:`resync_pass`).

    A pass that fails is logged as one line and the next one waits longer
    (doubling up to :data:`MAX_BACKOFF_SECONDS`, or a quarter of
    ``unreachable_seconds`` when that is shorter); once every pass has failed to
    reach the API server for ``unreachable_seconds``, the operator stops with
    exit status 1 (:func:`railtrain.operator.main.run`).
    """
    running = asyncio.get_running_loop()
    settings = ctx.settings
    failures, down_since = 0, None
    while True:
        longest = max(settings.resync_seconds, min(MAX_BACKOFF_SECONDS, settings.unreachable_seconds / 4))
        await _nap(ctx, min(settings.resync_seconds * 2**failures, longest))
        try:
            started = running.time()
            await running.run_in_executor(None, resync_pass, ctx)
            if ctx.state.leader:
                ctx.health.passed()  # a standby's passes are its Lease checks (leader.keep_lease)
                metrics.RESYNC_SECONDS.observe(running.time() - started)
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
                log.log(level, "resync pass failed, retrying: %s", kube.describe(err), exc_info=trace(err))
                continue
            down_since = down_since or running.time()
            down = running.time() - down_since
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


def resync_pass(ctx: OperatorContext) -> None:
    """One resync: reconcile every job :func:`resyncs` names (the unfinished ones), each on its own, then one admission pass for all.

    An error reconciling one job is that job's alone (one line; the next pass
    retries it), an admission webhook's failure too (:class:`~railtrain.operator.kube.errors.WebhookFailed`);
    the API server's own trouble (429, other 5xx, no answer), an error reading the job list or running the
    admission pass is raised to the loop. On its first leading pass and every
    :data:`railtrain.operator.kueue.ORPHAN_SWEEP_SECONDS` after, the leader also releases the Workloads whose
    TrainingJob is gone (:func:`railtrain.operator.kueue.sweep`, which never raises). Every pass reads the Lease (one GET), so that an API
    server that is gone is noticed even when every other read comes from the
    watch-fed caches; a standby does nothing else.
    """
    ctx.kube.get_lease(ctx.settings.lease_namespace, lease.LEASE_NAME)
    if not ctx.state.leading():
        return
    try:
        jobs = ctx.kube.list_jobs(ctx.settings.namespace)
    except NotFound:
        log.warning("the TrainingJob CRD is not installed; install crds/trainingjob.yaml")
        return
    now = ctx.reconciler.now()
    for job in jobs:
        if not resyncs(job, now):
            continue  # nothing left to do for this Succeeded job
        meta = job["metadata"]
        try:
            ctx.reconciler.reconcile_job(meta["namespace"], meta["name"], admit=False)
        except NotLeader:
            raise  # the rest of the pass would be refused too
        except Exception as err:
            if kube.transient(err) and not isinstance(classify(err), WebhookFailed):
                raise  # the server's trouble, not this job's: one line for the pass, not one per job
            # (an admission webhook that fails, e.g. Kueue's while it restarts, is the trouble of the jobs it covers:
            # the other jobs' reconciles, the progress reads and the admission pass go on)
            log.warning("%s/%s: reconcile failed, retried next pass: %s", meta["namespace"], meta["name"], kube.describe(err), exc_info=trace(err))
    if sweep_due(ctx.state.swept, time.monotonic()):
        ctx.state.swept = time.monotonic()  # a pass that fails below sweeps again only after the period
        kueue.sweep(ctx.kube, jobs, ctx.settings.namespace)  # Workloads whose job is gone (its DELETED event missed)
    metrics.observe_nodes(ctx.kube.list_nodes())  # railtrain_quarantined_nodes
    if ctx.state.progress is not None:  # status.progress of Running jobs, read in the background (operator/progress.py)
        ctx.state.progress.poll(ctx.kube, jobs, ctx.reconciler.now(), ctx.reconciler.job_lock)
    # One admission pass for the whole resync, not one per waiting job.
    ctx.reconciler.admission_pass()


def sweep_due(swept: float | None, now: float) -> bool:
    """Whether this pass looks for orphaned Workloads (pure; ``swept``/``now``: ``time.monotonic()`` seconds): the
    first leading pass, then once every :data:`railtrain.operator.kueue.ORPHAN_SWEEP_SECONDS`."""
    return swept is None or now - swept >= kueue.ORPHAN_SWEEP_SECONDS


def trace(err: BaseException) -> BaseException | None:
    """The exception to log with its traceback: only an unexpected one (a bug, not an API answer) and only with DEBUG on."""
    expected = classify(err) is not None or kube.unreachable(err)
    return err if not expected and log.isEnabledFor(logging.DEBUG) else None
