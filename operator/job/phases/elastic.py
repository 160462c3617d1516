"""Elastic grow: a Running elastic gang below ``spec.nodes`` restarts at a larger size once capacity returns.

Shrinking needs no row of its own: a lost or quarantined node restarts the
gang (:mod:`~.node_loss`, :mod:`~.verdict`), and the admission pass admits the
new gang at the largest admissible size that fits now, never below
``spec.elastic.minNodes`` (:meth:`~railtrain.crds.api.TrainingJobSpec.node_counts`).

Growing back restarts the whole gang too (a static torchrun world cannot
change size in place), so its rate is bounded: at most once per
``spec.elastic.growIntervalSeconds`` since the gang last started
(``status.lastResizeTime``, else ``startTime``). The controller tells the pass
how large a gang the admission queue would give it now, counting this job's
own nodes as free and every waiting job the queue puts first as served first
(:attr:`~.step.Step.grow_to`, :func:`railtrain.operator.job.resize.grow_size`): it
never grows past a waiting job of higher priority, or of equal priority that
arrived earlier, and never restarts into a size the next pass would not give it. The operator cannot see a checkpoint being
written from outside the pod, so it cannot avoid growing during one; the
trainer resumes from the newest complete checkpoint, and a save cut short is
never loaded (docs/checkpoints.md).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from railtrain.crds.times import format_time
from railtrain.crds import reasons
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.resize import grow_due
from railtrain.crds import recovery
from railtrain.operator.job.phases.restart import apply, counters
from railtrain.operator.job.phases.step import Step, healthy
from railtrain.operator.job.phases.transition import Transition



def _due(step: Step) -> bool:
    elastic = step.job.spec.elastic if step.job else None
    if elastic is None or step.grow_to is None or step.grow_to <= step.n or not healthy(step) or step.released is None:
        return False
    return grow_due(step.job.spec, step.state, step.now)


def _grow(step: Step) -> str:
    step.status["lastResizeTime"] = format_time(step.now)
    what = f"{step.grow_to} nodes fit now (the gang runs on {step.n} of spec.nodes={step.job.spec.nodes}); growing"
    return apply(step, recovery.restart_infrastructure(step.job.spec.run_policy, counters(step), reasons.ELASTIC_GROW, what, bounded=False))


GROW = Transition(
    "elastic-grow", frozenset({cond.RUNNING}), _due, _grow,
    "A Running elastic gang below spec.nodes whose larger size fits now restarts to grow, at most once per elastic.growIntervalSeconds (reason ElasticGrow).",
)
