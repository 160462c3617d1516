"""The plan settings: what the operator was told at start that the pure planner and the admission pass read (one frozen value).

The runtime builds it once from its flags (:attr:`railtrain.operator.settings.Settings.plan`) and hands
it to :func:`railtrain.operator.job.planner.plan` and :func:`railtrain.operator.job.admit.admission_pass`;
``railtrain plan`` builds one from its own ``--topology-*`` flags. Nothing sets a field afterwards.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass

from railtrain.crds.fabric import FabricProfile
from railtrain.operator.scheduling.topology import DEFAULT_LEVELS


@dataclass(frozen=True)
class PlanSettings:
    """The operator's settings a pass decides with (frozen).

    Attributes:
        levels: topology levels (node label keys), widest first (snapshot domains, placement).
        fabric: the fabric profile (:mod:`railtrain.crds.fabric`) rendered into new pods and whose per-node
            values admitted ranks get as annotations; None: no fabric variables.
        quarantine_limit: the platform's bound on nodes quarantined per hour in the whole cluster (None: none).
    """

    levels: tuple[str, ...] = DEFAULT_LEVELS
    fabric: FabricProfile | None = None
    quarantine_limit: int | None = None
