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
from railtrain.crds.goodput import MAX_ATTEMPTS, breakdown, degraded_seconds, to_attempts, with_degraded
from railtrain.crds.api import Condition, TrainingJobStatus
from railtrain.crds.times import format_micro_time, parse_time_or_none
from railtrain.operator.job.conditions import SCHEDULED, condition_of, true_of
from railtrain.operator.job.stored import read_status

TERMINAL = ("Succeeded", "Failed")


def _scheduled(status: TrainingJobStatus) -> Condition | None:
    return condition_of(status, SCHEDULED)


def _attempts(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.goodput.attempts`` as stored (camelCase dicts, copied): the patch this module builds extends them."""
    return [dict(a) for a in (status.get("goodput") or {}).get("attempts") or []]


def goodput(status: TrainingJobStatus | Mapping[str, Any], attempts: list[dict[str, Any]], created: str | None, now: datetime) -> dict[str, Any] | None:
    """status.goodput (camelCase) for these attempts at ``now`` (the completion time once finished); None without a creation time or with a malformed record.

    With replica groups (``status.replicaGroups``) ``degradedSeconds`` is computed from the groups' absences
    (:func:`railtrain.crds.goodput.degraded_seconds`).

    ``status`` is read through the model (:func:`~railtrain.operator.job.stored.read_status` when given as stored).
    """
    born = parse_time_or_none(created)
    if born is None:
        return None
    s = read_status(status)
    end = s.completion_time if s.phase in TERMINAL else None
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
    if s.replica_groups:  # replica groups: their absences are degraded training, not lost time (crds/goodput.py)
        absences = [(r.absent_seconds, parse_time_or_none(r.absent_since)) for r in s.replica_groups]
        g = with_degraded(g, degraded_seconds(absences, end or now))
    return g.to_api() | {"attempts": attempts}


def track(
    old: TrainingJobStatus | Mapping[str, Any], new: Mapping[str, Any], now: datetime, created: str | None, read: TrainingJobStatus | None = None,
) -> dict[str, Any] | None:
    """The new status.goodput when this pass released or stopped a gang, else None (nothing to write).

    Args:
        old: the status as read (through the model, or as stored); new: the status this pass writes (camelCase dicts: the goodput patch extends the
            attempts of ``new``; everything else is read through the model, :func:`~railtrain.operator.job.stored.read_status`).
        now: the pass's time; created: metadata.creationTimestamp.
        read: ``new`` already read through the model, when the caller has it (else it is read here).
    """
    attempts = _attempts(new)
    before, after = read_status(old), read if read is not None else read_status(new)
    current = attempts[-1] if attempts and not attempts[-1].get("ended") else None
    changed = False
    stopped = None
    if after.restarts > before.restarts or after.requeues > before.requeues:
        stopped = (s.reason if (s := _scheduled(after)) is not None else "") or reasons.RESTARTING
    elif after.phase == "Suspended" and before.phase != "Suspended":
        stopped = reasons.SUSPENDED
    if stopped and current is not None:
        current.update(ended=format_micro_time(now), endReason=stopped)
        current, changed = None, True
    released = true_of(after, SCHEDULED) and not true_of(before, SCHEDULED)
    if released and current is None:
        attempts.append({"released": format_micro_time(now)})
        changed = True
    if after.phase in TERMINAL and before.phase not in TERMINAL:
        changed = True  # the final breakdown, to the completion time
    if not changed:
        return None
    while len(attempts) > MAX_ATTEMPTS:  # merge the two oldest (crds/goodput.py, MAX_ATTEMPTS)
        first, second = attempts[0], attempts.pop(1)
        attempts[0] = first | {k: second.get(k) for k in ("lastStep", "lastStepAt", "ended", "endReason")} | {
            "blockedSeconds": float(first.get("blockedSeconds", 0)) + float(second.get("blockedSeconds", 0))
        }
    return goodput(after, attempts, created, now)


def with_progress(status: Mapping[str, Any], progress: Mapping[str, Any], resumed_from: int | None, blocked_seconds: float | None, created: str | None, now: datetime) -> dict[str, Any] | None:
    """status.goodput after rank 0 reported ``progress`` (status.progress) at ``now``; None when no attempt is running.

    Args:
        resumed_from: the checkpoint step rank 0 resumed from (``railtrain_resumed_step``), when it says.
        blocked_seconds: rank 0's checkpoint-blocked seconds so far in this attempt (its process's counter).
    """
    attempts = _attempts(status)
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
