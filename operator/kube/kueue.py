"""The verbs over Kueue's objects the operator needs for a Kueue job: its Workload, the flavors and priority classes it reads.

Thin verbs over the held :class:`~railtrain.operator.kube.verbs.Kube`'s
``CustomObjectsApi`` (every write fenced by leadership, every error typed by
:mod:`railtrain.operator.kube.errors`), returning plain camelCase dicts. A read
of something missing answers None; a read or write of a kind the API server
does not serve (Kueue not installed) raises :class:`~railtrain.operator.kube.errors.NotFound`,
which the caller turns into a sentence. Names: :mod:`railtrain.crds.kueue`.

May import: ``railtrain.crds``, the kubernetes client and this wing (``operator/kube``); never kopf or a domain wing.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from railtrain.crds import contract
from railtrain.crds import kueue as names
from railtrain.operator.kube.errors import Conflict, NotFound, call, or_none
from railtrain.operator.kube.verbs import FIELD_MANAGER, Kube


class KueueVerbs:
    """Kueue's objects through ``kube`` (a :class:`Kube`, or anything holding one as ``.kube``, e.g. the cached Kube)."""

    def __init__(self, kube: Any):
        self.kube: Kube = getattr(kube, "kube", kube)

    @property
    def custom(self) -> client.CustomObjectsApi:
        """The held Kube's ``CustomObjectsApi``."""
        return self.kube.custom

    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Workload, or None when there is none (or the kind is not served: see :meth:`served`)."""
        return or_none(self.custom.get_namespaced_custom_object, names.GROUP, names.VERSION, namespace, names.WORKLOADS, name)

    def list_workloads(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every Workload in ``namespace`` (all namespaces when None), as stored.

        Raises:
            railtrain.operator.kube.errors.NotFound: the kind is not served (Kueue is not installed).
        """
        if namespace:
            res = call(self.custom.list_namespaced_custom_object, names.GROUP, names.VERSION, namespace, names.WORKLOADS)
        else:
            res = call(self.custom.list_cluster_custom_object, names.GROUP, names.VERSION, names.WORKLOADS)
        return res.get("items", [])

    def create_workload(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """Create a Workload; returns it as stored, or None when one of that name exists already (409).

        Raises:
            railtrain.operator.kube.errors.ApiError: refused (Kueue's webhook or the schema: 400/422; not served: 404).
        """
        self.kube._fenced()
        try:
            return call(self.custom.create_namespaced_custom_object, names.GROUP, names.VERSION, manifest["metadata"]["namespace"],
                        names.WORKLOADS, manifest, field_manager=FIELD_MANAGER)
        except Conflict:
            return None

    def delete_workload(self, namespace: str, name: str, uid: str) -> None:
        """Delete the Workload of ``uid`` (a precondition: never one created since under the same name); 404 and 409 tolerated."""
        self.kube._fenced()
        try:
            call(self.custom.delete_namespaced_custom_object, names.GROUP, names.VERSION, namespace, names.WORKLOADS, name,
                 body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"))
        except (NotFound, Conflict):
            pass

    def patch_workload_status(self, workload: dict[str, Any], status: dict[str, Any]) -> bool:
        """JSON merge patch of ``workloads/status`` (null deletes a key), guarded by the Workload's resourceVersion as read.

        Returns:
            False when the Workload is gone or changed since it was read (404/409): nothing written.
        """
        body = {"metadata": {"resourceVersion": workload["metadata"].get("resourceVersion")}, "status": status}
        return self._guarded_merge_patch(self.custom.patch_namespaced_custom_object_status, workload, body)

    def remove_finalizer(self, workload: dict[str, Any]) -> bool:
        """Take :data:`railtrain.crds.kueue.FINALIZER` off the Workload (guarded by its resourceVersion); False when gone or changed."""
        meta = workload["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != names.FINALIZER]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": kept}}
        return self._guarded_merge_patch(self.custom.patch_namespaced_custom_object, workload, body)

    def set_active(self, workload: dict[str, Any], active: bool) -> bool:
        """Write the Workload's ``spec.active`` for its job's ``runPolicy.suspend`` (Kueue evicts and holds a deactivated
        Workload, releasing its quota; reactivated, it is queued again), marking a deactivation as railtrain's own
        (:data:`railtrain.crds.kueue.DEACTIVATED_FOR_SUSPEND`) so that only that one is undone on resume; guarded by
        its resourceVersion. Returns False when the Workload is gone or changed since it was read."""
        meta = workload["metadata"]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {names.DEACTIVATED_FOR_SUSPEND: None if active else "true"}},
                "spec": {"active": active}}  # fmt: skip
        return self._guarded_merge_patch(self.custom.patch_namespaced_custom_object, workload, body)

    def _guarded_merge_patch(self, verb: Any, workload: dict[str, Any], body: dict[str, Any]) -> bool:
        """One fenced JSON merge patch of the Workload (``verb``: the object's or its status's); False on 404/409."""
        meta = workload["metadata"]
        self.kube._fenced()
        try:
            call(verb, names.GROUP, names.VERSION, meta["namespace"], names.WORKLOADS, meta["name"], body,
                 field_manager=FIELD_MANAGER, _content_type="application/merge-patch+json")
            return True
        except (NotFound, Conflict):
            return False

    def label_queue(self, job: dict[str, Any], queue: str) -> bool:
        """Write ``kueue.x-k8s.io/queue-name: queue`` on the TrainingJob (a merge patch guarded by its resourceVersion).

        Returns:
            False when the job is gone or changed since it was read (404/409): nothing written.
        """
        meta = job["metadata"]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": {names.QUEUE_LABEL: queue}}}
        self.kube._fenced()
        try:
            call(self.custom.patch_namespaced_custom_object, contract.API_GROUP, contract.API_VERSION, meta["namespace"], contract.PLURAL,
                 meta["name"], body, field_manager=FIELD_MANAGER, _content_type="application/merge-patch+json")
            return True
        except (NotFound, Conflict):
            return False

    def get_cluster_object(self, plural: str, name: str) -> dict[str, Any] | None:
        """A cluster-scoped Kueue object (``resourceflavors``, ``workloadpriorityclasses``), or None when missing or not served."""
        return or_none(self.custom.get_cluster_custom_object, names.GROUP, names.VERSION, plural, name)

    def get_priority_class(self, name: str) -> dict[str, Any] | None:
        """The ``scheduling.k8s.io/v1`` PriorityClass, or None when missing."""
        found = or_none(client.SchedulingV1Api(self.kube.api).read_priority_class, name)
        return self.kube.api.sanitize_for_serialization(found) if found is not None else None
