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
        kueue_queue: the LocalQueue a job without the ``kueue.x-k8s.io/queue-name`` label is given (the operator
            writes the label on it, as Kueue's own LocalQueue defaulting does for the jobs it manages); None: such
            a job is railtrain's own queue's.
        kueue_only: refuse a job that names no LocalQueue (with no ``kueue_queue``): it waits, Scheduled=False
            with reason QueueNameRequired, and nothing is created for it.
    """

    levels: tuple[str, ...] = DEFAULT_LEVELS
    fabric: FabricProfile | None = None
    quarantine_limit: int | None = None
    kueue_queue: str | None = None
    kueue_only: bool = False

    def queue_of(self, labelled: str | None) -> str | None:
        """The LocalQueue of a job whose label names ``labelled`` (None: no label): the label, else :attr:`kueue_queue`."""
        return labelled or self.kueue_queue

    def refused_without_queue(self, labelled: str | None) -> bool:
        """Whether a job naming ``labelled`` (None: no label) is refused for naming no LocalQueue (:attr:`kueue_only`)."""
        return self.kueue_only and self.queue_of(labelled) is None
