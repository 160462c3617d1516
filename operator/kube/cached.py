"""The operator's API verbs with watch-fed caches behind the pass-wide reads (:class:`CachedKube`).

An admission pass reads every TrainingJob, every railtrain pod, every active
pod, every Node and the namespaces being deleted. :class:`CachedKube` holds a
:class:`~railtrain.operator.kube.verbs.Kube` and the
:mod:`railtrain.operator.kube.informer` stores: it serves those reads from the
stores once each has synced (through the Kube before that), hands every other
verb to the Kube, and is the Kube's observer (:class:`~railtrain.operator.kube.verbs.Observer`),
so every object the operator itself writes or reads fresh (status patches, pod
creates and patches, GETs, one job's pod LIST) is applied to the stores at once,
under their resourceVersion ordering. So the next pass
sees the ledger the previous one wrote (``status.admission`` and the pinned
pods) without waiting for the watch: docs/scheduling.md, "Watch-fed caches".
Deletes the operator issues are left to the watch (the capacity is seen as
used a little longer: conservative).

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from concurrent.futures import Executor
from typing import Any, Callable, TypeVar

from kubernetes import client

from railtrain.crds import contract
from railtrain.operator.kube.informer import Informer, Store
from railtrain.operator.kube.connection import describe
from railtrain.operator.kube.verbs import Kube

T = TypeVar("T")

log = logging.getLogger("railtrain.operator")

TERMINAL = ("Succeeded", "Failed")
ACTIVE_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
NOT_RAILTRAIN = f"!{contract.LABEL_JOB_NAME}"
"""The active-pods watch's label selector: railtrain's own pods come from the railtrain-pods watch alone."""


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def job_of(pod: dict[str, Any]) -> tuple[str, str] | None:
    """The ``(namespace, TrainingJob name)`` a pod belongs to by its ``railtrain.dev/job-name`` label, or None: the
    railtrain-pods cache's index, so :meth:`CachedKube.list_job_pods` reads one gang without scanning every pod."""
    job = _labels(pod).get(contract.LABEL_JOB_NAME)
    return ((pod.get("metadata") or {}).get("namespace") or "", job) if job is not None else None


def _active(pod: dict[str, Any]) -> bool:
    """The field selector :data:`ACTIVE_SELECTOR` as a test on a pod dict."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL


class CachedKube:
    """The verbs of a :class:`~railtrain.operator.kube.verbs.Kube`, with the pass-wide LISTs and a reconcile's reads
    from watch-fed caches (module docstring).

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        namespace: the operator's ``--namespace`` (its TrainingJobs are cached), or None for all namespaces.
        fence, lease_timeout, pool: the held Kube's (the leadership check before every write, the Lease calls' timeout,
            the pool of its concurrent calls).

    Attributes:
        kube: the :class:`~railtrain.operator.kube.verbs.Kube` every call to the API server goes through (this
            object is its observer); api, core, custom: its clients.
        jobs, pods, active, nodes, namespaces, services: the stores (TrainingJobs; pods labelled
            ``railtrain.dev/job-name``; non-terminal pods without that label; Nodes; Namespaces;
            Services, of the operator's namespace or all).
            :meth:`list_active_pods` is ``active`` plus the non-terminal pods of ``pods``: every
            railtrain pod event is decoded once, not by two watches, and the ledger's two views of
            a railtrain pod (its job's gang, the capacity it holds) come from one store, so they
            can no longer disagree about whether it is gone.
        informers: their LIST+WATCH threads, by store name.
    """

    def __init__(
        self, api_client: client.ApiClient, namespace: str | None = None, fence: Callable[[], None] | None = None, lease_timeout: float | None = None,
        pool: Executor | None = None,
    ):
        self.kube = Kube(api_client, fence=fence, lease_timeout=lease_timeout, pool=pool, observer=self)
        self.api, self.core, self.custom = self.kube.api, self.kube.core, self.kube.custom
        self.namespace = namespace
        self.jobs = Store(keep=(lambda o: (o.get("metadata") or {}).get("namespace") == namespace) if namespace else None)
        self.pods = Store(keep=lambda o: contract.LABEL_JOB_NAME in _labels(o), index=job_of)
        self.active = Store(keep=lambda o: _active(o) and contract.LABEL_JOB_NAME not in _labels(o))
        self.nodes = Store()
        self.namespaces = Store()
        self.services = Store()
        self._pending: set[str] = set()  # caches to list again before they serve reads (:meth:`refresh`)
        self._guard = threading.Lock()
        group = (contract.API_GROUP, contract.API_VERSION)
        self.informers = {
            "jobs": Informer("trainingjobs", self.custom.list_namespaced_custom_object, self.jobs, *group, namespace, contract.PLURAL)
            if namespace else Informer("trainingjobs", self.custom.list_cluster_custom_object, self.jobs, *group, contract.PLURAL),
            "pods": Informer("railtrain-pods", self.core.list_pod_for_all_namespaces, self.pods, label_selector=contract.LABEL_JOB_NAME),
            "active": Informer("active-pods", self.core.list_pod_for_all_namespaces, self.active, field_selector=ACTIVE_SELECTOR, label_selector=NOT_RAILTRAIN),
            "nodes": Informer("nodes", self.core.list_node, self.nodes),
            "namespaces": Informer("namespaces", self.core.list_namespace, self.namespaces),
            "services": Informer("services", self.core.list_namespaced_service, self.services, namespace)
            if namespace else Informer("services", self.core.list_service_for_all_namespaces, self.services),
        }

    def start(self) -> None:
        """Start every informer thread (daemon threads; each LISTs, then WATCHes)."""
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def synced(self, *names: str) -> bool:
        """Whether the named caches (all when none is named) have finished their first LIST, and a LIST since the last :meth:`refresh`."""
        return all(self.informers[n].synced.is_set() and n not in self._pending for n in names or self.informers)

    def refresh(self) -> None:
        """Serve every read from the API until each cache has listed again (in a background thread).

        Called when this operator starts leading: the previous leader's last
        writes reached this process only through its watches, which may lag
        (or be in a relist's backoff); a LIST taken after the Lease changed
        hands is a consistent read that includes them.
        """
        with self._guard:
            self._pending = set(self.informers)
        threading.Thread(target=self._relist_pending, name="railtrain-cache-refresh", daemon=True).start()

    def _relist_pending(self) -> None:
        wait = 1.0
        while self._pending:
            for name in sorted(self._pending):
                try:
                    self.informers[name].relist()
                    with self._guard:
                        self._pending.discard(name)
                except Exception as err:  # reads stay on the API meanwhile
                    log.info("cache of %s: could not list again (%s); retrying", name, describe(err))
            if self._pending:
                time.sleep(wait)
                wait = min(30.0, wait * 2)

    # --- write-through and read-through -------------------------------------------------
    def observe(self, kind: str, obj: dict[str, Any], mine: bool = False) -> None:
        """Apply an object the operator just wrote or read to its caches (a copy unless ``mine``)."""
        obj = obj if mine else copy.deepcopy(obj)
        if kind == "jobs":
            self.jobs.apply("MODIFIED", obj)
        elif kind == "pods":
            self.pods.apply("MODIFIED", obj)
            self.active.apply("MODIFIED", obj)
        elif kind == "nodes":
            self.nodes.apply("MODIFIED", obj)
        elif kind == "services":
            self.services.apply("MODIFIED", obj)

    def observe_event(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        """Apply a watch event an event handler received (kopf's watch, not the informers') to the caches, under the
        same resourceVersion ordering, so the reconcile it triggers reads a cache at least as new as the event.

        Only the top level and ``metadata`` are copied (the store trims ``metadata.managedFields`` in place); the rest
        is shared with kopf's event, which neither kopf nor the stores' readers change. A deep copy of every pod event
        cost as much CPU as a reconcile of the pod's gang (py-spy, a 256-pod gang start).
        """
        obj = {**obj, "metadata": dict(obj.get("metadata") or {})}
        if kind == "pods":
            self.pods.apply(type_, obj)
            self.active.apply(type_, obj)
        elif kind == "jobs":
            self.jobs.apply(type_, obj)
        elif kind == "services":  # the operator's own delete of a rendezvous Service (Kube.delete_service)
            self.services.apply(type_, obj)

    def observe_job_pods(self, namespace: str, name: str, raw: bytes) -> None:
        """Apply a fresh LIST of one job's pods (its JSON, parsed here into dicts of the caches' own): each pod as
        read, and a cached pod of the job it lacks is gone (unless the cache holds a version newer than the list)."""
        listing = json.loads(raw)
        items = listing.get("items") or []
        rv = (listing.get("metadata") or {}).get("resourceVersion")
        for pod in items:
            self.pods.apply("MODIFIED", pod)
            self.active.apply("MODIFIED", pod)

        def of_job(pod: dict[str, Any]) -> bool:
            return job_of(pod) == (namespace, name)

        keys = [((p.get("metadata") or {}).get("namespace") or "", (p.get("metadata") or {}).get("name") or "") for p in items]
        self.pods.forget_absent(keys, of_job, rv)
        self.active.forget_absent(keys, of_job, rv)

    def set_node_taints(self, node: dict[str, Any], taints: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> bool:
        """:meth:`Kube.set_node_taints`, then the node read again into the cache (a quarantined node is never offered again)."""
        changed = self.kube.set_node_taints(node, taints, annotations)
        if changed:
            self.kube.get_node(node["metadata"]["name"])
        return changed

    # --- a reconcile's reads, from the caches once synced -------------------------------------
    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job from the jobs cache once it has synced (a copy), else :meth:`Kube.get_job`; also a GET when the cache
        lacks it (just created, or gone: the GET answers None).

        The cache is never older than the operator's own status writes (applied under the job's
        lock before it is released) nor than the job event that asked for the reconcile (the
        handler applies it first, :meth:`observe_event`), as client-go controllers read their
        informer's lister. A GET per reconcile was one API round trip per pod event of a
        starting gang, with the job's whole status (a 256-rank admission record) encoded by the
        server and decoded here each time. The admission write (:meth:`railtrain.operator.reconciler.Reconciler._decide`)
        still reads the job fresh.
        """
        if self.synced("jobs"):
            cached = self.jobs.get((namespace, name))
            if cached is not None:
                return copy.deepcopy(cached)
        return self.kube.get_job(namespace, name)

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job's rendezvous Service from the Services cache once it has synced (a copy), else a GET.

        The operator's own create is in the cache at once (:meth:`observe`); a Service someone
        else creates or deletes is seen when the watch delivers it, and the plan acts on it at the
        next reconcile (a create that meets a Service not yet cached answers 409 and changes nothing).
        """
        if not self.synced("services"):
            return self.kube.get_service(namespace, name)
        found = self.services.get((namespace, contract.service_name(name)))
        return copy.deepcopy(found) if found is not None else None

    # --- pass-wide reads, from the caches once synced ----------------------------------------
    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        if not self.synced("jobs") or (self.namespace and namespace != self.namespace):
            return self.kube.list_jobs(namespace)
        return [j for j in self.jobs.items() if namespace is None or j["metadata"].get("namespace") == namespace]

    def list_railtrain_pods(self, node: str | None = None) -> list[dict[str, Any]]:
        if not self.synced("pods"):
            return self.kube.list_railtrain_pods(node)
        pods = self.pods.items()
        return [p for p in pods if (p.get("spec") or {}).get("nodeName") == node] if node else pods

    def list_job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """One job's pods from the pods cache once it has synced (the cache's own dicts: callers must not change them), else a LIST.

        A reconcile used to LIST its job's pods from the API server: for a gang of
        256 pods that is 256 objects encoded by the API server per reconcile, and a
        gang start asks for hundreds of reconciles (docs/bench-operator.md). The
        cache is never older than the event that asked for the reconcile
        (:meth:`observe_event`) nor than the operator's own writes (:meth:`observe`).
        They are found through the cache's index by job (:func:`job_of`), not by a scan of every
        railtrain pod: at 10,000 GPUs a reconcile per pod event scanning all of them costs
        O(pods in the cluster) each. The pods are not copied: the reconcile plan only reads them (its property tests,
        tests/operator/test_phase_invariants.py and test_recovery_property.py, check that it
        changes none), as the admission pass only reads :meth:`list_railtrain_pods`; a deep
        copy of a 256-pod gang per reconcile was most of the reconcile's CPU (py-spy).
        """
        if not self.synced("pods"):
            return self.kube.list_job_pods(namespace, name)
        mine = self.pods.indexed((namespace, name))
        return sorted(mine, key=lambda p: p["metadata"]["name"])  # in the API's order: by name

    def pods_named(self, namespace: str, names: list[str], cached: bool = False) -> list[dict[str, Any]]:
        """:meth:`Kube.pods_named`; with ``cached``, from the railtrain-pods and active-pods caches once both synced
        (copies): every pod that can hold a name except a finished pod without railtrain's label, whose name the
        rank's create then finds taken (409)."""
        if not cached or not self.synced("pods", "active"):
            return self.kube.pods_named(namespace, names, cached)
        found = [self.pods.get((namespace, n)) or self.active.get((namespace, n)) for n in names]
        return [copy.deepcopy(p) for p in found if p is not None]

    def list_active_pods(self) -> list[dict[str, Any]]:
        if not self.synced("active", "pods"):
            return self.kube.list_active_pods()
        return self.active.items() + [p for p in self.pods.items() if _active(p)]

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes.items() if self.synced("nodes") else self.kube.list_nodes()

    def terminating_namespaces(self) -> set[str]:
        if not self.synced("namespaces"):
            return self.kube.terminating_namespaces()
        return {ns["metadata"]["name"] for ns in self.namespaces.items() if (ns.get("status") or {}).get("phase") == "Terminating"}

    # --- every other verb: the Kube's own (writes, GETs, the Lease, Events) ----------------------------
    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A fresh GET (:meth:`Kube.get_job`), applied to the cache."""
        return self.kube.get_job(namespace, name)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A fresh GET (:meth:`Kube.get_pod`), applied to the cache."""
        return self.kube.get_pod(namespace, name)

    def get_node(self, name: str) -> dict[str, Any] | None:
        """A fresh GET (:meth:`Kube.get_node`), applied to the cache."""
        return self.kube.get_node(name)

    def create(self, manifest: dict[str, Any]) -> bool:
        """:meth:`Kube.create`."""
        return self.kube.create(manifest)

    def create_many(self, manifests: list[dict[str, Any]]) -> list[bool]:
        """:meth:`Kube.create_many`."""
        return self.kube.create_many(manifests)

    def each(self, calls: list[Callable[[], T]]) -> list[T]:
        """:meth:`Kube.each`."""
        return self.kube.each(calls)

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        """:meth:`Kube.delete_pod`."""
        self.kube.delete_pod(namespace, name, uid)

    def release_pod(self, namespace: str, name: str, node: str | None, annotations: dict[str, str] | None = None) -> None:
        """:meth:`Kube.release_pod`."""
        self.kube.release_pod(namespace, name, node, annotations)

    def label_pod(self, namespace: str, name: str, labels: dict[str, str | None], uid: str | None = None) -> bool:
        """:meth:`Kube.label_pod`."""
        return self.kube.label_pod(namespace, name, labels, uid)

    def force_delete_pod(self, namespace: str, name: str) -> None:
        """:meth:`Kube.force_delete_pod`."""
        self.kube.force_delete_pod(namespace, name)

    def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        """:meth:`Kube.delete_job`."""
        return self.kube.delete_job(namespace, name, uid)

    def delete_service(self, namespace: str, name: str, uid: str) -> bool:
        """:meth:`Kube.delete_service` (its answer is applied to the cache)."""
        return self.kube.delete_service(namespace, name, uid)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None) -> bool:
        """:meth:`Kube.patch_status` (the written job is applied to the cache)."""
        return self.kube.patch_status(namespace, name, status, resource_version)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """:meth:`Kube.get_lease`."""
        return self.kube.get_lease(namespace, name)

    def put_lease(self, namespace: str, name: str, spec: dict[str, Any], seen: dict[str, Any] | None) -> bool:
        """:meth:`Kube.put_lease`."""
        return self.kube.put_lease(namespace, name, spec, seen)

    def emit_event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """:meth:`Kube.emit_event`."""
        self.kube.emit_event(job, type_, reason, message)
