"""One reconcile of one TrainingJob: read, plan (pure), apply, write status once, emit Events.

Concurrency rules:

* one lock per job, so the pod-event, job-event and resync paths never act on
  the same job at once;
* one process-wide scheduling lock around snapshot → placement → pin, so two
  gangs never both count the same free GPUs. The pins themselves (nodeSelectors
  on unbound pods) are the ledger of promised capacity that the next snapshot
  subtracts, which keeps admission all-or-nothing across jobs and across
  operator restarts.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from datetime import datetime, timezone

from railtrain.operator import cluster as cluster_model
from railtrain.operator import reconcile
from railtrain.operator.kube import Kube
from railtrain.operator.placement import place_gang

log = logging.getLogger("railtrain.operator")

_job_locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_job_locks_guard = threading.Lock()
_scheduling_lock = threading.Lock()


def _lock_for(namespace: str, name: str) -> threading.Lock:
    with _job_locks_guard:
        return _job_locks[(namespace, name)]


def reconcile_job(kube: Kube, namespace: str, name: str, now: datetime | None = None) -> reconcile.Plan | None:
    """Bring one job one step closer to its desired state.

    Args:
        kube: API verbs.
        namespace, name: the TrainingJob.
        now: the current time (UTC); defaults to the wall clock.

    Returns:
        The applied plan, or None when the job no longer exists.

    Raises:
        kubernetes.client.rest.ApiException: the API server refused a write
            other than the tolerated 404/409 (kopf logs it; the next event or
            resync retries).
    """
    with _lock_for(namespace, name):
        job = kube.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None
        pods = kube.list_job_pods(namespace, name)
        placement = None
        request = reconcile.gang_request(job, pods)
        if request is not None:
            with _scheduling_lock:
                spec_gpu = (job["spec"].get("resources") or {}).get("gpuResourceName", "nvidia.com/gpu")
                snap = cluster_model.snapshot(kube.list_nodes(), kube.list_active_pods(), spec_gpu)
                placement = place_gang(request, snap)
                p = reconcile.plan(job, pods, kube.service_exists(namespace, name), now or datetime.now(timezone.utc), placement)
                _apply_pods(kube, namespace, p)
        else:
            p = reconcile.plan(job, pods, kube.service_exists(namespace, name), now or datetime.now(timezone.utc))
            _apply_pods(kube, namespace, p)
        if p.status_changed:
            kube.patch_status(namespace, name, p.status)
            for type_, reason, message in p.events:
                kube.emit_event(job, type_, reason, message)
        log.debug("reconciled %s/%s: phase=%s", namespace, name, p.status.get("phase"))
        return p


def _apply_pods(kube: Kube, namespace: str, p: reconcile.Plan) -> None:
    if p.create_service is not None:
        kube.create(p.create_service)
    for pod in p.create_pods:
        kube.create(pod)
    for name in p.delete_pods:
        kube.delete_pod(namespace, name)
    for name in p.ungate:
        kube.release_pod(namespace, name, p.pin.get(name))
