"""A row of the phase machine: from which phases, on what observation, which action and next phase.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from railtrain.operator.job import conditions as cond
from railtrain.operator.job.phases.step import Step

ALL_PHASES = frozenset({cond.PENDING, cond.RUNNING, cond.RESTARTING, cond.SUSPENDED, cond.SUCCEEDED, cond.FAILED})
"""Every value of ``status.phase`` (a job without a status is Pending)."""
ACTIVE = ALL_PHASES - cond.TERMINAL_PHASES
"""Phases a job can still leave."""


def always(step: Step) -> bool:
    """The observation that always holds (for rows that apply unconditionally)."""
    return True


@dataclass(frozen=True)
class Transition:
    """One row of the phase machine.

    Attributes:
        name: a short name, used in tests and logs.
        source: the phases (``status.phase`` observed at the start of the pass)
            the row applies in.
        when: the observation that triggers the row, a pure predicate of the :class:`Step`.
        act: the action: records pod/Service actions, conditions and Events on
            the step and returns the next phase, which ends the pass; or returns
            None to let the next rows run (house-keeping rows do this).
        doc: one sentence for the table in docs/operator.md.
    """

    name: str
    source: frozenset[str]
    when: Callable[[Step], bool]
    act: Callable[[Step], str | None]
    doc: str = ""

    def applies(self, step: Step) -> bool:
        """Whether the row fires for ``step``: its source phase matches and its observation holds."""
        return step.old_phase in self.source and self.when(step)
