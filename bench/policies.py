"""The two schedulers the placement-quality simulation compares (see ``placesim``).

:class:`Railtrain` calls railtrain's own pure placement code
(:mod:`railtrain.operator.scheduling.placement` over :func:`railtrain.operator.scheduling.snapshot.snapshot`)
exactly as the operator does, on API-shaped Node dicts.

:class:`KubeScheduler` is a model of kube-scheduler's default profile acting
alone on the same pods, one pod at a time, with no gang and no topology:

* queue: pods in creation order (PrioritySort with equal priorities is FIFO),
  a job's pods in rank order; a pod that does not fit stays Pending and the
  next one is tried (kube-scheduler does not block its queue on one pod);
* filter: NodeResourcesFit (free GPUs >= the pod's request). Like
  kube-scheduler, it stops after finding ``numFeasibleNodesToFind`` feasible
  nodes (all nodes below 100; else max(100, n * max(5, 50 - n/125) / 100)),
  starting where the previous pod's search stopped (``nextStartNodeIndex``);
* score: NodeResourcesFit's default LeastAllocated on CPU and memory. The
  pods ask CPU and memory in proportion to their GPUs (a pod of g GPUs asks
  g/8 of the node), so both scores are ``(free - g) * 100 // gpus_per_node``
  and NodeResourcesBalancedAllocation gives every node the same score. The
  other default plugins (TaintToleration, NodeAffinity, ImageLocality,
  InterPodAffinity, PodTopologySpread's system defaults) score all nodes alike
  here: no taints, affinities, images, or more than one pod of a job that
  could share a node;
* select: uniformly at random among the best-scored nodes (kube-scheduler's
  ``selectHost`` reservoir sampling), from a seeded generator;
* no preemption (equal priorities); pods bound to a job that cannot start
  keep their GPUs until the job starts, as real pods do.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from placesim import JobState, SimNode, Simulator, node_manifest

from railtrain.crds.times import format_micro_time
from railtrain.operator.scheduling import snapshot as cluster_model
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.refusal import Refusal


class Railtrain:
    """railtrain's gang admission: every waiting job, in queue order, placed whole or not at all.

    One pass is what the operator does on every resync: build a snapshot from
    the API objects and hand every waiting gang to
    :func:`railtrain.operator.scheduling.queue.schedule` (queue order, one ledger of
    promised capacity). Where that module does not exist (an older tree), each
    pending job is tried with ``place_gang`` in submission order instead. Jobs
    use the TrainingJob defaults (topology policy ``preferred``, no level).
    """

    name = "railtrain"
    EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)

    def __init__(self, nodes: Sequence[SimNode], gpus_per_node: int):
        self.node_dicts = [node_manifest(n, gpus_per_node) for n in nodes]
        self.fields = {f.name for f in dataclasses.fields(GangRequest)}
        try:
            from railtrain.operator.scheduling.queue import schedule
        except ImportError:
            schedule = None
        self.admission = schedule

    def _snapshot(self, free: dict[str, int], gpus: int) -> cluster_model.ClusterSnapshot:
        # One stand-in pod per node carrying all GPUs in use there: the same
        # input the operator sees, at a fraction of the dicts.
        pods = [
            {"metadata": {"name": f"used-{name}"}, "spec": {"nodeName": name, "containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus - f)}}}]}, "status": {"phase": "Running"}}
            for name, f in free.items() if f < gpus
        ]
        return cluster_model.snapshot(self.node_dicts, pods)

    def request(self, job: JobState) -> GangRequest:
        """The GangRequest the operator would build for the job (defaults for everything the trace does not set)."""
        spec = job.spec
        extra = {"procs_per_node": spec.gpus_per_pod, "created": format_micro_time(self.EPOCH + timedelta(hours=spec.arrival))}
        return GangRequest(job=f"sim/{spec.id:06d}", nodes=spec.pods, gpus_per_node=spec.gpus_per_pod,
                           **{k: v for k, v in extra.items() if k in self.fields})

    def decide(self, jobs: Sequence[JobState], free: dict[str, int], gpus: int) -> list[tuple[JobState, Placement | Refusal]]:
        """The pass's decision for every job, without binding anything."""
        by_name = {f"sim/{j.spec.id:06d}": j for j in jobs}
        if self.admission is not None:
            return [(by_name[d.job], d.result) for d in self.admission([self.request(j) for j in jobs], self._snapshot(free, gpus))]
        out: list[tuple[JobState, Placement | Refusal]] = []
        free = dict(free)
        for job in jobs:  # older tree: place_gang per job, in submission order, on a shared ledger
            result = place_gang(self.request(job), self._snapshot(free, gpus))
            if isinstance(result, Placement):
                for node in result.nodes:
                    free[node] -= job.spec.gpus_per_pod
            out.append((job, result))
        return out

    def schedule(self, sim: Simulator) -> None:
        """One admission pass over every pending job."""
        if not sim.pending:
            return
        for job, result in self.decide(list(sim.pending), sim.free, sim.shape.gpus_per_node):
            if isinstance(result, Placement):
                for rank, node in enumerate(result.nodes):
                    sim.bind(job, rank, node)
            else:
                sim.refuse(job)


def num_feasible_nodes_to_find(n: int) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind`` with the default adaptive percentage."""
    if n < 100:
        return n
    percentage = max(5, 50 - n // 125)
    return max(100, n * percentage // 100)


class KubeScheduler:
    """A model of kube-scheduler's default profile, alone, one pod at a time (see the module docstring)."""

    name = "kube-scheduler"

    def __init__(self, nodes: Sequence[SimNode], gpus_per_node: int, seed: int):
        self.order = sorted(n.name for n in nodes)  # the scheduler's node list, as listed from the API
        self.gpus_per_node = gpus_per_node
        self.rng = random.Random(seed)
        self.next_start = 0
        self.stats: dict[str, Any] = {"pods_bound": 0}

    def pick(self, free: dict[str, int], gpus: int) -> str | None:
        """The node kube-scheduler would bind a pod of ``gpus`` GPUs to, or None (unschedulable)."""
        n = len(self.order)
        limit = num_feasible_nodes_to_find(n)
        feasible: list[str] = []
        processed = 0
        for i in range(n):
            name = self.order[(self.next_start + i) % n]
            processed += 1
            if free[name] >= gpus:
                feasible.append(name)
                if len(feasible) == limit:
                    break
        self.next_start = (self.next_start + processed) % n
        if not feasible:
            return None
        score = {name: (free[name] - gpus) * 100 // self.gpus_per_node for name in feasible}
        best = max(score.values())
        return self.rng.choice([name for name in feasible if score[name] == best])

    def schedule(self, sim: Simulator) -> None:
        """One pass over every Pending pod in queue order."""
        smallest_refused = None  # free GPUs only shrink during a pass: a larger pod cannot fit either
        job: JobState
        for job in list(sim.pending):
            g = job.spec.gpus_per_pod
            for rank, bound in enumerate(job.nodes):
                if bound is not None:
                    continue
                node = None if smallest_refused is not None and g >= smallest_refused else self.pick(sim.free, g)
                if node is None:
                    smallest_refused = g if smallest_refused is None else min(g, smallest_refused)
                    sim.refuse(job)
                    continue
                sim.bind(job, rank, node)
                self.stats["pods_bound"] += 1
