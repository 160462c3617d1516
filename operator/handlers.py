"""kopf handlers: each one only routes an event to :func:`controller.reconcile_job`.

railtrain uses event handlers and its own periodic resync rather than kopf's
create/update handlers, so kopf never writes progress into the object's status
and never adds a finalizer: the status belongs to the API, and deleting a job
works even while the operator is down (ownerReferences clean up the gang).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
from kubernetes.client.rest import ApiException

from railtrain.crds import contract
from railtrain.operator import controller, metrics
from railtrain.operator.kube import Kube, connect
from railtrain.operator.topology import DEFAULT_LEVELS

log = logging.getLogger("railtrain.operator")


class OperatorConfig:
    """Process-wide settings, filled once by :func:`railtrain.operator.main.run`.

    Attributes:
        kubeconfig: path, or None for $KUBECONFIG / in-cluster.
        resync_seconds: period of the level-triggered resync of unfinished jobs.
        topology_levels: node label keys of the topology levels, widest first.
        namespace: the only namespace watched and admitted, or None for all.
    """

    kubeconfig: str | None = None
    namespace: str | None = None
    resync_seconds: float = 2.0
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS
    kube: Kube | None = None


def _kube() -> Kube:
    if OperatorConfig.kube is None:
        OperatorConfig.kube = Kube(connect(OperatorConfig.kubeconfig))
    return OperatorConfig.kube


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Authenticate kopf's own watches with the operator's kubeconfig, else in-cluster credentials."""
    if OperatorConfig.kubeconfig:
        return kopf.login_with_kubeconfig(**kwargs)  # reads $KUBECONFIG, set by main.run
    return kopf.login_via_client(**kwargs)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Adjust kopf once: no kopf Events, annotations-based storage under our group."""
    settings.posting.enabled = False
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=f"kopf.{contract.API_GROUP}")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=f"kopf.{contract.API_GROUP}")
    settings.watching.server_timeout = 60
    settings.execution.max_workers = 8


@kopf.on.startup()
async def start_resync(memo: kopf.Memo, **_: Any) -> None:
    """Start the periodic resync: capacity freed by any pod can admit a waiting gang."""
    memo.resync = asyncio.create_task(_resync_loop())


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    """Stop the resync task on shutdown."""
    task = memo.get("resync")
    if task:
        task.cancel()


async def _resync_loop() -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(OperatorConfig.resync_seconds)
        try:
            jobs = await loop.run_in_executor(None, _kube().list_jobs, OperatorConfig.namespace)
            for job in jobs:
                if (job.get("status") or {}).get("phase") == "Succeeded" and (job["spec"].get("runPolicy") or {}).get("ttlSecondsAfterFinished") is None:
                    continue  # nothing left to do for a Succeeded job unless its TTL will delete it
                meta = job["metadata"]
                await loop.run_in_executor(None, _reconcile, meta["namespace"], meta["name"], False)
            await loop.run_in_executor(None, lambda: metrics.observe_nodes(_kube().list_nodes()))  # railtrain_quarantined_nodes
            # One admission pass for the whole resync, not one per waiting job.
            await loop.run_in_executor(None, controller.admission_pass, _kube(), None, OperatorConfig.topology_levels, OperatorConfig.namespace)
        except asyncio.CancelledError:
            raise
        except ApiException as err:
            if err.status != 404:
                raise
            log.warning("the TrainingJob CRD is not installed; install crds/trainingjob.yaml")
        except Exception:  # the next pass retries; never let the loop die
            log.exception("resync pass failed")


@kopf.on.event(contract.API_GROUP, contract.API_VERSION, contract.PLURAL)
def on_job_event(type: str | None, name: str, namespace: str, **_: Any) -> None:
    """Any change to a TrainingJob (and the initial listing on startup) → reconcile it."""
    if type == "DELETED":
        return
    _reconcile(namespace, name)


@kopf.on.event("", "v1", "pods", labels={contract.LABEL_JOB_NAME: kopf.PRESENT})
def on_pod_event(labels: dict[str, str], namespace: str, **_: Any) -> None:
    """A gang pod changed (created, bound, Running, finished, deleted) → reconcile its job."""
    _reconcile(namespace, labels[contract.LABEL_JOB_NAME])


@kopf.on.event("", "v1", "nodes")
def on_node_event(type: str | None, name: str, status: dict[str, Any], **_: Any) -> None:
    """A Node deleted or not Ready → reconcile every job with a pod on it at once (node loss, not after the next resync)."""
    ready = next((c for c in (status or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    if type != "DELETED" and ready is not None and ready.get("status") == "True":
        return
    for namespace, job in controller.jobs_on_node(_kube(), name):
        if OperatorConfig.namespace in (None, namespace):
            _reconcile(namespace, job)


def _reconcile(namespace: str, name: str, admit: bool = True) -> None:
    controller.reconcile_job(_kube(), namespace, name, levels=OperatorConfig.topology_levels, admit=admit, watch_namespace=OperatorConfig.namespace)
