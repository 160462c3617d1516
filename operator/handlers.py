"""kopf handlers: each one only routes an event to the :class:`~railtrain.operator.reconciler.Reconciler` (or, at startup and cleanup, to :mod:`railtrain.operator.resync`).

railtrain uses event handlers and its own periodic resync rather than kopf's
create/update handlers, so kopf never writes progress into the object's status
and never adds a finalizer: the status belongs to the API, and deleting a job
works even while the operator is down (ownerReferences clean up the gang).

Every handler gets the operator's context as kopf's ``memo``
(:class:`railtrain.operator.context.OperatorContext`: frozen settings, the
API client, the Reconciler, the stop signal, the Lease state), given to
``kopf.run(memo=...)`` by :func:`railtrain.operator.main.run`; nothing here is
module-level state.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from railtrain.crds import contract, replica_groups
from railtrain.operator import controller, kueue, metrics, resync
from railtrain.operator import kube
from railtrain.operator.context import OperatorContext
from railtrain.operator.kube.fence import NotLeader

log = logging.getLogger("railtrain.operator")

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
    """Start the leader election and the periodic resync (:func:`railtrain.operator.resync.start`)."""
    await resync.start(memo)


@kopf.on.cleanup()
async def stop_resync(memo: OperatorContext, **_: Any) -> None:
    """On shutdown (SIGTERM, SIGINT, or the operator stopping itself): stop the resync, give up the Lease, end the process
    within ``stop_seconds`` (:func:`railtrain.operator.resync.stop`)."""
    await resync.stop(memo)


@kopf.on.event(contract.API_GROUP, contract.API_VERSION, contract.PLURAL)
def on_job_event(
    type: str | None, name: str, namespace: str, memo: OperatorContext, event: dict[str, Any] | None = None, **_: Any
) -> None:
    """Any change to a TrainingJob (and the initial listing on startup) → reconcile it (the leader only); a deleted one's series and lock are dropped.

    The event's job goes into the jobs cache first (the initial listing's as ``MODIFIED``), so the reconcile,
    which reads the job from it (:meth:`railtrain.operator.kube.cached.CachedKube.read_job`), sees at least this change.
    """
    if type == "DELETED":
        metrics.forget_job(namespace, name)
        memo.reconciler.forget(namespace, name)
    if event and isinstance(event.get("object"), dict):
        memo.kube.observe_event("jobs", type or "MODIFIED", event["object"])
    if type == "DELETED" and memo.state.leading() and event and isinstance(event.get("object"), dict):
        kueue.release(memo.kube, event["object"])  # a Kueue job's Workload goes with it (operator/kueue.py)
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


@kopf.on.event("", "v1", "pods", labels={replica_groups.LABEL_LIGHTHOUSE: kopf.PRESENT})
def on_lighthouse_event(labels: dict[str, str], namespace: str, memo: OperatorContext, **_: Any) -> None:
    """A job's Lighthouse pod changed (deleted, evicted, its node lost) → reconcile its job (the leader only), which creates it again."""
    if not memo.state.leading():
        return
    _reconcile_quietly(memo, namespace, labels[replica_groups.LABEL_LIGHTHOUSE])


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


def _reconcile_quietly(ctx: OperatorContext, namespace: str, name: str) -> None:
    """Reconcile from an event handler, coalesced with a request of the same job that waits to start
    (:mod:`railtrain.operator.coalescer`): an error is one line (the resync retries the job), never a kopf traceback."""
    try:
        ctx.reconciler.reconcile_job(namespace, name, coalesce=True)
    except NotLeader:
        return  # the Lease lapsed: the fence said so once
    except Exception as err:
        log.warning("%s/%s: reconcile failed, the resync retries: %s", namespace, name, kube.describe(err), exc_info=resync.trace(err))
