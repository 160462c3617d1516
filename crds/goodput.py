"""Where a job's time went: ``status.progress`` and ``status.goodput`` (API models) and the pure breakdown both the
operator and ``railtrain run --local`` compute them with, each from its own evidence.

Goodput splits the wall time since the job's creation into contiguous windows,
so the parts add up to the wall time by construction:

* ``queued``: creation → the first gang's release (admission), and any time a
  suspended job waited to be resumed;
* ``starting``: the first gang's release → its first finished step;
* ``training``: the steps kept: from an attempt's first step to its last one
  (to now for the running attempt), less the two losses inside that window below;
* lost, by cause:
  ``restart_<cause>``: from an attempt's last step to the next attempt's first
  step (teardown, re-admission, pod start, checkpoint load), by why the attempt
  ended (``job``, ``node_lost``, ``quarantine``, ``elastic``); an attempt that
  ended with an in-place restart (processes restarted inside the running pods,
  crds/inplace.py) loses ``restart_in_place_<verdict>`` instead (e.g.
  ``restart_in_place_retryable``), so the two paths' costs are told apart;
  ``recompute``: steps done again because the next attempt resumed from an
  older checkpoint (steps lost × that attempt's mean step time);
  ``checkpoint``: seconds the step loop was blocked by checkpoint saves.

A hang is never training. An attempt's training window ends at the last step
seen in it (an ended attempt's time after that is lost to its restart); the
running attempt's time since its last step seen counts as training only while it
is shorter than :func:`stall_seconds` (60 s, or 3 of its mean step times when
longer): past that, all of it is lost as ``no_progress`` until a new step is seen
(a gang hung in a collective, or stuck starting after an in-pod restart, whose
rank 0 still answers). The operator moves ``lastStepAt`` only when the step moves.

``ratio`` = training / wall: the "effective training time ratio" the field
reports (e.g. Llama 3's > 90 %, ByteRobust's 97 %).

Replica groups (``spec.faultTolerance``, crds/replica_groups.py): while one of R
groups is replaced or lost the others train on, so that time is training, not
lost; it is *degraded*: the job trains at (R−k)/R while k groups are absent.
``degradedSeconds`` (:func:`degraded_seconds`) is the training capacity the
absences cost, in seconds of the whole job: each group's absent seconds over R,
summed; it is a part of ``trainingSeconds`` (never more than it), not added to
the wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import Field

from railtrain.crds import reasons
from railtrain.crds.base import Model

CAUSES = ("job", "node_lost", "quarantine", "elastic")
"""Restart causes of ``lost.restart_<cause>``."""

REASON_CAUSE = {
    reasons.NODE_LOST: "node_lost", reasons.RANK_VANISHED: "node_lost", reasons.RANK_EVICTED: "node_lost", reasons.ADMISSION_REFUSED: "node_lost",
    reasons.NODE_QUARANTINED: "quarantine", reasons.NODE_AVOIDED: "quarantine", reasons.INFRASTRUCTURE_RESTART: "quarantine",
    reasons.ELASTIC_GROW: "elastic",
}  # fmt: skip
"""Condition reasons of a gang restart (operator/job/phases, docs/operator.md "Condition reasons added by recovery") → cause; a verdict's infrastructure restart counts as ``quarantine`` (the verdict named a node), any other reason is the job's own (``job``)."""


def restart_cause(reason: str | None) -> str:
    """The cause of a gang's end from its condition reason; see :data:`REASON_CAUSE`.

    ``Suspended`` gives ``suspended`` (the wait for a resume counts as queued) and
    ``GangTimeout`` gives ``starting`` (a first gang that never ran all its ranks
    and was re-queued is still starting).
    """
    if reason in (reasons.SUSPENDED, reasons.GANG_TIMEOUT):
        return "suspended" if reason == reasons.SUSPENDED else "starting"
    return REASON_CAUSE.get(reason or "", "job")


class Progress(Model):
    """What the job's rank 0 last reported (read by the operator from rank 0's metrics endpoint, at most every few seconds)."""

    step: int = Field(ge=0, description="Last finished optimizer step.")
    total_steps: int | None = Field(None, ge=0, description="Steps the trainer runs to (its --steps).")
    loss: float | None = Field(None, description="Loss of the last step, mean over ranks (nats per token).")
    tokens_per_second: float | None = Field(None, ge=0, description="Tokens of the global batch per second in the last step.")
    eta_seconds: float | None = Field(None, ge=0, description="Estimated seconds to totalSteps at the last step's speed.")
    last_update_time: datetime = Field(description="When these numbers were read (RFC 3339).")


class AttemptRecord(Model):
    """One gang's life as the operator recorded it (the evidence status.goodput is computed from; see :class:`Attempt`)."""

    released: datetime = Field(description="When the gang was admitted and released.")
    first_step: int | None = Field(None, ge=0, description="The first step rank 0 reported in this attempt.")
    first_step_at: datetime | None = Field(None, description="When it was read.")
    last_step: int | None = Field(None, ge=0, description="The last step rank 0 reported.")
    last_step_at: datetime | None = Field(None, description="When it was read.")
    ended: datetime | None = Field(None, description="When the gang was stopped (restart, suspension, gang timeout).")
    end_reason: str | None = Field(None, description="The condition reason it was stopped with.")
    resumed_from: int = Field(0, ge=0, description="The checkpoint step this attempt resumed from.")
    blocked_seconds: float = Field(0, ge=0, description="Seconds its step loop waited for checkpoint saves.")
    in_place: str | None = Field(None, description="The verdict of the in-place restart that ended it (processes restarted inside the running pods); None when it ended otherwise.")


MAX_ATTEMPTS = 100
"""Attempts kept in status.goodput.attempts; beyond, the two oldest are merged (their downtime then counts as training)."""


class Goodput(Model):
    """The job's wall time since creation split by where it went (crds/goodput.py has the rules); seconds."""

    wall_seconds: float = Field(ge=0, description="Seconds from creation to now (or to completion).")
    queued_seconds: float = Field(0, ge=0, description="Waiting for admission (and, suspended, for a resume).")
    starting_seconds: float = Field(0, ge=0, description="First gang released → its first finished step (pods starting, rendezvous, checkpoint load).")
    training_seconds: float = Field(0, ge=0, description="Steps kept: from each attempt's first step to its last, less recomputed steps and checkpoint-blocked time.")
    lost_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Lost time by cause: restart_job, restart_node_lost, restart_quarantine, restart_elastic, restart_in_place_<verdict> (downtime from an attempt's last step to the next one's first), recompute (steps done again after an older checkpoint was restored), checkpoint (step loop blocked by saves).",
    )
    degraded_seconds: float | None = Field(
        None, ge=0,
        description="Replica groups (spec.faultTolerance): the part of trainingSeconds lost to absent groups, in seconds of the whole job (each group's absent seconds / replicaGroups, summed); the job trained on meanwhile at (R-k)/R, so it is counted here, not as lost time. Absent for a job without replica groups.",
    )  # fmt: skip
    ratio: float = Field(0, ge=0, le=1, description="trainingSeconds / wallSeconds.")
    last_update_time: datetime = Field(description="The time the breakdown was computed for (RFC 3339).")
    attempts: list[AttemptRecord] = Field(default_factory=list, max_length=MAX_ATTEMPTS, description="The gangs the breakdown is computed from, oldest first (the operator's record).")


@dataclass(frozen=True)
class Attempt:
    """One gang's life, as recorded (plain data).

    Attributes:
        released: when the gang was admitted and released.
        first_step: step number of the first step this attempt finished (None: no step yet).
        first_step_at: when it was seen.
        last_step: the last step seen (== first_step when one was seen).
        last_step_at: when it was seen.
        ended: when the gang was torn down; None for the running attempt.
        end_reason: the Scheduled condition reason of its restart (see :func:`restart_cause`), when it ended.
        resumed_from: the step this attempt resumed from (the restored checkpoint's; 0 for a fresh start).
        blocked_seconds: seconds its step loop waited for checkpoint saves.
        in_place: the verdict of the in-place restart that ended it (None: it did not end in place).
    """

    released: datetime
    first_step: int | None = None
    first_step_at: datetime | None = None
    last_step: int | None = None
    last_step_at: datetime | None = None
    ended: datetime | None = None
    end_reason: str | None = None
    resumed_from: int = 0
    blocked_seconds: float = 0.0
    in_place: str | None = None


STALL_FLOOR_SECONDS = 60.0
"""The shortest time without a new step after which the running attempt counts as not training (:func:`stall_seconds`)."""
STALL_STEPS = 3
"""Mean step times without a new step after which the running attempt counts as not training (the hang watchdog's factor)."""


def stall_seconds(a: Attempt) -> float:
    """How long the running attempt may go without a new step seen and still count as training: ``max(60 s, 3 x its mean step time)``.

    The mean step time is ``(last_step_at - first_step_at) / (last_step - first_step)`` (0 before two steps were seen).
    The floor covers how rarely progress is seen (the operator reads rank 0 every few seconds, ``run --local`` sees
    every ``--log-every``-th step) and the first steps' warm-up.
    """
    steps = (a.last_step or 0) - (a.first_step or 0)
    if steps <= 0 or a.first_step_at is None or a.last_step_at is None:
        return STALL_FLOOR_SECONDS
    return max(STALL_FLOOR_SECONDS, STALL_STEPS * _seconds(a.first_step_at, a.last_step_at) / steps)


def _seconds(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds())


def breakdown(created: datetime, attempts: list[Attempt], now: datetime) -> Goodput:
    """Split the wall time from ``created`` to ``now`` by cause (module docstring).

    Args:
        created: the job's creation time (UTC, aware).
        attempts: its gangs in order; each one's times lie after the previous one's.
        now: the current time, or the job's completion time when it finished.

    Returns:
        The :class:`Goodput`. Its parts add up to ``wall_seconds`` exactly when
        the timestamps are in order; a timestamp out of order (clock skew between
        nodes) makes its window 0 instead of negative, so the sum can exceed the
        wall time by that skew.
    """
    parts: dict[str, float] = {}

    def add(bucket: str, seconds: float) -> None:
        parts[bucket] = parts.get(bucket, 0.0) + seconds

    t, bucket = created, "queued"
    active = [0.0] * len(attempts)  # each attempt's window from its first step to its last (to now when running)
    for i, a in enumerate(attempts):
        released = max(a.released, t)
        if i == 0:
            add("queued", _seconds(t, released))
            t, bucket = released, "starting"
        if a.first_step_at is not None:
            first = max(a.first_step_at, t)
            add(bucket, _seconds(t, first))
            t, bucket = first, "active"
            if a.ended is not None:
                last = max(a.last_step_at or first, t)
                active[i] = _seconds(t, last)
                t = last
        if a.ended is not None and a.first_step_at is None and bucket.startswith("restart_"):
            end = max(a.ended, t)  # a restarted gang that ended before its first step: the earlier restart's time runs to its end
            add(bucket, _seconds(t, end))
            t = end
        if a.ended is not None:
            cause = restart_cause(a.end_reason)
            bucket = {"suspended": "queued", "starting": "starting"}.get(cause, f"restart_{cause}")
            if a.in_place:
                bucket = f"restart_in_place_{a.in_place}"
    if bucket == "active":
        a = attempts[-1]
        last = max(a.last_step_at or t, t)
        tail = _seconds(last, now)
        if tail > stall_seconds(a):  # no step for longer than any healthy gap: not training (module docstring)
            active[-1] = _seconds(t, last)
            add("no_progress", tail)
        else:
            active[-1] = _seconds(t, now)
    else:
        add(bucket, _seconds(t, now))
    recompute = 0.0
    for i in range(len(attempts) - 1):
        prev, redone = attempts[i], (attempts[i].last_step or 0) - attempts[i + 1].resumed_from
        steps = (prev.last_step or 0) - (prev.first_step or 0)
        if redone > 0 and steps > 0:
            recompute += min(active[i], redone * active[i] / steps)
    blocked = sum(a.blocked_seconds for a in attempts)
    total_active = sum(active)
    recompute = min(recompute, total_active)
    blocked = min(blocked, total_active - recompute)
    training = total_active - recompute - blocked
    lost = {k: v for k, v in parts.items() if k.startswith("restart_") or k == "no_progress"}
    if recompute:
        lost["recompute"] = recompute
    if blocked:
        lost["checkpoint"] = blocked
    wall = _seconds(created, now)
    return Goodput(
        wall_seconds=round(wall, 3), queued_seconds=round(parts.get("queued", 0.0), 3), starting_seconds=round(parts.get("starting", 0.0), 3),
        training_seconds=round(training, 3), lost_seconds={k: round(v, 3) for k, v in sorted(lost.items())},
        ratio=round(training / wall, 4) if wall > 0 else 0.0, last_update_time=now,
    )  # fmt: skip


def degraded_seconds(absences: list[tuple[float, datetime | None]], now: datetime) -> float:
    """The training capacity replica groups' absences cost, in seconds of the whole job (module docstring).

    Args:
        absences: one ``(absent seconds in ended absences, start of the current absence or None)`` per replica group,
            every group of the job (R = its length).
        now: the time the breakdown is computed for.

    Returns:
        ``Σ (absent + (now − since)) / R`` in seconds (0 without groups); a ``since`` after ``now`` counts 0.
    """
    if not absences:
        return 0.0
    return sum(done + (_seconds(since, now) if since is not None else 0.0) for done, since in absences) / len(absences)


def with_degraded(g: Goodput, degraded: float) -> Goodput:
    """``g`` with ``degradedSeconds`` set: ``degraded`` capped at ``g.training_seconds`` (an absence can only cost time the job trained)."""
    return g.model_copy(update={"degraded_seconds": round(min(max(0.0, degraded), g.training_seconds), 3)})


def total(g: Goodput) -> float:
    """The sum of every part of ``g`` (seconds): equals ``g.wall_seconds`` up to rounding when the timestamps were in order."""
    return g.queued_seconds + g.starting_seconds + g.training_seconds + sum(g.lost_seconds.values())


def to_attempts(records: list[dict]) -> list[Attempt]:
    """:class:`Attempt` values from status.goodput.attempts (camelCase dicts); raises pydantic.ValidationError on a malformed one."""
    out = []
    for r in records:
        m = AttemptRecord.model_validate(r)
        out.append(Attempt(m.released, m.first_step, m.first_step_at, m.last_step, m.last_step_at, m.ended, m.end_reason, m.resumed_from, m.blocked_seconds, m.in_place))
    return out
