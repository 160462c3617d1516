"""The admission queue and the ledger of promised capacity, from jobs and their pods as read (pure).

One function, :func:`read`, turns what the operator (or ``railtrain plan``, offline) read into
what an admission pass needs: the jobs that wait for placement, and the capacity that no pod
shows yet but that is promised all the same (docs/scheduling.md):

* ``status.admission`` of an admitted gang whose pods are not all created
  (:func:`railtrain.operator.job.request.promised_pods`);
* ranks of a live gang that ended before their job decided what follows
  (:func:`railtrain.operator.job.pods.ended_pods`);
* ``status.hold`` of a restarting gang (:func:`railtrain.operator.job.request.hold_of`). A holding job
  whose old pods have not all ended is not queued: its hold is its place in the ledger.

Read the pods before the jobs: the operator writes a job's status before it creates or deletes
that job's pods, so a job read after its pods is never older than what they show.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from railtrain.crds import contract
from railtrain.operator.scheduling.queue import Hold
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.job.pods import ended_pods, lingering
from railtrain.operator.job.request import promised_pods
from railtrain.operator.job.request import hold_of
from railtrain.operator.job.request import admission_request
from railtrain.operator.scheduling.placement import GangRequest


@dataclass
class Ledger:
    """What one admission pass works from.

    Attributes:
        waiting: ``namespace/name`` → ``(job, ready, request)`` of every job queued now
            (:func:`railtrain.operator.job.request.admission_request`).
        promised: pods to count as taken besides the active pods (rendered pinned, or ended ranks as Running).
        holds: ``namespace/name`` → the capacity that restarting job holds.
        problems: ``(namespace/name, what, error)`` of jobs that could not be read (each left out, never fatal).
        observed: ``namespace/name`` → every job read, as observed (:class:`~railtrain.operator.job.observed.Observed`:
            its spec parsed once), for the planner in the same pass.
    """

    waiting: dict[str, tuple[dict[str, Any], bool, GangRequest]] = field(default_factory=dict)
    promised: list[dict[str, Any]] = field(default_factory=list)
    holds: dict[str, Hold] = field(default_factory=dict)
    problems: list[tuple[str, str, Exception]] = field(default_factory=list)
    observed: dict[str, Observed] = field(default_factory=dict)

    def holds_for(self, gpu_resource: str) -> dict[str, Hold]:
        """The holds of jobs requesting ``gpu_resource`` (one admission pass per resource name)."""
        return {k: h for k, h in self.holds.items() if h.gpu_resource == gpu_resource}

    def wait_for_old_pods(self, active: Iterable[dict[str, Any]]) -> None:
        """Mark a ready job not ready (in place) while ``active`` still shows one of its old pods.

        The railtrain pods and the active pods come from two watches, and either may hear of a
        deletion first. A job whose old gang is gone by the first but still holds a node by the
        second would be placed around its own old pod (a rank away from its node-local
        checkpoint, or the gang in a wider domain). It waits for the next pass instead; a holder
        leaves the queue, as its hold is its place.
        """
        mine = by_job(active)
        for k, (job, ready, request) in list(self.waiting.items()):
            if ready and k in mine and lingering(self.observed.get(k, job), mine[k]):
                if k in self.holds:
                    del self.waiting[k]
                else:
                    self.waiting[k] = (job, False, request)


def key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def by_job(pods: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``namespace/name`` of the job a pod is labelled with (:data:`~railtrain.crds.contract.LABEL_JOB_NAME`) → its pods; unlabelled pods are left out."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        if job := (meta.get("labels") or {}).get(contract.LABEL_JOB_NAME):
            out[f"{meta.get('namespace', '')}/{job}"].append(pod)
    return out


def read(jobs: Iterable[Observed | dict[str, Any]], pods_by_job: Mapping[str, list[dict[str, Any]]], now: datetime | None) -> Ledger:
    """The queue and the promised capacity of ``jobs`` (pure).

    Args:
        jobs: TrainingJobs as observed in this pass, or as read (deleted namespaces already left out).
        pods_by_job: ``namespace/name`` → the pods labelled with that job's name (:func:`by_job`).
        now: the time of the pass (UTC).

    Returns:
        A :class:`Ledger`; a job that raises while being read is named in ``problems`` and left out.
    """
    out = Ledger()
    for each in jobs:
        seen = observed(each)  # the spec parsed, checked and rendered at most once for the readers below and the planner
        job = seen.obj
        k, meta = key(job), job["metadata"]
        out.observed[k] = seen
        pods = pods_by_job.get(k, [])
        try:
            out.promised.extend(promised_pods(seen, pods))
            out.promised.extend(ended_pods(seen, pods))
            if (hold := hold_of(seen, now)) is not None:
                out.holds[k] = hold
        except Exception as err:
            out.problems.append((k, "has an admitted placement or hold that could not be read", err))
        if meta.get("deletionTimestamp"):
            continue
        try:
            entry = admission_request(seen, pods, now)
        except Exception as err:
            out.problems.append((k, "left out of this admission pass", err))
            continue
        if entry is not None and (entry[1] or k not in out.holds):
            out.waiting[k] = (job, entry[1], entry[0])
    return out
