"""The one module that talks to the Kubernetes API server (official client, sync).

Everything here is a thin verb over the REST API returning plain camelCase
dicts; decisions are made in :mod:`railtrain.operator.job.planner`. Connecting,
error sentences and the guarded taint write are the client edge it shares with
the command line (:mod:`railtrain.operator.kube.connection`). Creates
tolerate 409 AlreadyExists and deletes tolerate 404 NotFound, which is what
makes reconciles idempotent across operator restarts. Every client call goes
through :func:`railtrain.operator.kube.errors.call`, so what a verb raises is a
typed :class:`~railtrain.operator.kube.errors.ApiError`; a read of an object that
may be missing answers None (:func:`~railtrain.operator.kube.errors.or_none`).

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

import json
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, TypeVar

from kubernetes import client

from railtrain.crds import contract
from railtrain.crds import computedomain
from railtrain.crds import labels
from railtrain.operator.kube.errors import ApiError, Conflict, Forbidden, Invalid, NotFound, Rejected, call, or_none
from railtrain.operator.kube.fence import NotLeader
from railtrain.operator.kube.connection import patch_node
from railtrain.operator.kube.events import event_manifest
from railtrain.operator.kube.pool import CREATE_CONCURRENCY, each

__all__ = ["FIELD_MANAGER", "Kube", "Observer"]

T = TypeVar("T")

FIELD_MANAGER = "railtrain-operator"


class Observer(Protocol):
    """What is told of every object a :class:`Kube` reads fresh or writes: the operator's watch-fed caches
    (:class:`railtrain.operator.kube.cached.CachedKube`), which apply it at once (read-your-writes)."""

    def observe(self, kind: str, obj: dict[str, Any], mine: bool = False) -> None:
        """An object just read or written (``kind``: ``"jobs"``, ``"pods"``, ``"nodes"`` or ``"services"``); ``mine``: the dict is handed to no one else."""

    def observe_event(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        """A watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of ``obj``; here the operator's own delete of a Service."""

    def observe_job_pods(self, namespace: str, name: str, raw: bytes) -> None:
        """A fresh LIST of one job's pods (the answer's JSON, with its resourceVersion)."""


class Kube:
    """Verbs over the API server used by the operator.

    Every write verb (creates, deletes, patches, the status write, Events) first
    calls ``fence``: the operator's leadership check
    (:meth:`railtrain.operator.kube.fence.Leadership.check`), which raises
    :class:`~railtrain.operator.kube.fence.NotLeader` once this process may no longer
    act, so a stepped-down or frozen-and-resumed leader writes nothing (the
    operator's client checks again right before a request is sent:
    :class:`railtrain.operator.kube.connection.GuardedApiClient`). The Lease verbs are
    not fenced (they are how leadership is won) and wait at most ``lease_timeout``
    for an answer.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``; see
            :func:`railtrain.operator.kube.connection.connect` (its ``request_timeout``
            bounds every other call).
        fence: called before every write; None writes unchecked (the command line, tests).
        lease_timeout: seconds one Lease read or write may take
            (:func:`railtrain.operator.kube.fence.lease_call_seconds`); None: the client's default.
        pool: runs the concurrent calls of :meth:`create_many` and :meth:`each` (whoever passes it owns it);
            None: a pool of this client's own, :data:`CREATE_CONCURRENCY` threads (started as needed).
        observer: told of every object read fresh or written (:class:`Observer`: the operator's caches); None: no one.
    """

    def __init__(
        self, api_client: client.ApiClient, fence: Callable[[], None] | None = None, lease_timeout: float | None = None,
        pool: Executor | None = None, observer: Observer | None = None,
    ):
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.fence = fence
        self.lease_timeout = lease_timeout
        self.pool = pool or ThreadPoolExecutor(max_workers=CREATE_CONCURRENCY, thread_name_prefix="railtrain-api")
        self.observer = observer

    def _fenced(self) -> None:
        """Raise :class:`~railtrain.operator.kube.fence.NotLeader` when this process may not write now (``fence``)."""
        if self.fence is not None:
            self.fence()

    # --- reads ---------------------------------------------------------------
    def _json(self, response: Any) -> Any:
        return json.loads(response.data)

    def _saw(self, kind: str, obj: Any, mine: bool = False) -> None:
        """Tell the :attr:`observer` of an object read fresh or written (a dict; anything else is ignored)."""
        if self.observer is not None and isinstance(obj, dict):
            self.observer.observe(kind, obj, mine)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The TrainingJob object, or None when it does not exist."""
        job = or_none(self.custom.get_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name)
        self._saw("jobs", job)
        return job

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The TrainingJob a reconcile plans on, or None when it does not exist: here a GET (:meth:`get_job`); a
        caller may change the dict it gets. :class:`railtrain.operator.kube.cached.CachedKube` answers from its cache."""
        return self.get_job(namespace, name)

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every TrainingJob in ``namespace`` (all namespaces when None)."""
        if namespace:
            res = call(self.custom.list_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL)
        else:
            res = call(self.custom.list_cluster_custom_object, contract.API_GROUP, contract.API_VERSION, contract.PLURAL)
        return res.get("items", [])

    def list_job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Pods labelled with the job's name, as dicts."""
        res = call(self.core.list_namespaced_pod, namespace, label_selector=f"{contract.LABEL_JOB_NAME}={name}", _preload_content=False)
        if self.observer is not None:
            self.observer.observe_job_pods(namespace, name, res.data)
        return self._json(res)["items"]

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One pod by name as a dict, or None when it does not exist."""
        res = or_none(self.core.read_namespaced_pod, name, namespace, _preload_content=False)
        pod = None if res is None else self._json(res)
        self._saw("pods", pod)
        return pod

    def pods_named(self, namespace: str, names: list[str], cached: bool = False) -> list[dict[str, Any]]:
        """The pods of ``namespace`` with these names that exist, in ``names`` order (one GET each here).

        Args:
            cached: a lookup in the operator's caches is enough
                (:meth:`railtrain.operator.kube.cached.CachedKube.pods_named`); this class has none.
        """
        found = [self.get_pod(namespace, name) for name in names]
        return [pod for pod in found if pod is not None]

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job's rendezvous Service as a dict (whoever owns it), or None when it does not exist."""
        res = or_none(self.core.read_namespaced_service, contract.service_name(name), namespace, _preload_content=False)
        return None if res is None else self._json(res)

    def terminating_namespaces(self) -> set[str]:
        """Names of namespaces being deleted (no new pods can be created there)."""
        res = self._json(call(self.core.list_namespace, _preload_content=False))["items"]
        return {ns["metadata"]["name"] for ns in res if (ns.get("status") or {}).get("phase") == "Terminating"}

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every Node, as dicts."""
        return self._json(call(self.core.list_node, _preload_content=False))["items"]

    def list_railtrain_pods(self, node: str | None = None) -> list[dict[str, Any]]:
        """Every pod of every TrainingJob, in all namespaces (label ``railtrain.dev/job-name`` present); only those bound to ``node`` if given."""
        selector = {"field_selector": f"spec.nodeName={node}"} if node else {}
        res = call(self.core.list_pod_for_all_namespaces, label_selector=contract.LABEL_JOB_NAME, _preload_content=False, **selector)
        return self._json(res)["items"]

    def list_active_pods(self) -> list[dict[str, Any]]:
        """Every non-terminal pod in the cluster (they hold node capacity)."""
        res = call(self.core.list_pod_for_all_namespaces, field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False)
        return self._json(res)["items"]

    # --- writes ----------------------------------------------------------------
    def create(self, manifest: dict[str, Any]) -> bool:
        """Create a Pod or Service; returns False when it already existed or its namespace is being deleted.

        Raises:
            Rejected: the server refused the object as invalid (400/422), e.g. a
                quantity it cannot parse ("cannot be handled as a Pod").
            railtrain.operator.kube.errors.ApiError: any other refusal (429, 5xx, 403 ...).
        """
        self._fenced()
        ns = manifest["metadata"]["namespace"]
        try:
            if manifest["kind"] == "Pod":
                self._saw("pods", self._json(call(self.core.create_namespaced_pod, ns, manifest, field_manager=FIELD_MANAGER, _preload_content=False)), mine=True)
            elif manifest["kind"] == "Service":
                self._saw("services", self._json(call(self.core.create_namespaced_service, ns, manifest, field_manager=FIELD_MANAGER, _preload_content=False)), mine=True)
            elif manifest["kind"] == computedomain.KIND:
                call(
                    self.custom.create_namespaced_custom_object,
                    computedomain.GROUP, computedomain.VERSION, ns, computedomain.PLURAL, manifest, field_manager=FIELD_MANAGER, _preload_content=False,
                )
            else:
                raise ValueError(f"cannot create kind {manifest['kind']}")
            return True
        except Conflict:
            return False
        except Forbidden as err:
            if "NamespaceTerminating" in str(err.body):
                return False
            raise
        except Invalid as err:
            raise Rejected(manifest["kind"], manifest["metadata"]["name"], err.status, err.message) from None
        except NotFound:
            if manifest["kind"] != computedomain.KIND:
                raise
            raise Rejected(
                computedomain.KIND, manifest["metadata"]["name"], 404,
                f"the {computedomain.KIND} API ({computedomain.GROUP}/{computedomain.VERSION}) is not installed; spec.topology.nvlinkDomain needs the "
                "NVIDIA DRA driver for GPUs with ComputeDomains enabled",
            ) from None

    def create_many(self, manifests: list[dict[str, Any]]) -> list[bool]:
        """Create every object of ``manifests`` (one POST each) at once on this client's bounded :attr:`pool` (:func:`each`).

        Returns:
            :meth:`create`'s answer per manifest, in order, once every create has been answered.

        Raises:
            The first error of :meth:`create` (in manifest order), after every create has finished.
        """
        if len(manifests) > 1:
            self._fenced()  # and again before each create
        return self.each([lambda m=m: self.create(m) for m in manifests])

    def each(self, calls: list[Callable[[], T]]) -> list[T]:
        """Run independent calls (e.g. one gang's deletes) at once on this client's :attr:`pool`: :func:`each`."""
        return each(calls, self.pool)

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete a pod; a pod that is already gone is fine.

        Args:
            uid: when given, delete only the pod with this uid (a precondition:
                a pod of the same name created meanwhile by someone else is
                left alone, answered with 409 Conflict, tolerated here).
                A pod on a lost node is deleted with :meth:`force_delete_pod`.
        """
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        self._fenced()
        try:
            call(self.core.delete_namespaced_pod, name, namespace, body=body, _preload_content=False)
        except (NotFound, Conflict):
            pass

    def release_pod(self, namespace: str, name: str, node: str | None, annotations: dict[str, str] | None = None) -> None:
        """Pin a gated pod to ``node`` (a nodeSelector entry), set ``annotations`` and lift the gang gate, in one patch.

        Adding nodeSelector entries to a gated pod is allowed by the API server
        (KEP-3838, mutable scheduling directives for gated pods: entries may be
        added, none removed or changed); annotations are always mutable. A
        strategic merge patch adds the ``kubernetes.io/hostname`` entry (:data:`railtrain.crds.labels.HOSTNAME`) next to
        the template's own nodeSelector, and the one patch makes the three
        changes atomic: a pod is never ungated without its node and its
        admitted gang size. A pod already released (422) or gone (404) is left as it is.
        """
        spec: dict[str, Any] = {"schedulingGates": None}
        if node:
            spec["nodeSelector"] = {labels.HOSTNAME: node}
        body = {"metadata": {"annotations": dict(annotations or {})}, "spec": spec}
        self._fenced()
        try:
            res = call(
                self.core.patch_namespaced_pod,
                name, namespace, body, field_manager=FIELD_MANAGER, _content_type="application/strategic-merge-patch+json", _preload_content=False,
            )
        except (NotFound, Invalid) as err:
            if err.status in (404, 422):  # gone, or already released
                return
            raise
        self._saw("pods", self._json(res), mine=True)

    def label_pod(self, namespace: str, name: str, labels: dict[str, str | None], uid: str | None = None) -> bool:
        """Set (a value) or remove (``None``) labels of a pod in one merge patch (a hot spare taking a rank).

        Args:
            uid: when given, patch only the pod with this uid (a test in the patch: a pod of the same name
                created meanwhile is left alone).

        Returns:
            False when the pod is gone or is another object now (404/409/422).
        """
        body: dict[str, Any] = {"metadata": {"labels": dict(labels)}}
        if uid:
            body["metadata"]["uid"] = uid
        self._fenced()
        try:
            res = call(self.core.patch_namespaced_pod, name, namespace, body, field_manager=FIELD_MANAGER,
                       _content_type="application/merge-patch+json", _preload_content=False)  # fmt: skip
        except (NotFound, Conflict, Invalid):
            return False
        self._saw("pods", self._json(res), mine=True)
        return True

    def force_delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod with grace period 0: the API server removes the object at once, without waiting for
        its kubelet (used only for pods on a lost node, whose kubelet will never confirm); gone is fine."""
        self._fenced()
        try:
            call(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0, _preload_content=False)
        except NotFound:
            pass

    def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the TrainingJob (its pods and Service follow through ownerReferences, background propagation).

        The ``uid`` precondition makes sure a job re-created under the same name is never deleted.

        Returns:
            False when it was already gone or is another object now (404/409).
        """
        body = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
        self._fenced()
        try:
            call(self.custom.delete_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name, body=body)
        except (NotFound, Conflict):
            return False
        return True

    def delete_service(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a job's rendezvous Service ``name`` whose uid is ``uid`` (a Service re-created meanwhile is kept), and drop it
        from the caches at once, so the next reconcile creates it again with the next gang.

        Returns:
            False when it was already gone or is another object now (404/409).
        """
        self._fenced()
        try:
            gone = self._json(call(self.core.delete_namespaced_service, name, namespace, body={"preconditions": {"uid": uid}}, _preload_content=False))
        except (NotFound, Conflict):
            return False
        if self.observer is not None and isinstance(gone, dict) and gone.get("kind") == "Service":
            self.observer.observe_event("services", "DELETED", gone)
        return True

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The Node, or None when it does not exist."""
        res = or_none(self.core.read_node, name, _preload_content=False)
        node = None if res is None else self._json(res)
        self._saw("nodes", node)
        return node

    def set_node_taints(self, node: dict[str, Any], taints: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> bool:
        """Replace ``spec.taints`` of a Node read earlier and set ``annotations`` in the same patch, guarded by its
        resourceVersion (:func:`railtrain.operator.kube.connection.patch_node`).

        Returns:
            False on a conflict or when the node is gone (read it again and retry).
        """
        self._fenced()
        return patch_node(self.core, node, taints, annotations=annotations, field_manager=FIELD_MANAGER)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None) -> bool:
        """Apply a JSON merge patch to the job's status through the status subresource (null deletes a key).

        Args:
            resource_version: the job's resourceVersion as read when the new status was decided; the patch
                carries it, so the API server refuses it (409 Conflict) when anyone changed the job since
                (optimistic concurrency, Kubernetes API conventions): a decision taken on a stale read, e.g.
                by a leader that stepped down, is dropped instead of written over a newer status. None: unguarded.

        Returns:
            False when the job was deleted meanwhile (404) or, with ``resource_version``, changed since it
            was read (409): nothing was written. True when the write succeeded.

        Raises:
            railtrain.operator.kube.fence.NotLeader: this process may not write now (``fence``).
        """
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        self._fenced()
        try:
            job = call(
                self.custom.patch_namespaced_custom_object_status,
                contract.API_GROUP, contract.API_VERSION, namespace, contract.PLURAL, name, body,
                field_manager=FIELD_MANAGER, _content_type="application/merge-patch+json",
            )
        except NotFound:
            return False
        except Conflict:
            if resource_version:
                return False
            raise
        self._saw("jobs", job, mine=True)
        return True

    def _lease_timeout(self) -> dict[str, Any]:
        return {"_request_timeout": self.lease_timeout} if self.lease_timeout else {}

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A coordination.k8s.io/v1 Lease as a dict, or None when it does not exist."""
        res = or_none(client.CoordinationV1Api(self.api).read_namespaced_lease, name, namespace, _preload_content=False, **self._lease_timeout())
        return None if res is None else self._json(res)

    def put_lease(self, namespace: str, name: str, spec: dict[str, Any], seen: dict[str, Any] | None) -> bool:
        """Create the Lease, or replace the one read as ``seen`` (its resourceVersion guards the write).

        Returns:
            False when someone else wrote it meanwhile (409); read it again.
        """
        api = client.CoordinationV1Api(self.api)
        body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        try:
            if seen is None:
                call(api.create_namespaced_lease, namespace, body, field_manager=FIELD_MANAGER, _preload_content=False, **self._lease_timeout())
            else:
                body["metadata"]["resourceVersion"] = seen["metadata"]["resourceVersion"]
                call(api.replace_namespaced_lease, name, namespace, body, field_manager=FIELD_MANAGER, _preload_content=False, **self._lease_timeout())
        except Conflict:
            return False
        return True

    def emit_event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job (shown by ``kubectl describe tj``), or on any object given as a dict
        with apiVersion, kind and metadata (a Node's Events go to namespace ``default``, as the kubelet's do).

        Best effort, as Events are by Kubernetes convention: a refusal is dropped, and so is the Event of an
        operator that may not write now (``fence``; the write it would announce was refused too)."""
        try:
            self._fenced()
        except NotLeader:  # say nothing: the fence logged the lapse once
            return
        body = event_manifest(job, type_, reason, message, datetime.now(timezone.utc))
        try:
            call(self.core.create_namespaced_event, body["metadata"]["namespace"], body, _preload_content=False)
        except (ApiError, NotLeader):
            pass  # Events are best-effort by Kubernetes convention (NotLeader: the client's own last-moment fence).
