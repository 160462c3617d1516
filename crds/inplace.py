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
   escalates", :data:`ESCALATE_AFTER`), unless that attempt ran
   :data:`TRAINED_SECONDS` first (the coordinator starts the streak over).
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
from typing import Any, Mapping, Sequence

from railtrain.crds import reasons, recovery
from railtrain.crds.verdicts import REASON_QUORUM_LOST, json_object

PATH_IN_PLACE, PATH_GANG, PATH_NONE, PATH_SPARE = "in-place", "gang", "none", "spare"
""":attr:`railtrain.crds.recovery.Decision.path` values: in place, the whole gang, none (the job fails), a hot spare
takes a lost node's rank (:func:`decide_spare`)."""
SPARE_CAUSE = "spare"
"""The :attr:`Ledger.causes` key of a spare's takeover (goodput's lost time ``restart_in_place_spare``)."""
ESCALATE_AFTER = 1
"""In-place restarts in a row after which the next failure escalates to a gang restart (the second failure in a row)."""
TRAINED_SECONDS = 120.0
"""An attempt opened in place (or by a spare's takeover) that ran this long before it failed has trained: its failure
is a new fault, not the in-place restart failing again, and the streak starts over (a job with a fault every few
minutes keeps restarting in place; an attempt the same pods fail again at once still escalates). Time, not steps:
the pod-side supervisor does not see the trainer's steps."""
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
        causes: in-place restarts by the verdict that caused them (:data:`SPARE_CAUSE` for a spare's takeover).
        streak: in-place restarts in a row since the gang started (a spare's takeover is not one: the node was lost,
            not the processes' doing).
        spares: node ranks a hot spare took over in this gang.
        left: the nodes this gang left for a verdict while hot spares took their ranks (:func:`decide_verdict_spare`),
            oldest first, each ``{"node", "verdict", "reason", "quarantine", "evidence"}``: the operator, which alone
            may taint a node, quarantines or avoids them (:func:`railtrain.operator.job.inplace.count`).
    """

    restarts: int = 0
    attempt: int = 0
    job: int = 0
    infrastructure: int = 0
    causes: Mapping[str, int] = field(default_factory=dict)
    streak: int = 0
    spares: int = 0
    left: tuple[Mapping[str, Any], ...] = ()

    def after(self, d: recovery.Decision) -> "Ledger":
        """The ledger after in-place restart ``d`` (a decision whose path is :data:`PATH_IN_PLACE`)."""
        kind = "job" if d.action == recovery.RESTART_JOB else "infrastructure"
        causes = dict(self.causes) | {d.verdict: int(self.causes.get(d.verdict, 0)) + 1}
        return replace(self, attempt=self.attempt + 1, causes=causes, streak=self.streak + 1, **{kind: getattr(self, kind) + 1})

    def after_spares(self, d: recovery.Decision, taken: int) -> "Ledger":
        """The ledger after decision ``d`` (path :data:`PATH_SPARE`) gave ``taken`` lost node ranks to spares: the next
        attempt, one infrastructure restart per rank taken (as ``d``'s counters spent them), the streak unchanged."""
        causes = dict(self.causes) | {SPARE_CAUSE: int(self.causes.get(SPARE_CAUSE, 0)) + taken}
        return replace(self, attempt=self.attempt + 1, infrastructure=self.infrastructure + taken, causes=causes, spares=self.spares + taken)

    def after_verdict_spares(self, d: recovery.Decision, taken: int, left: Sequence[Mapping[str, Any]]) -> "Ledger":
        """The ledger after decision ``d`` (path :data:`PATH_SPARE`, from :func:`decide_verdict_spare`) gave the
        ``taken`` ranks on the nodes ``left`` to spares: the next attempt, the one restart ``d`` spent (job or
        infrastructure, as its rule says) under its verdict, the streak unchanged (the node was to blame, not the
        processes' state)."""
        kind = "job" if d.action == recovery.RESTART_JOB else "infrastructure"
        causes = dict(self.causes) | {d.verdict: int(self.causes.get(d.verdict, 0)) + 1}
        return replace(self, attempt=self.attempt + 1, causes=causes, spares=self.spares + taken, left=(*self.left, *left),
                       **{kind: getattr(self, kind) + 1})  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The ledger as JSON data (the :data:`LEDGER_KEY` value)."""
        out = {"restarts": self.restarts, "attempt": self.attempt, "job": self.job, "infrastructure": self.infrastructure, "causes": dict(self.causes),
               "streak": self.streak, "spares": self.spares}  # fmt: skip
        if self.left:
            out["left"] = [dict(e) for e in self.left]
        return out

    @classmethod
    def from_json(cls, data: Any) -> "Ledger | None":
        """A ledger from JSON data, or None when ``data`` is not one (a claim from the pod: checked, never trusted)."""
        if not isinstance(data, dict):
            return None
        ints = {k: data.get(k, 0) for k in ("restarts", "attempt", "job", "infrastructure", "streak", "spares")}
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1_000_000 for v in ints.values()):
            return None
        causes = data.get("causes") or {}
        if not isinstance(causes, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in causes.items()):
            return None
        left = data.get("left") or []
        if not isinstance(left, list) or len(left) > 1000 or not all(_left_entry(e) for e in left):
            return None
        return cls(causes=dict(causes), left=tuple({k: e[k] for k in LEFT_KEYS} for e in left), **ints)


LEFT_KEYS = ("node", "verdict", "reason", "quarantine", "evidence")
""":attr:`Ledger.left`'s keys."""


def _left_entry(e: Any) -> bool:
    """Whether ``e`` is a well-formed :attr:`Ledger.left` entry (a pod's claim: node and verdict bounded strings)."""
    if not isinstance(e, dict) or not all(k in e for k in LEFT_KEYS) or not isinstance(e["quarantine"], bool):
        return False
    return all(isinstance(e[k], str) for k in ("node", "verdict", "reason", "evidence")) and 0 < len(e["node"]) <= 253 and \
        len(e["verdict"]) <= 64 and len(e["reason"]) <= 128 and len(e["evidence"]) <= 1024


def decide_verdict_spare(d: recovery.Decision, before: recovery.Counters, ranks_on: Mapping[int, str], ready: int) -> tuple[recovery.Decision, dict[int, str]] | None:
    """A verdict that sends nodes out of the gang (quarantined or newly avoided): do hot spares take their ranks?

    :func:`decide_path` restarts the whole gang for it (rule 2: processes restarted on the same node would meet the
    same node). With enough spares ready the node leaves without a gang restart: each rank on a node that must be left
    goes to a spare, the others restart in place; the decision, its counters and its spent restart are ``d``'s
    (the one rule's), only the path differs. The quarantine itself stays the operator's (it alone may taint a node):
    the ledger says which nodes were left and why (:meth:`Ledger.after_verdict_spares`).

    Args:
        d: :func:`decide_path`'s decision; before: the counters it was decided on.
        ranks_on: node rank → its node's name, for every rank of the gang (all of them reported).
        ready: spares registered and alive.

    Returns:
        ``(decision with path spare, {node rank: node to leave})``, or None when ``d`` stays as it is: not a gang
        restart for a node to leave, the failure was the infrastructure's, a node to leave hosts no rank, or fewer
        spares are ready than ranks must move (nothing is half taken over).
    """
    if d.path != PATH_GANG or d.action == recovery.FAIL or d.blamed.cause in recovery.INFRASTRUCTURE_CAUSES or d.blamed.rank < 0:
        return None
    leave = set(d.quarantine) | (set(d.avoid) - set(before.avoid))
    moving = {r: n for r, n in sorted(ranks_on.items()) if n and n in leave}
    if not leave or set(moving.values()) != leave or ready < len(moving):
        return None
    places = ", ".join(str(r) for r in moving)
    what = d.what or d.message
    c = d.counters
    counts = f"job restarts {c.job_restarts}, infrastructure restarts {c.infrastructure_restarts}"
    text = f"{what}; a hot spare takes node rank {places}'s place, the others {IN_PLACE_WORDS} ({counts})"
    return replace(d, path=PATH_SPARE, message=text, backoff_seconds=0), moving


def left_entries(d: recovery.Decision, moving: Mapping[int, str]) -> list[dict[str, Any]]:
    """:attr:`Ledger.left` entries of verdict-spare decision ``d`` (:func:`decide_verdict_spare`): one per node left."""
    f = d.blamed
    evidence = f"{f.verdict} verdict of rank {f.rank} ({f.reason}: {f.message})"[:1024]
    return [{"node": n, "verdict": f.verdict, "reason": f.reason, "quarantine": n in d.quarantine, "evidence": evidence} for n in sorted(set(moving.values()))]


def decide_spare(run_policy: Any, counters: recovery.Counters, lost: Mapping[int, str], ready: int, left: frozenset[int] = frozenset()) -> recovery.Decision:
    """Node ranks whose supervisors fell silent (their pods or nodes lost): do hot spares take their places?

    The one rule's infrastructure restart (:func:`railtrain.crds.recovery.restart_infrastructure`, reason
    ``NodeLost``) for each lost node, in rank order, on ``counters``: each spends one of
    ``maxInfrastructureRestarts`` and counts the node's failure, as a gang restart for the same loss would. Then:

    1. a spent budget fails the job (path :data:`PATH_NONE`);
    2. **gang** when fewer spares are ready than ranks were lost (two nodes lost with one spare: no rank is given a
       spare, so nothing is half taken over);
    3. otherwise **spare**: each lost rank goes to a ready spare; the other ranks restart their processes in place.
       Node rank 0 is no exception: the coordinator that calls this has moved to a surviving supervisor when rank
       0's was lost (:mod:`railtrain.crds.coordinator`), and torch's rendezvous store moves to the spare's host.

    Args:
        run_policy: the job's ``RunPolicy``; counters: the job-wide counters (plus this gang's in-place restarts).
        lost: node rank → its node's name ("" unknown), the ranks lost.
        ready: spares registered and alive.
        left: the lost ranks whose supervisor said it was stopped (its pod deleted or evicted) rather than fell silent.

    Returns:
        The decision, ``path`` set; its message says "a hot spare takes node rank K's place" or why the gang restarts.

    Raises:
        ValueError: ``lost`` is empty.
    """
    if not lost:
        raise ValueError("decide_spare needs at least one lost node rank")
    ranks = sorted(lost)
    what = "; ".join(f"node rank {r}'s supervisor was stopped (its pod on {lost[r] or '?'} deleted or evicted)" if r in left
                     else f"node rank {r}'s supervisor fell silent (its pod or node {lost[r] or '?'} lost)" for r in ranks)  # fmt: skip
    whole = ready < len(ranks)
    d, c = None, counters
    for r in ranks[:1] if whole else ranks:  # a gang restart is one restart; each spare's takeover is one
        d = recovery.restart_infrastructure(run_policy, c, reasons.NODE_LOST, what, node=lost[r])
        if d.action == recovery.FAIL:
            return replace(d, path=PATH_NONE)
        c = d.counters
    assert d is not None
    if whole:
        return replace(d, path=PATH_GANG, message=f"{d.message}; {ready} spare(s) ready for {len(ranks)} lost node rank(s)")
    places = ", ".join(str(r) for r in ranks)
    counts = f"job restarts {c.job_restarts}/{run_policy.backoff_limit}, infrastructure restarts {c.infrastructure_restarts}/{run_policy.max_infrastructure_restarts}"
    text = f"{what}; a hot spare takes node rank {places}'s place, the others {IN_PLACE_WORDS} ({counts})"
    return replace(d, path=PATH_SPARE, message=text, backoff_seconds=0)


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
        left=ledger.left[int(c.get("nodesLeft", 0)):],
    )  # fmt: skip


def counted_record(ledger: Ledger) -> dict[str, Any]:
    """``status.inPlace`` once ``ledger`` is counted: the gang's restart count, attempt, restarts by kind and cause,
    and how many of the nodes it left for a verdict were acted on."""
    out = {"restarts": ledger.restarts, "attempt": ledger.attempt, "jobRestarts": ledger.job, "infrastructureRestarts": ledger.infrastructure, "causes": dict(ledger.causes)}
    return out | ({"nodesLeft": len(ledger.left)} if ledger.left else {})


def spend(counters: recovery.Counters, delta: Ledger) -> recovery.Counters:
    """``counters`` with the in-place restarts of ``delta`` spent (job-wide, as gang restarts spend them)."""
    return replace(counters, job_restarts=counters.job_restarts + delta.job, infrastructure_restarts=counters.infrastructure_restarts + delta.infrastructure)


# --- the third path: one replica group replaced alone (spec.faultTolerance; issue 31) ---

PATH_GROUP = "group"
""":attr:`railtrain.crds.recovery.Decision.path` of a restart that replaces one replica group's pods alone."""
PATH_GROUP_LOST = "group-lost"
"""A replica group that spent its restart budget: given up, not replaced; the others train on while they keep the quorum."""
BUDGET_REASONS = frozenset({reasons.BACKOFF_LIMIT_EXCEEDED, recovery.REASON_INFRA_LIMIT})
"""Fail reasons of :func:`railtrain.crds.recovery.decide` that mean a budget is spent (for a group: the group is lost)."""


@dataclass(frozen=True)
class GroupDecision:
    """What a failure inside replica group ``group`` leads to (:func:`decide_group_path`).

    Attributes:
        path: :data:`PATH_GROUP` (replace the group alone), :data:`PATH_GROUP_LOST` (give the group up),
            :data:`PATH_GANG` (restart the whole gang as without replica groups: the caller's existing rows decide,
            with the job-wide counters) or :data:`PATH_NONE` (the job fails: :attr:`decision` says why).
        decision: the decision with its sentence; its ``counters`` are the job-wide ones to store (their
            ``job_restarts`` and ``infrastructure_restarts`` unchanged by a group's replacement).
        group: the group.
        job_restarts, infrastructure_restarts: the group's own counts after this decision.
        why: the clause saying why the group goes elsewhere (:attr:`elsewhere`) or why it could not be replaced alone (:data:`PATH_GANG`).
        elsewhere: for :data:`PATH_GROUP`, a node of the group must be left: the group's pods are placed again (the
            other groups' nodes kept) rather than created again on their nodes.
    """

    path: str
    decision: recovery.Decision
    group: int
    job_restarts: int = 0
    infrastructure_restarts: int = 0
    why: str = ""
    elsewhere: bool = False


def decide_group_path(
    failures: recovery.GangFailure | None, what: str, run_policy: Any, counters: recovery.Counters, now: datetime, *,
    group: int, spent: tuple[int, int], groups: int, down: set[int], lost: set[int], min_replicas: int,
    reason: str = reasons.RANK_VANISHED, node: str = "",
) -> GroupDecision:  # fmt: skip
    """Decide a failure inside one replica group: the one rule (:func:`railtrain.crds.recovery.decide`) with the group's own budget, then the path.

    The budget is the job's ``runPolicy.backoffLimit`` and ``maxInfrastructureRestarts``, counted per group: the
    counters the rule sees are the group's (``spent``), so one group that keeps failing spends its own budget, not its
    peers'. The order (docs/operator.md, "Replica groups"):

    1. A decision that fails the job for another reason than a spent budget (``user-error``, a rule's ``Fail``, the
       quarantine bound) fails the job: retrying a configuration error in another group cannot help. So does a rank
       that reports ``QuorumLost`` (the trainer waited ``quorumTimeoutSeconds`` for ``minReplicas`` groups): the job
       fails with reason ``QuorumLost``, since replacing this group cannot bring the missing ones back.
    2. A spent budget gives the group up (:data:`PATH_GROUP_LOST`) while the groups neither lost nor down keep
       ``minReplicas``; otherwise the job fails with reason ``QuorumLost``.
    3. **Gang** when every group is down or lost (no live peer to heal from): the whole gang restarts as without
       replica groups.
    4. **Group, elsewhere** when a node must be left (the node lost, the kubelet ended or refused a pod, a node
       quarantined or newly avoided): the group alone is placed again, the other groups' nodes kept
       (:attr:`GroupDecision.elsewhere`).
    5. Otherwise the group is replaced alone, on its own nodes (:data:`PATH_GROUP`).

    Args:
        failures: the failed ranks of this group (None for a vanished pod or a lost node: an infrastructure restart ``what`` says).
        what: the sentence of a vanished pod or lost node (ignored when ``failures`` is given).
        run_policy, counters, now: as ``decide``; ``counters`` are the job-wide ones.
        group: the group; spent: its ``(jobRestarts, infrastructureRestarts)`` so far.
        groups: R; down: groups whose pods are failing or being replaced now, this one included; lost: groups given up.
        min_replicas: ``spec.faultTolerance.minReplicas``.
        reason: without ``failures``, the infrastructure restart's reason (``RankVanished``, or ``NodeLost``).
        node: without ``failures``, the node lost ("": none): counted in ``nodeFailures`` and left.

    Returns:
        A :class:`GroupDecision`.
    """
    mine = replace(counters, job_restarts=spent[0], infrastructure_restarts=spent[1])
    if failures is None:
        d = recovery.restart_infrastructure(run_policy, mine, reason, what, node=node)
    else:
        d = recovery.decide(failures, run_policy, mine, now)
    after = d.counters
    job_wide = replace(after, job_restarts=counters.job_restarts, infrastructure_restarts=counters.infrastructure_restarts)
    d = replace(d, counters=job_wide)
    counts = dict(job_restarts=after.job_restarts, infrastructure_restarts=after.infrastructure_restarts)
    quorum = next((f for f in failures.failures if f.reason == REASON_QUORUM_LOST), None) if failures is not None else None
    if quorum is not None:  # the group waited quorumTimeoutSeconds for the others: replacing it cannot bring them back
        message = (f"replica group {group}: {quorum.detail()}; no quorum of spec.faultTolerance.minReplicas={min_replicas} groups formed "
                   "within quorumTimeoutSeconds, and replacing this group alone cannot bring the missing ones back")  # fmt: skip
        fail = recovery.Decision(recovery.FAIL, quorum.verdict, reasons.QUORUM_LOST, message, quorum, counters=job_wide, path=PATH_NONE)
        return GroupDecision(PATH_NONE, fail, group)
    if d.action == recovery.FAIL and d.reason not in BUDGET_REASONS:
        return GroupDecision(PATH_NONE, replace(d, path=PATH_NONE), group, **counts)
    if d.action == recovery.FAIL:
        kept = groups - len(lost | down)
        if kept < min_replicas:
            message = (f"replica group {group}: {d.message}; {kept} of {groups} replica groups can be kept, "
                       f"fewer than spec.faultTolerance.minReplicas={min_replicas}")  # fmt: skip
            return GroupDecision(PATH_NONE, replace(d, reason=reasons.QUORUM_LOST, message=message, path=PATH_NONE), group, **counts)
        message = f"replica group {group}: {d.message}; the group is given up, {kept} of {groups} groups train on (minReplicas {min_replicas})"
        return GroupDecision(PATH_GROUP_LOST, replace(d, reason=reasons.REPLICA_GROUP_LOST, message=message, path=PATH_GROUP_LOST), group, **counts)
    f = d.blamed
    if len(down | lost) >= groups:
        return GroupDecision(PATH_GANG, replace(d, path=PATH_GANG), group, **counts, why="every replica group is down")
    newly_avoided = sorted(set(d.avoid) - set(counters.avoid))
    leave = sorted(set(d.quarantine) | set(newly_avoided) | ({f.node} if f.node and (f.cause in recovery.INFRASTRUCTURE_CAUSES or node) else set()))
    where = f" on other nodes (node(s) {', '.join(leave)} must be left)" if leave else ""
    text = d.message.replace(f"{GANG_WORDS} (", f"replacing replica group {group} alone{where} (the group's ", 1)
    decision = replace(d, reason=reasons.REPLICA_GROUP_REPLACED, message=text, path=PATH_GROUP)
    return GroupDecision(PATH_GROUP, decision, group, **counts, why=f"node(s) {', '.join(leave)} must be left" if leave else "", elsewhere=bool(leave))
