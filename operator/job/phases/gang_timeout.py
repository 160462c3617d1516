"""The gang timeout: a released gang not fully Running within ``runPolicy.gangTimeoutSeconds`` is released whole and re-queued.

Holding some nodes while waiting for the others is what deadlocks two gangs
(all-or-nothing admission, as in Volcano's and Kueue's gang scheduling); the
timeout bounds it, and the exponential backoff (:func:`~railtrain.operator.job.records.requeue_delay`)
keeps a gang that cannot start from churning.

The Scheduled condition names the cause where the pods say it: kube-scheduler's refusal, or a container that
waits for a reason other than being created (``ImagePullBackOff``, ``CreateContainerConfigError`` ...). A cause
no re-queue can cure (:data:`NEVER_STARTING`: the image reference itself) is said to be permanent, with
:data:`~railtrain.crds.contract.NEVER_STARTS` and the fix, so ``railtrain submit --wait`` stops and
``railtrain get`` shows it (issue 26, item 6: such a gang looped gang timeout → re-queue, naming nothing).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from railtrain.crds.times import format_time
from railtrain.crds import contract
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.records import requeue_delay
from railtrain.operator.job.phases.step import Step, healthy
from railtrain.operator.job.phases.unschedulable import scheduler_refusal
from railtrain.operator.job.phases.transition import ACTIVE, Transition


def released_at(step: Step) -> datetime | None:
    """When the current gang was released: the Scheduled condition's last turn to True, else None."""
    scheduled = step.condition(cond.SCHEDULED)
    return scheduled.last_transition_time if scheduled is not None and scheduled.status == "True" else None


def ran_since(step: Step, since: datetime) -> bool:
    """Whether the gang has been fully Running (healthy) at some moment since ``since``.

    The Running condition is False when a gang is released (it is set False
    when the previous gang stopped, or absent for a new job), so a Running
    condition that is True now, or that turned False again after ``since``,
    records that the gang did run.
    """
    running = step.condition(cond.RUNNING)
    if running is None:
        return False
    changed = running.last_transition_time
    return running.status == "True" or bool(changed and changed > since)


def _timed_out(step: Step) -> bool:
    since = released_at(step)
    timeout = step.job.spec.run_policy.gang_timeout_seconds
    return bool(
        step.released and since and not healthy(step) and not ran_since(step, since)
        and step.now >= since + timedelta(seconds=timeout)
    )


def _requeue(step: Step) -> str:
    n, timeout = step.n, step.job.spec.run_policy.gang_timeout_seconds
    running = sum(1 for p in step.phases() if p == "Running")
    requeues = step.state.requeues + 1
    after = format_time(step.now + requeue_delay(requeues))
    step.status["requeues"], step.status["requeueAfter"] = requeues, after
    step.delete(step.gang)
    step.released = None  # every node is freed: no admitted gang any more
    step.set_condition(cond.RUNNING, False, reasons.GANG_TIMEOUT, f"{running} of {n} ranks were Running")
    said = next(((p, w) for p in step.gang if (w := scheduler_refusal(p))), None)
    quoted = f"; pod {said[0]['metadata']['name']}: kube-scheduler: {said[1]}" if said else ""
    blocked = [(p, why, permanent) for p in step.gang if (found := not_started(p)) for why, permanent in [found]]
    if blocked:
        pod, why, _ = blocked[0]
        quoted += f"; pod {pod['metadata']['name']}: {why}" + (f" (and {len(blocked) - 1} more pods)" if len(blocked) > 1 else "")
    message = (
        f"the gang was not fully Running within runPolicy.gangTimeoutSeconds={timeout} after release ({running} of {n} ranks Running{quoted}); "
        f"released all {n} nodes and re-queued, next admission attempt after {after} (requeue {requeues})"
    )
    never = next((why for _, why, permanent in blocked if permanent), None)
    if never:
        message += f". {contract.NEVER_STARTS} as the job is written: {never}; fix spec.image (or the template's image) and submit the job again"
    step.set_condition(cond.SCHEDULED, False, reasons.GANG_TIMEOUT, message, "Warning")
    return cond.PENDING


NEVER_STARTING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
"""Container waiting reasons the kubelet gives a container that cannot start as the pod is written, on any node: a
malformed image reference, an image absent under ``imagePullPolicy: Never``. Re-queuing cannot cure them."""
STARTING = frozenset({"ContainerCreating", "PodInitializing"})
"""Container waiting reasons of a container on its way to start (not a cause)."""


def not_started(pod: dict[str, Any]) -> tuple[str, bool] | None:
    """Why a released pod's containers have not started, from its container statuses (pure).

    Args:
        pod: a v1 Pod as read.

    Returns:
        ``(clause, permanent)``: e.g. ``container trainer ImagePullBackOff: Back-off pulling image "x"``, and whether the
        reason is one that no re-queue cures (:data:`NEVER_STARTING`); None when no container waits for a reason
        other than being created.
    """
    status = pod.get("status") or {}
    for group in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(group) or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") or ""
            if reason and reason not in STARTING:
                words = " ".join(str(waiting.get("message") or "").split())
                return f"container {cs.get('name')} {reason}" + (f": {words}" if words else ""), reason in NEVER_STARTING
    return None


GANG_TIMEOUT = Transition(
    "gang-timeout", ACTIVE, _timed_out, _requeue,
    "A released gang that has not once been healthy within runPolicy.gangTimeoutSeconds: every pod is deleted and the job re-queued with backoff (phase Pending).",
)
