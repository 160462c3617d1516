"""The operator's record of a job's gangs for status.goodput (pure): where an attempt starts, ends and progresses.

Two writers keep ``status.goodput.attempts`` (crds/goodput.py, ``AttemptRecord``):

* the planner (:func:`track`, from :func:`railtrain.operator.job.planner.finish`)
  appends an attempt when the Scheduled condition turns True (the gang was
  released) and ends the current one when the gang is stopped: a restart
  (status.restarts grew; its reason is the Scheduled condition's), a gang
  timeout (status.requeues grew) or a suspension; these are rare, so the
  writes are few;
* the progress reader (:func:`with_progress`, operator/progress.py) records the
  steps rank 0 reports into the current attempt, at most once per job per
  progress interval.

Each write recomputes the breakdown with :func:`railtrain.crds.goodput.breakdown`
(to the completion time once the job finished).

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from railtrain.crds import reasons
from railtrain.crds.goodput import MAX_ATTEMPTS, breakdown, to_attempts
from railtrain.crds.times import format_micro_time, parse_time_or_none

TERMINAL = ("Succeeded", "Failed")


def _scheduled(status: Mapping[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Scheduled"), {})


def goodput(status: Mapping[str, Any], attempts: list[dict[str, Any]], created: str | None, now: datetime) -> dict[str, Any] | None:
    """status.goodput (camelCase) for these attempts at ``now`` (the completion time once finished); None without a creation time or with a malformed record."""
    born = parse_time_or_none(created)
    if born is None:
        return None
    end = parse_time_or_none(status.get("completionTime")) if status.get("phase") in TERMINAL else None
    try:
        records = to_attempts(attempts)
    except ValueError:
        return None
    if end is not None:
        # completionTime has whole seconds (the API server's Time), the attempts microseconds: a job that was
        # released and finished within one second would end before its own release, so its parts would not add
        # up to its wall time. The breakdown ends at the later of the two.
        seen = [t for a in records for t in (a.released, a.first_step_at, a.last_step_at, a.ended) if t is not None]
        end = max([end, *seen])
    g = breakdown(born, records, end or now)
    return g.to_api() | {"attempts": attempts}


def track(old: Mapping[str, Any], new: Mapping[str, Any], now: datetime, created: str | None) -> dict[str, Any] | None:
    """The new status.goodput when this pass released or stopped a gang, else None (nothing to write).

    Args:
        old: the status as read; new: the status this pass writes (camelCase dicts).
        now: the pass's time; created: metadata.creationTimestamp.
    """
    attempts = [dict(a) for a in (new.get("goodput") or {}).get("attempts") or []]
    current = attempts[-1] if attempts and not attempts[-1].get("ended") else None
    changed = False
    stopped = None
    if int(new.get("restarts", 0)) > int(old.get("restarts", 0)) or int(new.get("requeues", 0)) > int(old.get("requeues", 0)):
        stopped = _scheduled(new).get("reason") or reasons.RESTARTING
    elif new.get("phase") == "Suspended" and old.get("phase") != "Suspended":
        stopped = reasons.SUSPENDED
    if stopped and current is not None:
        current.update(ended=format_micro_time(now), endReason=stopped)
        current, changed = None, True
    released = _scheduled(new).get("status") == "True" and _scheduled(old).get("status") != "True"
    if released and current is None:
        attempts.append({"released": format_micro_time(now)})
        changed = True
    if new.get("phase") in TERMINAL and old.get("phase") not in TERMINAL:
        changed = True  # the final breakdown, to the completion time
    if not changed:
        return None
    while len(attempts) > MAX_ATTEMPTS:  # merge the two oldest (crds/goodput.py, MAX_ATTEMPTS)
        first, second = attempts[0], attempts.pop(1)
        attempts[0] = first | {k: second.get(k) for k in ("lastStep", "lastStepAt", "ended", "endReason")} | {
            "blockedSeconds": float(first.get("blockedSeconds", 0)) + float(second.get("blockedSeconds", 0))
        }
    return goodput(new, attempts, created, now)


def with_progress(status: Mapping[str, Any], progress: Mapping[str, Any], resumed_from: int | None, blocked_seconds: float | None, created: str | None, now: datetime) -> dict[str, Any] | None:
    """status.goodput after rank 0 reported ``progress`` (status.progress) at ``now``; None when no attempt is running.

    Args:
        resumed_from: the checkpoint step rank 0 resumed from (``railtrain_resumed_step``), when it says.
        blocked_seconds: rank 0's checkpoint-blocked seconds so far in this attempt (its process's counter).
    """
    attempts = [dict(a) for a in (status.get("goodput") or {}).get("attempts") or []]
    if not attempts or attempts[-1].get("ended") or "step" not in progress:
        return None
    a, at = attempts[-1], progress.get("lastUpdateTime") or format_micro_time(now)
    if a.get("firstStep") is None:
        a.update(firstStep=int(progress["step"]), firstStepAt=at)
    if a.get("lastStep") != int(progress["step"]) or a.get("lastStepAt") is None:
        # the step moved: a rank 0 that still answers while its gang hangs does not extend training (crds/goodput.py)
        a.update(lastStep=int(progress["step"]), lastStepAt=at)
    if resumed_from is not None:
        a["resumedFrom"] = int(resumed_from)
    if blocked_seconds is not None:
        a["blockedSeconds"] = round(float(blocked_seconds), 3)
    return goodput(status, attempts, created, now)
