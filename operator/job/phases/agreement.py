"""The rule that ``status.phase`` and the conditions never disagree, enforced at the end of every pass.

Phases are a coarse summary of the conditions (Kubernetes API conventions,
"Typical status properties"): the job is in phase Running, Succeeded, Failed or
Suspended exactly when the condition of that name is True. Rows set their own
condition; this pass turns any other of these conditions that is still True
False, so a row never has to know every condition an earlier pass may have set.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.pods import phase, rank_of
from railtrain.operator.job.phases.step import Step

PHASE_CONDITIONS = (cond.RUNNING, cond.SUCCEEDED, cond.FAILED, cond.SUSPENDED)
"""Condition types that mirror a phase of the same name."""


def not_running_detail(step: Step) -> str:
    """Which ranks keep the gang from being healthy, e.g. ``"rank 1 is Pending; rank 2 has no pod"``."""
    by_rank = {rank_of(p): phase(p) for p in step.gang}
    parts = [f"rank {r} has no pod" if r not in by_rank else f"rank {r} is {by_rank[r]}"
             for r in range(step.n) if by_rank.get(r) not in ("Running", "Succeeded")]
    return "; ".join(parts) or "the gang is not running"


def agree(step: Step, next_phase: str) -> None:
    """Turn False every phase condition that is True but does not match ``next_phase``.

    Args:
        step: the pass; its conditions are updated through ``step.set_condition``.
        next_phase: the phase the pass ends in.

    A row that returns Running, Succeeded, Failed or Suspended sets that
    condition True itself (the invariant tests check every row for it).
    """
    for type_ in PHASE_CONDITIONS:
        if type_ != next_phase and step.is_true(type_):
            if type_ == cond.RUNNING and next_phase in (cond.PENDING, cond.RESTARTING):
                step.set_condition(type_, False, reasons.RANKS_NOT_RUNNING, not_running_detail(step))
            else:
                step.set_condition(type_, False, next_phase, f"the job is {next_phase}")
