"""The Kueue Workload of a TrainingJob (pure): built from the job, compared with the one stored, its pods dressed for it.

A TrainingJob labelled ``kueue.x-k8s.io/queue-name`` is admitted by Kueue
through its external-framework protocol (Kueue's configuration lists
``TrainingJob.v1alpha1.railtrain.dev`` in ``integrations.externalFrameworks``;
docs/kueue.md). railtrain's operator then does what Kueue's Go
``jobframework`` reconciler does for a built-in job
(``pkg/controller/jobframework/reconciler.go``): it owns one
``kueue.x-k8s.io/v1beta2`` Workload per job (:func:`desired`) with

* a controller ownerReference to the job, the finalizer
  ``kueue.x-k8s.io/resource-in-use`` and the label ``kueue.x-k8s.io/job-uid``;
* ``spec.queueName`` from the label, one pod set ``main`` of ``spec.nodes`` pods
  whose template is rank 0's rendered pod (resources, tolerations, node selector
  of ``spec.template``), and a ``topologyRequest`` from ``spec.topology``
  (:func:`topology_request`);
* the priority: a ``kueue.x-k8s.io/priority-class`` label's WorkloadPriorityClass,
  else the template's PriorityClass, else ``spec.priority`` (:class:`Priority`;
  the runtime reads the class's value);
* the nodes this job avoids (``status.avoidNodes``, named by its verdicts) as a
  required node affinity of the pod set's template (:func:`avoiding`), which
  Kueue's Topology Aware Scheduling honours when it picks hosts: a new admission
  never hands the job a node it must not use (:func:`avoided_in_assignment`).

The Workload is kept equivalent to the job: :func:`equivalent` compares the
spec railtrain wrote (its hash in :data:`ANNOTATION_SPEC_HASH`, so fields the
API server defaults never count as a change) and the queue name. Reading an
admitted Workload is :mod:`railtrain.operator.job.kueuestatus`'s.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from railtrain.crds import contract
from railtrain.crds.labels import HOSTNAME
from railtrain.operator.job.observed import Observed
from railtrain.operator.scheduling.topology import nvlink_level

from railtrain.crds.kueue import (
    FINALIZER, GROUP, JOB_UID_LABEL, MULTIKUEUE_CONTROLLER, PODSET_LABEL, PREBUILT_WORKLOAD_LABEL, QUEUE_LABEL, VERSION, WORKLOAD_ANNOTATION,
)

PODSET = "main"
"""The one pod set of a TrainingJob's Workload: every rank runs the same pod."""
ANNOTATION_SPEC_HASH = f"{contract.API_GROUP}/workload-spec-hash"
"""On the Workload: the hash of the spec railtrain wrote (:func:`spec_hash`)."""


def managed_elsewhere(obj: Observed | Mapping[str, Any]) -> bool:
    """Whether another controller runs the job (``spec.managedBy`` is Kueue's MultiKueue): this operator keeps its
    Workload only, and writes neither pods nor status (MultiKueue copies the worker cluster's status back)."""
    raw = obj.obj if isinstance(obj, Observed) else obj
    return (raw.get("spec") or {}).get("managedBy") == MULTIKUEUE_CONTROLLER


def prebuilt_name(obj: Observed | Mapping[str, Any]) -> str | None:
    """The Workload MultiKueue built for this job's copy on a worker cluster (label ``kueue.x-k8s.io/prebuilt-workload-name``),
    which the operator adopts instead of creating one; None for a job of this cluster's own."""
    raw = obj.obj if isinstance(obj, Observed) else obj
    return ((raw.get("metadata") or {}).get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL) or None


def queue_name(obj: Observed | Mapping[str, Any]) -> str | None:
    """The LocalQueue a job (as read, or as observed) names in :data:`QUEUE_LABEL`, or None when the job is railtrain's own queue's."""
    raw = obj.obj if isinstance(obj, Observed) else obj
    value = ((raw.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    return str(value) if value else None


def workload_name(meta: Mapping[str, Any]) -> str:
    """The Workload's name for a job: ``trainingjob-<name>-<first 5 of uid>`` (a new job of the same name gets a new
    Workload), or on a MultiKueue worker cluster the prebuilt Workload its label names (the manager's Workload's name)."""
    prebuilt = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
    return prebuilt or f"trainingjob-{meta['name']}-{str(meta.get('uid', ''))[:5]}"[:253].rstrip("-.")


@dataclass(frozen=True)
class Priority:
    """The Workload's priority.

    Attributes:
        value: the number Kueue orders and preempts by.
        ref: ``spec.priorityClassRef`` (``{group, kind, name}``), or None for a bare ``spec.priority``.
    """

    value: int
    ref: Mapping[str, str] | None = None


def topology_request(seen: Observed, levels: Sequence[str]) -> dict[str, Any] | None:
    """The pod set's ``topologyRequest`` for ``spec.topology`` (pure).

    * ``nvlinkDomain``: ``required`` at the NVLink-domain level;
    * ``required`` / ``preferred`` with a level: that level; ``preferred`` without one: the narrowest level above
      the host (railtrain's "tightest domain first, then wider", which is what Kueue's preferred does);
    * ``none``: ``unconstrained``.

    ``podIndexLabel`` is the rank label, so Kueue numbers pods as railtrain does. None when ``levels`` is empty.
    """
    topo = seen.usable.spec.topology
    if not levels:
        return None
    request: dict[str, Any] = {"podIndexLabel": contract.LABEL_NODE_RANK}
    above_host = [level for level in levels if level != HOSTNAME]
    if topo.nvlink_domain and (nvl := nvlink_level(tuple(levels))):
        request["required"] = nvl
    elif topo.policy == "required" and topo.level:
        request["required"] = topo.level
    elif topo.policy == "none":
        request["unconstrained"] = True
    else:
        request["preferred"] = topo.level or (above_host[-1] if above_host else levels[-1])
    return request


def pod_template(pod0: Mapping[str, Any]) -> dict[str, Any]:
    """The pod set's template: rank 0's rendered pod less its name, namespace, owner and scheduling gates."""
    meta = pod0.get("metadata") or {}
    spec = copy.deepcopy(dict(pod0.get("spec") or {}))
    spec.pop("schedulingGates", None)
    spec.pop("nodeName", None)
    return {"metadata": {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})}, "spec": spec}


def avoiding(template: dict[str, Any], avoid: Sequence[str]) -> dict[str, Any]:
    """``template`` with a required node affinity keeping its pods off the ``avoid`` nodes (pure; a copy).

    The expression ``kubernetes.io/hostname NotIn avoid`` is added to every required ``nodeSelectorTerm`` (the terms
    are ORed, so each must exclude the nodes), or becomes the only term when there is none. Kueue's TAS filters hosts
    by a pod set's required node affinity (``tas_flavor_snapshot.go`` in v0.17), so it is how railtrain tells Kueue
    which nodes a job must not be admitted to. ``avoid`` empty: the template unchanged.
    """
    if not avoid:
        return template
    out = copy.deepcopy(template)
    spec = out.setdefault("spec", {})
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term.setdefault("matchExpressions", []).append({"key": HOSTNAME, "operator": "NotIn", "values": sorted(set(avoid))})
    return out


def avoided_in_assignment(levels: Sequence[str], domains: Sequence[tuple[tuple[str, ...], int]], avoid: Sequence[str],
                          quarantined: Sequence[str]) -> list[str]:  # fmt: skip
    """The nodes of a Kueue admission that the job must not use and that Kueue will not replace by itself (pure).

    Args:
        levels, domains: the admission's decoded topology assignment (:func:`railtrain.operator.scheduling.kueue.expand`).
        avoid: ``status.avoidNodes``; quarantined: the nodes this job quarantined (``status.quarantines[].node``).

    Returns:
        The sorted avoided nodes named at the assignment's ``kubernetes.io/hostname`` level, less the quarantined ones:
        those carry railtrain's NoSchedule taint, which Kueue's ``TASReplaceNodeOnNodeTaints`` (Beta, on in v0.17)
        answers itself by replacing the node inside the admission, or by evicting the Workload when no node can
        replace it (docs/kueue.md, "Recovery inside Kueue's admission"). Empty without a hostname level (the hosts are
        not named: nothing to compare).
    """
    if HOSTNAME not in levels or not avoid:
        return []
    at = list(levels).index(HOSTNAME)
    hosts = {values[at] for values, _ in domains if len(values) > at}
    return sorted((set(avoid) - set(quarantined)) & hosts)


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A short hash of a Workload spec as railtrain writes it (sorted JSON, SHA-256, 16 hex digits)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def desired(seen: Observed, levels: Sequence[str], priority: Priority) -> dict[str, Any]:
    """The Workload railtrain keeps for a Kueue job (pure).

    Args:
        seen: the job as observed, its spec usable and rank 0 rendered (``seen.pod0``).
        levels: the operator's topology levels, widest first (they are the Kueue Topology's levels).
        priority: from :class:`Priority` (the runtime resolves a class's value).

    Returns:
        A ``kueue.x-k8s.io/v1beta2`` Workload manifest (see the module docstring).

    Raises:
        ValueError: the job is not Kueue's, or its spec cannot become pods (the reconcile fails it instead).
    """
    queue = queue_name(seen.obj)
    if queue is None or seen.usable is None or seen.pod0 is None:
        raise ValueError("only a Kueue job with a usable spec has a Workload")
    meta = seen.meta
    job_spec = seen.usable.spec
    template = avoiding(pod_template(seen.pod0), seen.status.avoid_nodes)
    podset: dict[str, Any] = {"name": PODSET, "count": job_spec.nodes, "template": template}
    if job_spec.elastic is not None and (fewest := min(job_spec.node_counts())) < job_spec.nodes:
        podset["minCount"] = fewest  # Kueue's partial admission: it may admit any count from here to nodes
    if (topo := topology_request(seen, levels)) is not None:
        podset["topologyRequest"] = topo
    spec: dict[str, Any] = {"queueName": queue, "podSets": [podset], "priority": priority.value}
    if priority.ref:
        spec["priorityClassRef"] = dict(priority.ref)
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
        "metadata": {
            "name": workload_name(meta), "namespace": meta.get("namespace", ""),
            "labels": {JOB_UID_LABEL: str(meta.get("uid", ""))},
            "annotations": {ANNOTATION_SPEC_HASH: spec_hash(spec)},
            "finalizers": [FINALIZER],
            "ownerReferences": [{"apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}", "kind": "TrainingJob", "name": meta["name"],
                                 "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
    }


def equivalent(stored: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether the stored Workload still stands for the job: the same spec hash and queue name (pure)."""
    annotations = (stored.get("metadata") or {}).get("annotations") or {}
    return (annotations.get(ANNOTATION_SPEC_HASH) == want["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
            and (stored.get("spec") or {}).get("queueName") == want["spec"]["queueName"])


def topology_annotation(request: Mapping[str, Any]) -> dict[str, str]:
    """The pod annotation Kueue reads a pod's topology request from (``kueue.x-k8s.io/podset-{required,preferred,unconstrained}-topology``).

    Kueue's TAS cache counts a pod carrying one as its Workload's (already in the admission); a pod
    without one it counts again as another tenant's usage on its node (``pkg/util/tas.IsTAS``). Empty
    for no request.
    """
    for mode in ("required", "preferred"):
        if request.get(mode):
            return {f"{GROUP}/podset-{mode}-topology": str(request[mode])}
    return {f"{GROUP}/podset-unconstrained-topology": "true"} if request.get("unconstrained") else {}


def dress_pod(pod: dict[str, Any], name: str, node_labels: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]],
              topology: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A rank's pod as Kueue's admission of Workload ``name`` wants it (a copy; pure).

    The admitted flavors' node labels join the pod's ``nodeSelector`` and their tolerations its
    tolerations (the jobframework's ``podset.Merge``), with the annotation :data:`WORKLOAD_ANNOTATION`,
    the label :data:`PODSET_LABEL` and, for a pod set with a ``topology`` request, its
    :func:`topology_annotation`.
    """
    out = copy.deepcopy(pod)
    meta, spec = out.setdefault("metadata", {}), out.setdefault("spec", {})
    meta.setdefault("annotations", {})[WORKLOAD_ANNOTATION] = name
    meta["annotations"].update(topology_annotation(topology or {}))
    meta.setdefault("labels", {})[PODSET_LABEL] = PODSET
    if node_labels:
        spec["nodeSelector"] = {**dict(node_labels), **(spec.get("nodeSelector") or {})}
    have = list(spec.get("tolerations") or [])
    extra = [dict(t) for t in tolerations if dict(t) not in have]
    if extra:
        spec["tolerations"] = have + extra
    return out
