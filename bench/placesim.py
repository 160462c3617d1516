"""A discrete-event simulation of gang placement on a rail-optimized GPU cluster (pure, seeded).

The cluster is ``nodes`` nodes of ``gpus_per_node`` GPUs, ``nodes_per_rack``
to a rack (one leaf switch per rail) and ``racks_per_block`` racks to a block
(one spine domain). Node names are random tokens by default, as cloud node
names are: a placement that happens to follow name order gets no topology
for free.

A trace is a seeded list of jobs (arrival time, duration, pods, GPUs per
pod). The simulator replays it for one scheduling *policy*: after every batch
of events at one instant (completions first, then arrivals) it calls
``policy.schedule(sim)``, which binds pods with :meth:`Simulator.bind` and
reports jobs that must wait with :meth:`Simulator.refuse`. A job starts when
its last pod is bound and ends ``duration`` later, freeing its GPUs. What the
policies are lives elsewhere (railtrain's placement, a kube-scheduler model);
what is measured lives here, so both are measured alike.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from railtrain.cli.controlplane.nodes import LABEL_BLOCK, LABEL_HOSTNAME, LABEL_RACK

LEVELS = ("node", "rack", "block", "cluster")
"""Topology levels, tightest first; a level's index is its ring distance."""

SIZE_MIX: tuple[tuple[int, float], ...] = (
    (1, 0.30), (2, 0.12), (3, 0.04), (4, 0.14), (6, 0.04), (8, 0.14), (12, 0.04), (16, 0.10), (24, 0.03), (32, 0.05),
)
"""Pods per job and their probability: mostly powers of two, some 3/6/12/24."""
SINGLE_POD_GPUS: tuple[tuple[int, float], ...] = ((1, 0.25), (2, 0.25), (4, 0.25), (8, 0.25))
"""GPUs of a one-pod job; every pod of a multi-pod job takes a whole node."""


@dataclass(frozen=True)
class Shape:
    """The simulated cluster: 128 × 8 GPUs, racks of 8 nodes, blocks of 4 racks by default."""

    nodes: int = 128
    gpus_per_node: int = 8
    nodes_per_rack: int = 8
    racks_per_block: int = 4

    @property
    def gpus(self) -> int:
        """Total GPUs."""
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        """One line, e.g. ``128 nodes x 8 GPUs = 1024 GPUs, 16 racks of 8, 4 blocks of 4 racks``."""
        racks = math.ceil(self.nodes / self.nodes_per_rack)
        return (f"{self.nodes} nodes x {self.gpus_per_node} GPUs = {self.gpus} GPUs, {racks} racks of {self.nodes_per_rack}, "
                f"{math.ceil(racks / self.racks_per_block)} blocks of {self.racks_per_block} racks")


@dataclass(frozen=True)
class SimNode:
    """One node: its name and the rack and block it sits in."""

    name: str
    rack: str
    block: str


def build_nodes(shape: Shape, rng: random.Random, shuffled_names: bool = True) -> list[SimNode]:
    """The nodes in topology order; names are random 6-hex tokens unless ``shuffled_names`` is False."""
    names: list[str] = []
    while len(names) < shape.nodes:
        token = f"node-{rng.randrange(16**6):06x}" if shuffled_names else f"node-{len(names):03d}"
        if token not in names:
            names.append(token)
    per_block = shape.nodes_per_rack * shape.racks_per_block
    return [SimNode(n, f"rack-{i // shape.nodes_per_rack:02d}", f"block-{i // per_block}") for i, n in enumerate(names)]


def node_manifest(node: SimNode, gpus: int) -> dict[str, Any]:
    """The node as the API server would return it: labels, allocatable GPUs, Ready."""
    return {
        "metadata": {"name": node.name, "labels": {LABEL_HOSTNAME: node.name, LABEL_RACK: node.rack, LABEL_BLOCK: node.block}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "192", "memory": "2Ti"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def distance(a: SimNode, b: SimNode) -> int:
    """Ring distance between two nodes: 0 same node, 1 same rack, 2 same block, else 3."""
    if a.name == b.name:
        return 0
    if a.rack == b.rack:
        return 1
    return 2 if a.block == b.block else 3


def span_level(nodes: Sequence[SimNode]) -> int:
    """Index in :data:`LEVELS` of the tightest domain holding all ``nodes``."""
    for level, key in enumerate(("name", "rack", "block")):
        if len({getattr(n, key) for n in nodes}) == 1:
            return level
    return 3


@dataclass(frozen=True)
class JobSpec:
    """One job of the trace: ``pods`` pods of ``gpus_per_pod`` GPUs, arriving at ``arrival``, running ``duration`` (hours)."""

    id: int
    arrival: float
    duration: float
    pods: int
    gpus_per_pod: int

    @property
    def gpus(self) -> int:
        """All GPUs of the job."""
        return self.pods * self.gpus_per_pod


def _draw(rng: random.Random, mix: Sequence[tuple[int, float]]) -> int:
    return rng.choices([v for v, _ in mix], weights=[w for _, w in mix])[0]


def make_trace(seed: int, jobs: int, load: float, shape: Shape, median_hours: float = 1.0, sigma: float = 1.0) -> list[JobSpec]:
    """A seeded job trace with Poisson arrivals.

    Durations are log-normal (median ``median_hours``, shape ``sigma``); the
    arrival rate is set so the offered load (GPU-hours asked per hour over
    GPUs in the cluster) is ``load``.

    Raises:
        ValueError: jobs < 1, load <= 0, or a job larger than the cluster.
    """
    if jobs < 1 or load <= 0:
        raise ValueError(f"need jobs >= 1 and load > 0, got {jobs}, {load}")
    if max(p for p, _ in SIZE_MIX) > shape.nodes:
        raise ValueError(f"the trace has jobs of up to {max(p for p, _ in SIZE_MIX)} nodes; the cluster has {shape.nodes}")
    rng = random.Random(seed)
    total = sum(w for _, w in SIZE_MIX)
    single = sum(g * w for g, w in SINGLE_POD_GPUS) / sum(w for _, w in SINGLE_POD_GPUS)
    mean_gpus = sum(w * (single if p == 1 else p * shape.gpus_per_node) for p, w in SIZE_MIX) / total
    mean_hours = median_hours * math.exp(sigma**2 / 2)
    rate = load * shape.gpus / (mean_gpus * mean_hours)
    out, t = [], 0.0
    for i in range(jobs):
        t += rng.expovariate(rate)
        pods = _draw(rng, SIZE_MIX)
        gpus = _draw(rng, SINGLE_POD_GPUS) if pods == 1 else shape.gpus_per_node
        out.append(JobSpec(i, t, median_hours * math.exp(rng.gauss(0, sigma)), pods, gpus))
    return out


@dataclass
class JobState:
    """A job during the simulation: node per rank (None until bound), start and the facts measured at start."""

    spec: JobSpec
    nodes: list[str | None]
    start: float | None = None
    feasible_level: int | None = None
    placed_level: int | None = None
    ring_distance: float | None = None


class Policy(Protocol):
    """A scheduler under test: binds pods of ``sim.pending`` jobs, refuses the others."""

    name: str

    def schedule(self, sim: "Simulator") -> None:
        """One scheduling pass over the current state."""


@dataclass
class Result:
    """Everything measured for one policy on one trace.

    Attributes:
        first_refusal_util: share of GPUs used by *started* jobs the first time
            a job (or pod) had to wait; NaN if none ever waited.
        first_refusal_bound: share of GPUs bound to any pod at that moment
            (includes pods of gangs that have not started).
        busy_gpu_hours, held_gpu_hours: GPU-hours of started jobs, and of pods
            bound to jobs not started yet, over ``[0, window_hours]`` (the last arrival).
        refusal_util: share of GPUs used by started jobs at the first refusal of
            every scheduling pass that refused something.
    """

    policy: str
    jobs: list[JobState]
    first_refusal_util: float
    first_refusal_bound: float
    first_refusal_time: float
    busy_gpu_hours: float
    held_gpu_hours: float
    window_hours: float
    gpus: int
    refusal_util: list[float] = field(default_factory=list)


class Simulator:
    """Replays a trace for one policy; see the module docstring."""

    def __init__(self, shape: Shape, nodes: Sequence[SimNode], trace: Sequence[JobSpec], policy: Policy):
        self.shape = shape
        self.nodes = {n.name: n for n in nodes}
        self.free = {n.name: shape.gpus_per_node for n in nodes}
        self.trace = list(trace)
        self.policy = policy
        self.pending: list[JobState] = []
        self.now = 0.0
        self.first_refusal: tuple[float, float, float] | None = None
        self._events: list[tuple[float, int, int, JobState]] = []
        self._busy = 0  # GPUs of started jobs
        self._held = 0  # GPUs bound to pods of jobs not started yet
        self._refused_in_pass = False
        self.refusal_util: list[float] = []  # busy share at the first refusal of every pass that refused

    # --- what policies call ----------------------------------------------------
    def used_gpus(self) -> int:
        """GPUs bound to any pod now."""
        return self.shape.gpus - sum(self.free.values())

    def bind(self, job: JobState, rank: int, node: str) -> None:
        """Bind pod ``rank`` of ``job`` to ``node``; the job starts when its last pod is bound.

        Raises:
            ValueError: the pod is already bound or the node lacks free GPUs.
        """
        g = job.spec.gpus_per_pod
        if job.nodes[rank] is not None or self.free[node] < g:
            raise ValueError(f"job {job.spec.id} rank {rank}: cannot bind to {node} (free {self.free[node]}, needs {g})")
        self.free[node] -= g
        job.nodes[rank] = node
        self._held += g
        if all(n is not None for n in job.nodes):
            self._start(job)

    def refuse(self, job: JobState) -> None:
        """Note that ``job`` (or one of its pods) could not be placed in this pass."""
        if self.first_refusal is None:
            self.first_refusal = (self.now, self._busy / self.shape.gpus, self.used_gpus() / self.shape.gpus)
        if self._refused_in_pass is not True:
            self._refused_in_pass = True
            self.refusal_util.append(self._busy / self.shape.gpus)

    def tightest_feasible_level(self, pods: int, gpus: int, free: dict[str, int] | None = None) -> int | None:
        """Tightest level with one domain holding ``pods`` distinct nodes of ``gpus`` free GPUs, else None."""
        free = free if free is not None else self.free
        fits = [self.nodes[n] for n, f in free.items() if f >= gpus]
        if pods == 1 and fits:
            return 0
        for level, key in ((1, "rack"), (2, "block")):
            counts: dict[str, int] = {}
            for n in fits:
                counts[getattr(n, key)] = counts.get(getattr(n, key), 0) + 1
            if counts and max(counts.values()) >= pods:
                return level
        return 3 if len(fits) >= pods else None

    # --- the loop ----------------------------------------------------------------
    def _start(self, job: JobState) -> None:
        g, placed = job.spec.gpus_per_pod, [self.nodes[n] for n in job.nodes if n is not None]
        job.start = self.now
        self._held -= job.spec.gpus
        self._busy += job.spec.gpus
        # What was open to this job: today's free GPUs with its own pods put back.
        before = dict(self.free)
        for n in job.nodes:
            before[n] += g
        job.feasible_level = self.tightest_feasible_level(job.spec.pods, g, before)
        job.placed_level = span_level(placed)
        if len(placed) > 1:
            ring = [distance(placed[r], placed[(r + 1) % len(placed)]) for r in range(len(placed))]
            job.ring_distance = sum(ring) / len(ring)
        self.pending.remove(job)
        heapq.heappush(self._events, (self.now + job.spec.duration, 0, job.spec.id, job))

    def run(self) -> Result:
        """Replay the whole trace (until the last completion, or until nothing can move)."""
        states = [JobState(j, [None] * j.pods) for j in self.trace]
        for s in states:
            heapq.heappush(self._events, (s.spec.arrival, 1, s.spec.id, s))
        last_arrival = max(j.arrival for j in self.trace)
        busy_h = held_h = 0.0
        while self._events:
            t = self._events[0][0]
            window_end = min(t, last_arrival)
            if window_end > self.now:
                busy_h += self._busy * (window_end - self.now)
                held_h += self._held * (window_end - self.now)
            self.now = t
            while self._events and self._events[0][0] == t:
                _, kind, _, job = heapq.heappop(self._events)
                if kind == 0:
                    self._busy -= job.spec.gpus
                    for n in job.nodes:
                        self.free[n] += job.spec.gpus_per_pod
                else:
                    self.pending.append(job)
            self._refused_in_pass = False
            self.policy.schedule(self)
        nan = float("nan")
        when, busy, bound = self.first_refusal or (nan, nan, nan)
        return Result(self.policy.name, states, busy, bound, when, busy_h, held_h, last_arrival, self.shape.gpus, list(self.refusal_util))
