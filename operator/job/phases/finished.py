"""A finished job (Succeeded or Failed): no pod keeps running, ``cleanPodPolicy``, ``ttlSecondsAfterFinished``.

A terminal phase never changes (:mod:`~railtrain.operator.job.phases.terminal`);
these rows run before it, on every pass of a finished job:

* every pod of the job that is still running (any restart count) is deleted,
  a pod whose trainer exited 0 but whose sidecar still runs among them (the
  pod itself, not its rank, still holds the node);
  and with ``cleanPodPolicy: All`` the finished ones too; with ``Running``
  (the default) Succeeded and Failed pods stay, so their logs and
  termination messages can be read (the reports against Kubeflow's trainer,
  issues #3419, #1982 and #1579, are of getting this wrong either way);
* once ``completionTime + ttlSecondsAfterFinished`` has passed, the job is
  deleted (its pods and Service follow through ownerReferences), as batch/v1
  Job's TTL-after-finished controller does.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from railtrain.crds.times import format_time
from railtrain.crds.failure_policy import CleanPodPolicy
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import pod_phase
from railtrain.operator.job.phases.step import Step
from railtrain.operator.job.phases.transition import Transition



def _run_policy(step: Step) -> dict[str, Any]:
    """The stored ``runPolicy`` (read raw: a finished job's spec may not parse any more)."""
    return dict(((step.obj.get("spec") or {}).get("runPolicy")) or {})


def to_clean(step: Step) -> list[dict[str, Any]]:
    """The pods of a finished job to delete now (not already being deleted)."""
    everything = _run_policy(step).get("cleanPodPolicy") == CleanPodPolicy.ALL.value
    pods = [p for p in step.pods if not p["metadata"].get("deletionTimestamp")]
    return [p for p in pods if everything or still_runs(p)]


def still_runs(pod: dict[str, Any]) -> bool:
    """Whether a finished job's pod still runs something (so it holds its node and is deleted).

    A pod whose phase is Succeeded or Failed runs nothing. Neither does one whose every container
    has terminated while the kubelet has not yet reported the phase (the trainer's exit is seen
    first): deleting it would lose its log and termination message. A pod with a container or a
    native sidecar (an init container) still running, or not started yet, still holds the node.
    """
    if pod_phase(pod) in ("Succeeded", "Failed"):
        return False
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    inits = status.get("initContainerStatuses") or []
    if containers and all("terminated" in (cs.get("state") or {}) for cs in containers):
        return any("terminated" not in (cs.get("state") or {}) for cs in inits)
    return True


def _clean(step: Step) -> None:
    step.delete(to_clean(step))


def ttl_due(step: Step) -> bool:
    """Whether ``ttlSecondsAfterFinished`` has passed since ``completionTime``."""
    ttl = _run_policy(step).get("ttlSecondsAfterFinished")
    done = step.observed.completion_time
    return isinstance(ttl, int) and done is not None and step.now >= done + timedelta(seconds=ttl)


def _expire(step: Step) -> None:
    step.out.delete_job = True
    ttl = _run_policy(step)["ttlSecondsAfterFinished"]
    step.out.events.append(("Normal", reasons.TTL_EXPIRED, f"deleting the job: it finished at {format_time(step.observed.completion_time)} and runPolicy.ttlSecondsAfterFinished is {ttl}"))


CLEAN_FINISHED = Transition(
    "clean-finished-pods", cond.TERMINAL_PHASES, lambda s: bool(to_clean(s)), _clean,
    "A finished job's pods still running are deleted, and with cleanPodPolicy All the finished ones too.",
)
TTL_EXPIRED = Transition(
    "ttl-expired", cond.TERMINAL_PHASES, ttl_due, _expire,
    "runPolicy.ttlSecondsAfterFinished after completionTime the job is deleted (pods and Service through ownerReferences).",
)
