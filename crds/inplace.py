"""Which way a restart goes (pure): in place inside the running pods, or the whole gang recreated; and the in-place ledger.

The one rule (:func:`railtrain.crds.recovery.decide`) decides whether a failed
attempt restarts, which kind of restart it spends (job or infrastructure) and
what happens to nodes. :func:`decide_path` adds *how* it restarts, in this
order (docs/operator.md, "Recovery: in place or the whole gang"):

1. A decision that fails the job restarts nothing.
2. **Gang** when a node must go: the kubelet ended or refused a pod
   (:data:`~railtrain.crds.recovery.INFRASTRUCTURE_CAUSES`), a restart not
   decided by a verdict (node lost, rank vanished, elastic grow: a rank of
   ``-1``), a node quarantined, or a node newly avoided (a straggler's default
   rule, a budget-spent quarantine). Processes restarted on the same node would
   meet the same node.
3. **Gang** when the side that restarts cannot restart in place (the pod is
   gone; ``streak`` is None) or the attempt that failed was itself started by
   an in-place restart (``streak`` ≥ 1: "an in-place restart that fails twice
   escalates", :data:`ESCALATE_AFTER`).
4. Otherwise **in place**: a retryable crash, a hang or straggler whose node is
   neither quarantined nor avoided, a data fault or non-finite loss whose rule
   restarts, a re-execution mismatch that tells no node apart (rule 4 of the
   one rule). The processes restart inside the running pods; no pod is deleted
   or created, node-local checkpoints stay where they are.

Both paths spend the same job-wide counters (``jobRestarts`` or
``infrastructureRestarts``, bounded by ``backoffLimit`` and
``maxInfrastructureRestarts``): the bound is checked by ``decide`` before
the path is chosen, so a budget spent by in-place restarts alone fails the job.

The :class:`Ledger` is what a gang's in-place restarts spent, kept by the
pod-side supervisor (:mod:`railtrain.crds.supervisor`) and reported in every
rank's termination message (key :data:`LEDGER_KEY`) and on rank 0's supervisor
endpoint; the operator (and ``run --local``) adds what it has not yet counted
(:func:`uncounted`) to the job's counters.

May import: the standard library and ``railtrain.crds`` only (the pod side runs it without torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Mapping

from railtrain.crds import recovery
from railtrain.crds.verdicts import json_object

PATH_IN_PLACE, PATH_GANG, PATH_NONE = "in-place", "gang", "none"
""":attr:`railtrain.crds.recovery.Decision.path` values (a hot spare's path comes later)."""
ESCALATE_AFTER = 1
"""In-place restarts in a row after which the next failure escalates to a gang restart (the second failure in a row)."""
GANG_WORDS = "restarting the whole gang"
IN_PLACE_WORDS = "restarting in place"
LEDGER_KEY = "inPlace"
"""The termination-message key (next to the verdict's) that carries a gang's :class:`Ledger`."""
KINDS = ("job", "infrastructure")
STOPPED_KEY = "stopped"


def restart_path(d: recovery.Decision, before: recovery.Counters, streak: int | None) -> tuple[str, str]:
    """The path of decision ``d`` (module docstring, rules 1-4) and why, as a clause ("" for in place).

    Args:
        d: the one rule's decision.
        before: the counters before ``d`` (to tell a newly avoided node).
        streak: in-place restarts in a row that led to the failed attempt (0 for a gang's first attempt),
            or None where the processes cannot be restarted in place.

    Returns:
        ``(path, why)``: :data:`PATH_NONE`, :data:`PATH_GANG` or :data:`PATH_IN_PLACE`.
    """
    if d.action == recovery.FAIL:
        return PATH_NONE, ""
    f = d.blamed
    if f.cause in recovery.INFRASTRUCTURE_CAUSES or f.rank < 0:
        return PATH_GANG, "the node's doing"
    newly_avoided = sorted(set(d.avoid) - set(before.avoid))
    if d.quarantine or newly_avoided:
        return PATH_GANG, f"node(s) {', '.join(sorted(set(d.quarantine) | set(newly_avoided)))} must be left"
    if streak is None:
        return PATH_GANG, ""
    if streak >= ESCALATE_AFTER:
        return PATH_GANG, "escalated: the attempt restarted in place failed again"
    return PATH_IN_PLACE, ""


def decide_path(failures: recovery.GangFailure, run_policy: Any, counters: recovery.Counters, now: datetime, streak: int | None) -> recovery.Decision:
    """:func:`railtrain.crds.recovery.decide` with the path chosen (:func:`restart_path`) and said in the sentence.

    Args:
        failures, run_policy, counters, now: as ``decide``.
        streak: as :func:`restart_path`.

    Returns:
        The decision with ``path`` set; an in-place restart's sentence says "restarting in place" where a gang
        restart's says "restarting the whole gang", and an escalation names why.
    """
    d = recovery.decide(failures, run_policy, counters, now)
    path, why = restart_path(d, counters, streak)
    message = d.message
    if path == PATH_IN_PLACE:
        message = message.replace(GANG_WORDS, IN_PLACE_WORDS, 1)
    elif path == PATH_GANG and why and streak is not None:
        message = message.replace(GANG_WORDS, f"{GANG_WORDS} ({why})", 1)
    return replace(d, path=path, message=message)


@dataclass(frozen=True)
class Ledger:
    """What one gang's in-place restarts spent (the pod-side supervisor's record; plain data).

    Attributes:
        restarts: the gang's restart count (``RAILTRAIN_RESTART_COUNT``) the ledger belongs to.
        attempt: the gang's current attempt (0 before any in-place restart).
        job, infrastructure: in-place restarts of each kind.
        causes: in-place restarts by the verdict that caused them.
        streak: in-place restarts in a row since the gang started.
    """

    restarts: int = 0
    attempt: int = 0
    job: int = 0
    infrastructure: int = 0
    causes: Mapping[str, int] = field(default_factory=dict)
    streak: int = 0

    def after(self, d: recovery.Decision) -> "Ledger":
        """The ledger after in-place restart ``d`` (a decision whose path is :data:`PATH_IN_PLACE`)."""
        kind = "job" if d.action == recovery.RESTART_JOB else "infrastructure"
        causes = dict(self.causes) | {d.verdict: int(self.causes.get(d.verdict, 0)) + 1}
        return replace(self, attempt=self.attempt + 1, causes=causes, streak=self.streak + 1, **{kind: getattr(self, kind) + 1})

    def to_json(self) -> dict[str, Any]:
        """The ledger as JSON data (the :data:`LEDGER_KEY` value)."""
        return {"restarts": self.restarts, "attempt": self.attempt, "job": self.job, "infrastructure": self.infrastructure, "causes": dict(self.causes), "streak": self.streak}

    @classmethod
    def from_json(cls, data: Any) -> "Ledger | None":
        """A ledger from JSON data, or None when ``data`` is not one (a claim from the pod: checked, never trusted)."""
        if not isinstance(data, dict):
            return None
        ints = {k: data.get(k, 0) for k in ("restarts", "attempt", "job", "infrastructure", "streak")}
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1_000_000 for v in ints.values()):
            return None
        causes = data.get("causes") or {}
        if not isinstance(causes, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in causes.items()):
            return None
        return cls(causes=dict(causes), **ints)


def ledger_in_message(text: str | None) -> Ledger | None:
    """The :class:`Ledger` a termination message carries under :data:`LEDGER_KEY`, or None."""
    data = json_object(text)
    return Ledger.from_json(data.get(LEDGER_KEY)) if data is not None else None


def with_ledger(message: str | None, ledger: Ledger, stopped: bool = False) -> str:
    """The termination message ``message`` (a verdict's JSON, or nothing) with ``ledger`` added under :data:`LEDGER_KEY`,
    and ``"stopped": true`` for a rank whose workers its supervisor stopped because a peer failed (never the one to blame).

    A message that is not a JSON object (a log tail) is kept as nothing: the ledger is what is left to read.
    """
    try:
        data = json.loads(message.strip()) if message and message.strip() else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[LEDGER_KEY] = ledger.to_json()
    if stopped:
        data[STOPPED_KEY] = True
    return json.dumps(data, separators=(",", ":"))


def stopped_in_message(text: str | None) -> bool:
    """Whether a supervisor's termination message says its rank was only stopped for a peer's failure."""
    try:
        data = json.loads(text.strip()) if text else None
    except ValueError:
        return False
    return isinstance(data, dict) and data.get(STOPPED_KEY) is True


def without_stopped(failures: tuple[recovery.Failure, ...], stopped: set[int]) -> tuple[recovery.Failure, ...]:
    """``failures`` less the ranks in ``stopped`` (their supervisors stopped them for a peer), unless none would remain."""
    kept = tuple(f for f in failures if f.rank not in stopped)
    return kept or failures


def uncounted(ledger: Ledger, counted: Mapping[str, Any] | None) -> Ledger:
    """What ``ledger`` holds beyond the record ``counted`` (``status.inPlace``: what was counted of the same gang).

    Args:
        ledger: a gang's ledger as its pods report it.
        counted: ``{"restarts", "attempt", "jobRestarts", "infrastructureRestarts", "causes"}`` already counted, or None.

    Returns:
        The difference (never negative); the whole ledger when ``counted`` belongs to another gang.
    """
    c = dict(counted or {})
    if int(c.get("restarts", -1)) != ledger.restarts:
        return ledger
    done = c.get("causes") or {}
    causes = {k: n - int(done.get(k, 0)) for k, n in ledger.causes.items() if n > int(done.get(k, 0))}
    return replace(
        ledger, attempt=max(0, ledger.attempt - int(c.get("attempt", 0))), job=max(0, ledger.job - int(c.get("jobRestarts", 0))),
        infrastructure=max(0, ledger.infrastructure - int(c.get("infrastructureRestarts", 0))), causes=causes,
    )  # fmt: skip


def counted_record(ledger: Ledger) -> dict[str, Any]:
    """``status.inPlace`` once ``ledger`` is counted: the gang's restart count, attempt, restarts by kind and cause."""
    return {"restarts": ledger.restarts, "attempt": ledger.attempt, "jobRestarts": ledger.job, "infrastructureRestarts": ledger.infrastructure, "causes": dict(ledger.causes)}


def spend(counters: recovery.Counters, delta: Ledger) -> recovery.Counters:
    """``counters`` with the in-place restarts of ``delta`` spent (job-wide, as gang restarts spend them)."""
    return replace(counters, job_restarts=counters.job_restarts + delta.job, infrastructure_restarts=counters.infrastructure_restarts + delta.infrastructure)
