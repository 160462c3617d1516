"""The gang timeout: a released gang not fully Running within ``runPolicy.gangTimeoutSeconds`` is released whole and re-queued.

Holding some nodes while waiting for the others is what deadlocks two gangs
(all-or-nothing admission, as in Volcano's and Kueue's gang scheduling); the
timeout bounds it, and the exponential backoff (:func:`~railtrain.operator.gang.requeue_delay`)
keeps a gang that cannot start from churning.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from railtrain.operator import conditions as cond
from railtrain.operator.gang import parse_time, requeue_delay
from railtrain.operator.phases.step import Step, healthy
from railtrain.operator.phases.unschedulable import scheduler_refusal
from railtrain.operator.phases.transition import ACTIVE, Transition


def released_at(step: Step) -> datetime | None:
    """When the current gang was released: the Scheduled condition's last turn to True, else None."""
    scheduled = cond.find(step.conds, cond.SCHEDULED)
    return parse_time(scheduled.get("lastTransitionTime")) if scheduled and scheduled.get("status") == "True" else None


def ran_since(step: Step, since: datetime) -> bool:
    """Whether the gang has been fully Running (healthy) at some moment since ``since``.

    The Running condition is False when a gang is released (it is set False
    when the previous gang stopped, or absent for a new job), so a Running
    condition that is True now, or that turned False again after ``since``,
    records that the gang did run.
    """
    running = cond.find(step.conds, cond.RUNNING)
    if not running:
        return False
    changed = parse_time(running.get("lastTransitionTime"))
    return running.get("status") == "True" or bool(changed and changed > since)


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
    requeues = int(step.status.get("requeues", 0)) + 1
    step.status["requeues"], step.status["requeueAfter"] = requeues, cond.rfc3339(step.now + requeue_delay(requeues))
    step.delete(step.gang)
    step.released = None  # every node is freed: no admitted gang any more
    step.set_condition(cond.RUNNING, False, "GangTimeout", f"{running} of {n} ranks were Running")
    said = next(((p, w) for p in step.gang if (w := scheduler_refusal(p))), None)
    quoted = f"; pod {said[0]['metadata']['name']}: kube-scheduler: {said[1]}" if said else ""
    step.set_condition(
        cond.SCHEDULED, False, "GangTimeout",
        f"the gang was not fully Running within runPolicy.gangTimeoutSeconds={timeout} after release ({running} of {n} ranks Running{quoted}); "
        f"released all {n} nodes and re-queued, next admission attempt after {step.status['requeueAfter']} (requeue {requeues})",
        "Warning",
    )
    return cond.PENDING


GANG_TIMEOUT = Transition(
    "gang-timeout", ACTIVE, _timed_out, _requeue,
    "A released gang that has not once been healthy within runPolicy.gangTimeoutSeconds: every pod is deleted and the job re-queued with backoff (phase Pending).",
)
