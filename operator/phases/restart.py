"""Restarting the whole gang, counted as a job restart or an infrastructure restart (shared by the recovery rows).

Every restart deletes every pod of the current gang and raises
``status.restarts`` (the restart count the next gang's pods carry), so the
survivors of a failure never wait in a broken rendezvous next to a
replacement. Restarts caused by the job (``status.jobRestarts``) spend
``runPolicy.backoffLimit``; restarts caused by the infrastructure
(``status.infrastructureRestarts``: a node lost, quarantined or avoided, a
rank's pod deleted, evicted or preempted, an elastic grow) do not, as JobSet's
``RestartJobSetAndIgnoreMaxRestarts`` action does not.
"""

from __future__ import annotations

from railtrain.operator import conditions as cond
from railtrain.operator.phases.step import Step

JOB_RESTARTS = "jobRestarts"
INFRA_RESTARTS = "infrastructureRestarts"


def restart_gang(step: Step, reason: str, message: str, infrastructure: bool) -> str:
    """Delete the gang and start the next one; returns the phase Restarting.

    Args:
        reason: the condition reason (Running and Scheduled turn False with it) and Event reason.
        message: names what failed (rank, pod, node) and the counters after this restart.
        infrastructure: count it in ``infrastructureRestarts`` (True) or ``jobRestarts`` (False).
    """
    key = INFRA_RESTARTS if infrastructure else JOB_RESTARTS
    step.status[key] = int(step.status.get(key, 0)) + 1
    step.status["restarts"] = step.restarts + 1
    step.delete(step.gang)
    step.set_condition(cond.RUNNING, False, reason, message)
    step.set_condition(cond.SCHEDULED, False, reason, message, "Warning")
    return cond.RESTARTING


def counters(step: Step) -> str:
    """``"job restarts 1/3, infrastructure restarts 2"`` after the current pass's changes."""
    limit = step.job.spec.run_policy.backoff_limit if step.job else 0
    return f"job restarts {int(step.status.get(JOB_RESTARTS, 0))}/{limit}, infrastructure restarts {int(step.status.get(INFRA_RESTARTS, 0))}"
