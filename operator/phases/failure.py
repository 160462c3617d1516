"""A failed rank: restart the whole gang while ``runPolicy.backoffLimit`` allows and retrying can help, else fail.

One rank's configuration error takes the others down with retryable errors;
the user-error verdict, from whichever rank, decides (the trainer's
termination-message verdict, :mod:`railtrain.crds.contract`).
"""

from __future__ import annotations

from typing import Any

from railtrain.crds import contract
from railtrain.operator import conditions as cond
from railtrain.operator.gang import phase, rank_of
from railtrain.operator.phases.step import Step
from railtrain.operator.phases.transition import ACTIVE, Transition


def terminated(pod: dict[str, Any]) -> tuple[int, str, bool]:
    """Exit code, message and whether retrying can help, for the trainer container of a finished pod.

    The trainer's verdict comes from its termination message
    (:func:`railtrain.crds.contract.parse_termination_message`); torchrun turns a
    worker's exit code 2 into 1, so the message, not the code, carries "user
    error". Without a verdict, exit code 2 still means a user error and any
    other failure is retryable.
    """
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            code = int(term.get("exitCode", contract.EXIT_FAILED))
            raw = (term.get("message") or "").strip()
            verdict = contract.parse_termination_message(raw)
            if verdict:
                return code, f"{verdict['reason']}: {verdict['message']}", verdict["verdict"] != contract.VERDICT_USER_ERROR
            return code, raw or (term.get("reason") or ""), code != contract.EXIT_USER_ERROR
    return contract.EXIT_FAILED, (pod.get("status") or {}).get("message", ""), True


def failed_ranks(step: Step) -> list[dict[str, Any]]:
    """The gang's pods in phase Failed."""
    return [p for p in step.gang if phase(p) == "Failed"]


def _any_failed(step: Step) -> bool:
    return bool(failed_ranks(step))


def _restart_or_fail(step: Step) -> str:
    verdicts = sorted(((terminated(p), rank_of(p)) for p in failed_ranks(step)), key=lambda v: (v[0][2], v[1]))
    (code, message, retryable), rank = verdicts[0]
    detail = f"rank {rank} exited with code {code}" + (f": {message}" if message else "")
    limit = step.job.spec.run_policy.backoff_limit
    step.stop(step.gang)
    step.set_condition(cond.RUNNING, False, "PodFailed", detail)
    if not retryable:
        step.set_condition(cond.FAILED, True, "UserError", detail + " (a configuration error: not retried)", "Warning")
        return cond.FAILED
    if step.restarts >= limit:
        step.set_condition(cond.FAILED, True, "BackoffLimitExceeded", f"{detail}; runPolicy.backoffLimit={limit} restarts used", "Warning")
        return cond.FAILED
    step.status["restarts"] = step.restarts + 1
    step.delete(step.gang)
    step.set_condition(cond.SCHEDULED, False, "Restarting", f"{detail}; restarting the gang ({step.restarts}/{limit})", "Warning")
    return cond.RESTARTING


RANK_FAILED = Transition(
    "rank-failed", ACTIVE, _any_failed, _restart_or_fail,
    "A rank Failed: a user-error verdict or an exhausted runPolicy.backoffLimit fails the job; otherwise the whole gang is deleted and restarted (phase Restarting).",
)
