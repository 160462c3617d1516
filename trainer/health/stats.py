"""Pure statistics of the health checks: plain numbers in, decisions out (no torch, no I/O).

Sources:
- Majority over bitwise replica fingerprints follows Megatron-LM's parameter-hash
  check (``check_param_hashes_across_dp_replicas``: a SHA-256 of each parameter, compared
  across data-parallel replicas) and the silent-data-corruption literature: Dixit et
  al., "Silent Data Corruptions at Scale" (Meta, 2021) and Hochschild et al., "Cores that
  don't count" (HotOS 2021) show faulty units compute wrong answers *silently*, so only a
  comparison against a redundant copy or a known answer reveals them
  (/work/shared/background/003_*: health checks against "loss spikes").
- The straggler score is relative to the gang's median, as in NVIDIA
  resiliency-ext's straggler detection (per-rank performance relative to the median,
  default report threshold 0.75, i.e. a rank is flagged only when under 75% of the
  median's speed, which misses a 20% slowdown); here the relative excess time is
  smoothed by a window median so a single noisy sample cannot flag a rank.
- The spike detector is a median / MAD robust z-score (Hampel filter; Rousseeuw &
  Croux 1993): the 1.4826 factor makes the MAD a consistent estimator of the standard
  deviation under normality.
- The hang deadline ``max(k x median step time, floor)`` is the issue's rule; the public
  failure it avoids is pytorch/pytorch#111646 (a hung rank holds the gang for the 30-minute
  collective timeout).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Collection, Hashable, Mapping, Sequence

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Disagreement:
    """The outcome of comparing one replica group's fingerprints.

    Attributes:
        group: the ranks that must hold identical bytes, sorted.
        suspects: ranks that disagree with the majority (or, with no majority, every rank:
            the known-answer test must decide).
        decided: whether a strict majority exists.
        values: fingerprint per rank of the group.
    """

    group: tuple[int, ...]
    suspects: tuple[int, ...]
    decided: bool
    values: dict[int, Hashable]


def compare_fingerprints(groups: Sequence[Sequence[int]], prints: Mapping[int, Hashable]) -> list[Disagreement]:
    """Compare fingerprints within each replica group.

    Args:
        groups: lists of global ranks that must hold identical parameter bytes (e.g. the DDP
            ranks; the HSDP replicate dimension; one TP shard across data-parallel replicas).
        prints: fingerprint (any hashable, e.g. an int) per global rank; every rank of every group must be present.

    Returns:
        One :class:`Disagreement` per group whose fingerprints are not all equal (``[]``
        when all agree). With a strict majority value, the suspects are the ranks that
        differ from it; without one (e.g. two replicas that differ) every rank is a suspect
        and ``decided`` is ``False``.

    Raises:
        KeyError: a rank of a group has no fingerprint.
    """
    out = []
    for group in groups:
        ranks = tuple(sorted(group))
        values = {r: prints[r] for r in ranks}
        counts = Counter(values.values())
        if len(counts) <= 1:
            continue
        (top, n), *rest = counts.most_common()
        decided = n * 2 > len(ranks)
        suspects = tuple(r for r in ranks if values[r] != top) if decided else ranks
        out.append(Disagreement(ranks, suspects, decided, values))
    return out


def attribute_mismatches(found: Sequence[Disagreement], rehash_differs: Collection[int], known_answer_differs: Collection[int]) -> tuple[list[int], list[int]]:
    """Which ranks a set of fingerprint disagreements names (docs/health.md, "Two replicas").

    A group with a strict majority names the ranks that differ from it. A group without one
    (two replicas, or an even split) says only that its copies differ; its ranks are named only
    when a re-execution singles them out: their second hash of the same bytes differed from the
    first (``rehash_differs``: computing wrong now) or their known-answer test is wrong
    (``known_answer_differs``: consistently wrong). A group that neither singles out is unattributed:
    naming every rank of it would name the healthy copy's node as well.

    Args:
        found: the disagreements (:func:`compare_fingerprints`).
        rehash_differs, known_answer_differs: global ranks whose re-hash / known-answer test differs.

    Returns:
        ``(suspects, unattributed)``: the named ranks, and the ranks of groups nothing singled out; both sorted.
    """
    suspects: set[int] = set()
    unattributed: set[int] = set()
    for d in found:
        named = set(d.suspects) if d.decided else {r for r in d.group if r in rehash_differs or r in known_answer_differs}
        if named:
            suspects |= named
        else:
            unattributed |= set(d.group)
    return sorted(suspects), sorted(unattributed - suspects)


def odd_ones_out(values: Mapping[int, Hashable]) -> tuple[int, ...]:
    """Ranks whose value differs from the strict-majority value of ``values`` (known-answer test).

    Returns:
        The dissenting ranks, sorted; ``()`` if all agree; every rank if there is no strict majority.
    """
    found = compare_fingerprints([list(values)], values)
    return found[0].suspects if found else ()


def relative_excess(times: Sequence[float]) -> list[float]:
    """Per-rank relative excess over the median of the *other* ranks: ``t_r / median(t_others) - 1``.

    Leaving the rank out keeps a slow rank from pulling the reference towards itself (with
    two ranks the plain median is the mean and would halve the excess). 0 for a rank whose
    reference is not positive, and for a single rank.

    Args:
        times: one compute time per rank (seconds, any unit), indexed by rank.
    """
    n = len(times)
    if n < 2:
        return [0.0 for _ in times]
    order = sorted(range(n), key=lambda r: times[r])
    s = [times[r] for r in order]
    m = n - 1  # the others

    def reduced(i: int, p: int) -> float:  # i-th smallest of the others when s[p] is left out
        return s[i] if i < p else s[i + 1]

    out = [0.0] * n
    for p, r in enumerate(order):
        ref = reduced(m // 2, p) if m % 2 else 0.5 * (reduced(m // 2 - 1, p) + reduced(m // 2, p))
        out[r] = times[r] / ref - 1.0 if ref > 0 else 0.0
    return out  # O(n log n): a 16k-rank gang costs milliseconds


@dataclass
class StragglerDetector:
    """Flags ranks that are consistently slower than the gang's median.

    Each :meth:`add` takes one sample of per-rank compute times (excluding time spent
    waiting in collectives, which a straggler imposes on everyone else). A rank's score is
    the median of its last ``window`` relative excesses (:func:`relative_excess`); it is
    flagged while the score exceeds ``threshold``. With the pod contract's defaults (window 8,
    threshold 0.12) a rank 20% slower than the others is flagged at the fifth slow sample,
    while jitter in fewer than half of the window's samples is not enough
    (docs/bench-health.md has the measured latency and false-positive rate).

    Attributes:
        world_size: number of ranks.
        threshold: relative excess above which a rank counts as slow (0.1 = 10% slower than the median).
        window: samples per window.
    """

    world_size: int
    threshold: float = 0.1
    window: int = 5
    history: list[deque] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.history = [deque(maxlen=self.window) for _ in range(self.world_size)]

    def add(self, times: Sequence[float]) -> list[float]:
        """Record one sample; returns each rank's current score (window median of the relative excess).

        Raises:
            ValueError: ``times`` does not have one entry per rank.
        """
        if len(times) != self.world_size:
            raise ValueError(f"need {self.world_size} compute times, got {len(times)}")
        for hist, x in zip(self.history, relative_excess(times)):
            hist.append(x)
        return self.scores()

    def scores(self) -> list[float]:
        """Each rank's window-median relative excess (0 before any sample)."""
        return [statistics.median(h) if h else 0.0 for h in self.history]

    def flagged(self) -> list[int]:
        """Ranks whose score exceeds the threshold, once a full window has been seen."""
        return [r for r, (h, s) in enumerate(zip(self.history, self.scores())) if len(h) == self.window and s > self.threshold]

    def throughput_cost(self, rank: int) -> float:
        """Share of the gang's throughput the rank costs: ``score / (1 + score)`` (everyone waits for it)."""
        s = max(0.0, self.scores()[rank])
        return s / (1.0 + s)


@dataclass
class SpikeDetector:
    """Robust running statistic of one series (loss or gradient norm): is the new value a spike?

    Keeps the last ``window`` finite, accepted values; a value is a spike when its robust
    z-score ``(x - median) / max(1.4826 x MAD, rel_floor x |median|)`` exceeds
    ``threshold`` (only upward: a loss that drops is not an anomaly) *and* it exceeds
    ``ratio`` times the median (natural gradient-norm spikes are heavy-tailed: 8x the median
    and a z-score near 60 in a clean run of the tiny preset, docs/bench-health.md; Megatron-LM's
    rerun state machine likewise calls a loss "unexpectedly large" only at 10x), once ``min_samples``
    values are known; before that (warming up) only a value over ``warmup_ratio`` times the
    median magnitude counts (e.g. a loss of 1e30 from a flipped exponent bit at step 3).
    Values found anomalous are *not* added, so a run of bad values cannot drag the statistic along.

    Attributes:
        threshold: robust z-score of a spike.
        window: values kept.
        min_samples: values needed before any spike is called.
        rel_floor: floor of the scale as a share of the median (keeps a flat series from
            calling every wiggle a spike).
    """

    threshold: float = 12.0
    window: int = 100
    min_samples: int = 20
    ratio: float = 10.0
    rel_floor: float = 0.05
    warmup_ratio: float = 100.0
    values: deque = field(default_factory=deque)
    _stats: tuple[float, float] | None = field(default=None, init=False, repr=False, compare=False)
    """(median, MAD) of ``values``, kept until the next :meth:`accept` (the check reads them several times a step)."""

    def _median_mad(self) -> tuple[float, float]:
        if self._stats is None:
            med = statistics.median(self.values)
            self._stats = (med, statistics.median(abs(v - med) for v in self.values))
        return self._stats

    def score(self, x: float) -> float:
        """Robust z-score of ``x`` against the kept values (``inf`` for a non-finite ``x``, 0 while warming up)."""
        if not math.isfinite(x):
            return math.inf
        if len(self.values) < self.min_samples:
            ref = abs(self._median_mad()[0]) if self.values else 0.0
            return math.inf if ref > 0 and abs(x) > self.warmup_ratio * ref else 0.0
        med, mad = self._median_mad()
        scale = max(MAD_TO_SIGMA * mad, self.rel_floor * abs(med), 1e-12)
        return (x - med) / scale

    def is_anomaly(self, x: float) -> bool:
        """Whether ``x`` is non-finite or a spike (does not record it)."""
        z = self.score(x)
        if z == math.inf or len(self.values) < self.min_samples:
            return z > self.threshold
        return z > self.threshold and x > self.ratio * abs(self._median_mad()[0])

    def accept(self, x: float) -> None:
        """Record a value judged normal."""
        self.values.append(x)
        while len(self.values) > self.window:
            self.values.popleft()
        self._stats = None


def hang_deadline(step_times: Sequence[float], factor: float, floor: float) -> float:
    """Seconds without progress after which a rank is hung: ``max(factor x median(step_times), floor)``.

    Args:
        step_times: recent step durations in seconds (``[]`` before the first step: the floor alone).
        factor: ``k`` (default 3).
        floor: lower bound in seconds.
    """
    if not step_times:
        return floor
    return max(factor * statistics.median(step_times), floor)


def phase_deadline(step_times: Sequence[float], factor: float, floor: float, warmup: float, *, warming: bool, slow_phase: bool) -> float:
    """Seconds a rank may stay in one phase before it is hung (docs/health.md, "Hang deadlines").

    After warm-up: :func:`hang_deadline` (``max(factor x median step, floor)``). While the gang warms up
    (its first steps: compile, lazy communicator set-up, allocator growth) and in a phase that may
    legitimately outlast a step (a checkpoint save): at least ``warmup``.

    Args:
        step_times: recent step durations in seconds; factor, floor: as :func:`hang_deadline`.
        warmup: the warm-up allowance in seconds (``hang_warmup_s``).
        warming: the gang has not finished its first warm-up steps yet.
        slow_phase: the rank is in a phase that may outlast a step.
    """
    base = hang_deadline(step_times, factor, floor)
    return max(base, warmup) if warming or slow_phase else base


def replica_groups(coordinates: Sequence[Mapping[str, int]]) -> list[list[int]]:
    """Groups of ranks that must hold byte-identical parameters: same coordinates but ``dp_replicate``.

    Args:
        coordinates: per global rank, its mesh coordinates ``{"pp", "dp_replicate", "dp_shard", "cp", "tp"}``
            (:func:`railtrain.crds.parallel.coordinates`). Ranks of one context-parallel ring stay in separate
            groups: under DDP they do hold the same parameters, but under FSDP2 they hold different shards,
            and the coordinates alone do not say which.

    Returns:
        Groups of two or more ranks (DDP ranks; HSDP's replicate dimension; the same TP shard
        and pipeline stage across data-parallel replicas), each sorted, in order of their first rank.
        Layouts with no replication (pure FSDP, pure TP/PP) have none: only the known-answer test covers them.
    """
    groups: dict[tuple, list[int]] = {}
    for rank, c in enumerate(coordinates):
        key = tuple(sorted((k, v) for k, v in c.items() if k != "dp_replicate"))
        groups.setdefault(key, []).append(rank)
    return [g for g in groups.values() if len(g) > 1]
