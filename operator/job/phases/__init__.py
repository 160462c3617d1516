"""The phase machine of a TrainingJob, as data: phase × observation → action and next phase.

:data:`MACHINE` is an ordered table of :class:`~.transition.Transition` rows.
One pass (:func:`advance`) walks it top to bottom; a row fires when the job's
observed ``status.phase`` is in its ``source`` and its ``when`` predicate holds
for the :class:`~.step.Step`. Its ``act`` records actions, conditions and
Events, and either returns the next phase, which ends the pass, or returns
None (house-keeping rows) and lets the rows below run. The last row
(``waiting``) always fires, so every pass ends in a phase. Earlier rows win:
the order is the priority (a terminal phase before everything, suspension
before failure, failure before success, success before the gang timeout).

One policy per file, each with its own rows and table-driven tests (as JobSet
keeps its failure, success and startup policies):

==================  ==========================================================
``terminal``        a terminal phase stays; an unreadable spec fails the job
``housekeeping``    stale pods, the rendezvous Service (with the gang), the admitted gang size
``suspend``         runPolicy.suspend and resuming
``deadline``        runPolicy.activeDeadlineSeconds
``kueue``           Kueue evicted the job's Workload: the whole gang stopped
``node_loss``       pods on lost nodes force-deleted; a lost node restarts the gang
``finished``        a finished job's pods (cleanPodPolicy) and its TTL
``vanished``        a released rank's pod deleted/evicted/preempted: gang restart; an admitted gang gone: re-admitted
``groups``          replica groups: the Lighthouse lives with the gang; a failed group is replaced alone
``verdict``         a failed rank: runPolicy.failurePolicy by verdict, quarantine
``elastic``         an elastic gang grows back when capacity returns
``success``         every rank exited 0
``unschedulable``   a released rank kube-scheduler refuses: re-placed at once
``gang_timeout``    a released gang that never became fully Running
``terminating``     the previous gang's pods in the way of a rank's name: named
``ownership``       pods the job does not own in the way of a rank's name
``admission``       create gated ranks, apply placement/refusal, Running, waiting
==================  ==========================================================

Adding a transition (e.g. a recovery policy):

1. write a module here with ``_observed(step) -> bool`` and
   ``_act(step) -> phase | None`` (pure: read ``step``, write only
   ``step.out``, ``step.status`` and conditions through ``step.set_condition``)
   and a ``Transition("name", source, _observed, _act, doc)`` constant;
2. insert it into :data:`MACHINE` at its priority (e.g. a recovery policy just
   before ``gang-failed``, the row that applies a failed rank's verdict);
3. add table-driven tests; the invariants in tests/operator/test_phase_invariants.py
   (phase and conditions agree, a terminal phase never leaves) run over every row.

A row returning a phase must leave the conditions agreeing with it; the
machine also enforces the agreement at the end of the pass
(:func:`railtrain.operator.job.phases.agreement.agree`).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.operator.job.phases import (
    admission,
    agreement,
    deadline,
    elastic,
    finished,
    gang_timeout,
    groups,
    housekeeping,
    kueue,
    node_loss,
    ownership,
    success,
    suspend,
    terminal,
    terminating,
    unschedulable,
    vanished,
    verdict,
)
from railtrain.operator.job.phases.step import Plan, Step
from railtrain.operator.job.phases.transition import ACTIVE, ALL_PHASES, Transition

MACHINE: tuple[Transition, ...] = (
    node_loss.FORCE_DELETE_LOST,
    groups.LIGHTHOUSE,
    finished.CLEAN_FINISHED,
    finished.TTL_EXPIRED,
    terminal.STAY_TERMINAL,
    terminal.INVALID_SPEC,
    housekeeping.DELETE_STALE,
    suspend.SUSPEND,
    suspend.RESUME,
    deadline.DEADLINE,
    kueue.KUEUE_EVICTED,
    vanished.GANG_GONE,
    housekeeping.ADMITTED_SIZE,
    groups.REPLICA_GROUP_FAILED,
    node_loss.NODE_LOST,
    vanished.RANK_VANISHED,
    verdict.GANG_FAILED,
    success.ALL_SUCCEEDED,
    unschedulable.UNSCHEDULABLE,
    gang_timeout.GANG_TIMEOUT,
    terminating.WAITING_FOR_OLD_PODS,
    terminating.OLD_PODS_GONE,
    ownership.FOREIGN_PODS,
    ownership.FOREIGN_PODS_GONE,
    admission.CREATE_MISSING,
    admission.REFUSED,
    admission.PLACED,
    admission.BOUND,
    elastic.GROW,
    housekeeping.RENDEZVOUS_SERVICE,
    admission.HEALTHY,
    admission.WAITING,
)
"""The rows, in priority order."""


def advance(step: Step, machine: tuple[Transition, ...] = MACHINE) -> tuple[str, list[str]]:
    """Run one pass of the machine over ``step``.

    Args:
        step: the observations of this pass; its actions and status are filled in.
        machine: the rows (default :data:`MACHINE`).

    Returns:
        ``(next_phase, fired)``: the phase the pass ends in and the names of
        the rows that fired, in order.

    Raises:
        RuntimeError: no row returned a phase (a malformed machine).
    """
    fired = []
    for row in machine:
        if row.applies(step):
            fired.append(row.name)
            nxt = row.act(step)
            if nxt is not None:
                agreement.agree(step, nxt)
                return nxt, fired
    raise RuntimeError(f"the phase machine ended without a phase (rows fired: {fired})")


__all__ = ["ACTIVE", "ALL_PHASES", "MACHINE", "Plan", "Step", "Transition", "advance"]
