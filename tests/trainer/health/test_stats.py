"""The health checks' pure statistics, table-driven."""

import math
import random

import pytest

from railtrain.crds.parallel import Degrees, coordinates
from railtrain.trainer.health import stats


@pytest.mark.parametrize(
    ("groups", "prints", "expected"),
    [
        ([[0, 1, 2]], {0: 7, 1: 7, 2: 7}, []),
        ([[0, 1, 2]], {0: 7, 1: 9, 2: 7}, [((0, 1, 2), (1,), True)]),
        ([[0, 1]], {0: 7, 1: 9}, [((0, 1), (0, 1), False)]),  # two replicas: no majority, the known-answer test decides
        ([[0, 2], [1, 3]], {0: 1, 1: 5, 2: 1, 3: 6}, [((1, 3), (1, 3), False)]),
        ([[0, 1, 2, 3]], {0: 1, 1: 1, 2: 2, 3: 2}, [((0, 1, 2, 3), (0, 1, 2, 3), False)]),
        ([[3, 0, 1, 2, 4]], {0: 1, 1: 1, 2: 2, 3: 1, 4: 3}, [((0, 1, 2, 3, 4), (2, 4), True)]),
    ],
)
def test_compare_fingerprints(groups, prints, expected):
    found = stats.compare_fingerprints(groups, prints)
    assert [(d.group, d.suspects, d.decided) for d in found] == expected


@pytest.mark.parametrize(
    ("degrees", "expected"),
    [
        (Degrees(data=4, fsdp=1, tensor=1, pipeline=1), [[0, 1, 2, 3]]),  # DDP
        (Degrees(data=2, fsdp=2, tensor=1, pipeline=1), [[0, 2], [1, 3]]),  # HSDP: the replicate dimension
        (Degrees(data=2, fsdp=1, tensor=2, pipeline=1), [[0, 2], [1, 3]]),  # same TP shard across replicas
        (Degrees(data=2, fsdp=1, tensor=1, pipeline=2), [[0, 1], [2, 3]]),  # same stage across replicas
        (Degrees(data=1, fsdp=4, tensor=1, pipeline=1), []),  # pure FSDP: nothing is replicated
        (Degrees(data=1, fsdp=1, tensor=2, pipeline=2), []),
        (Degrees(data=2, fsdp=1, tensor=1, pipeline=1, context=2), [[0, 2], [1, 3]]),  # same chunks across replicas; a ring's ranks apart
    ],
)
def test_replica_groups(degrees, expected):
    world = degrees.data * degrees.fsdp * degrees.tensor * degrees.pipeline * degrees.context
    assert stats.replica_groups([coordinates(r, degrees) for r in range(world)]) == expected


def test_odd_ones_out():
    assert stats.odd_ones_out({0: "a", 1: "a", 2: "b"}) == (2,)
    assert stats.odd_ones_out({0: "a", 1: "a"}) == ()


def _clean(rng, world, base=0.05, jitter=0.03):
    return [base * (1 + rng.gauss(0, jitter)) for _ in range(world)]


@pytest.mark.parametrize(("world", "slow_rank", "factor"), [(2, 1, 1.2), (4, 3, 1.2), (8, 0, 1.2), (8, 5, 1.5)])
def test_straggler_flagged_within_ten_steps(world, slow_rank, factor):
    rng = random.Random(world)
    det = stats.StragglerDetector(world)
    for _ in range(50):  # a clean prefix
        det.add(_clean(rng, world))
        assert det.flagged() == []
    for steps_after_onset in range(1, 11):
        times = _clean(rng, world)
        times[slow_rank] *= factor
        det.add(times)
        if det.flagged():
            break
    assert det.flagged() == [slow_rank] and steps_after_onset <= 10
    assert det.throughput_cost(slow_rank) == pytest.approx(det.scores()[slow_rank] / (1 + det.scores()[slow_rank]))


@pytest.mark.parametrize(("world", "jitter"), [(2, 0.03), (4, 0.05), (8, 0.05)])
def test_straggler_false_positive_windows_on_clean_runs_at_most_one_percent(world, jitter):
    rng = random.Random(1000 + world)
    det = stats.StragglerDetector(world)
    flagged = sum(bool(det.add(_clean(rng, world, jitter=jitter)) and det.flagged()) for _ in range(3000))
    assert flagged / 3000 <= 0.01


def test_one_slow_sample_is_not_a_straggler():
    det = stats.StragglerDetector(4)
    for i in range(20):
        det.add([1.0, 1.0, 1.0, 3.0 if i == 10 else 1.0])
        assert det.flagged() == []
    with pytest.raises(ValueError, match="need 4"):
        det.add([1.0])


@pytest.mark.parametrize(
    ("series", "value", "anomaly"),
    [
        ([4.0 - 0.01 * i for i in range(50)], 3.5, False),  # the loss keeps falling: fine
        ([4.0 - 0.01 * i for i in range(50)], 3.6, False),  # a little above the trend
        ([4.0 - 0.01 * i for i in range(50)], 40.0, True),  # a spike
        ([4.0 - 0.01 * i for i in range(50)], math.nan, True),
        ([4.0 - 0.01 * i for i in range(50)], math.inf, True),
        ([4.0] * 5, 300.0, False),  # warming up: too few values to call a spike
        ([4.0] * 5, 1e30, True),  # but a flipped exponent bit is one
        ([4.0] * 5, math.nan, True),  # but a NaN is always an anomaly
        ([1.0] * 50, 1.1, False),  # a flat series: the relative floor keeps wiggles from counting
        ([0.75 + 0.05 * (i % 3) for i in range(100)], 6.3, False),  # a natural gradient-norm spike: z ~ 60 but only 8x the median
        ([0.75 + 0.05 * (i % 3) for i in range(100)], 9.0, True),
    ],
)
def test_spike_detector(series, value, anomaly):
    det = stats.SpikeDetector()
    for x in series:
        det.accept(x)
    assert det.is_anomaly(value) is anomaly


def test_spike_detector_keeps_a_window():
    det = stats.SpikeDetector(window=10, min_samples=3)
    for x in range(100):
        det.accept(float(x))
    assert list(det.values) == [float(x) for x in range(90, 100)]


@pytest.mark.parametrize(
    ("times", "factor", "floor", "expected"),
    [([], 3.0, 60.0, 60.0), ([1.0, 2.0, 100.0], 3.0, 1.0, 6.0), ([0.1] * 5, 3.0, 60.0, 60.0), ([30.0], 3.0, 60.0, 90.0)],
)
def test_hang_deadline(times, factor, floor, expected):
    assert stats.hang_deadline(times, factor, floor) == expected


@pytest.mark.parametrize("n", [2, 3, 4, 7, 10])
def test_relative_excess_is_against_the_median_of_the_others(n):
    import statistics

    rng = random.Random(n)
    times = [rng.uniform(0.5, 2.0) for _ in range(n)]
    expected = [t / statistics.median(times[:r] + times[r + 1 :]) - 1 for r, t in enumerate(times)]
    assert stats.relative_excess(times) == pytest.approx(expected)
    assert stats.relative_excess([1.0]) == [0.0]


def test_two_replicas_name_only_the_rank_a_re_execution_singles_out():
    """Issue 25 item 5: no majority, so only a re-hash or known-answer test that differs names a rank; else nobody."""
    two = stats.compare_fingerprints([[0, 1]], {0: 5, 1: 6})
    assert stats.attribute_mismatches(two, set(), set()) == ([], [0, 1])
    assert stats.attribute_mismatches(two, set(), {1}) == ([1], [])
    assert stats.attribute_mismatches(two, {0}, set()) == ([0], [])
    three = stats.compare_fingerprints([[0, 1, 2], [3, 4]], {0: 5, 1: 6, 2: 5, 3: 7, 4: 8})
    assert stats.attribute_mismatches(three, set(), set()) == ([1], [3, 4])  # the majority decides its group only


def test_phase_deadline_gives_warm_up_and_slow_phases_the_allowance():
    assert stats.phase_deadline([2.0, 2.0, 2.0], 3.0, 1.0, 600.0, warming=False, slow_phase=False) == 6.0
    assert stats.phase_deadline([0.1], 3.0, 1.0, 600.0, warming=True, slow_phase=False) == 600.0
    assert stats.phase_deadline([0.1, 0.1], 3.0, 1.0, 600.0, warming=False, slow_phase=True) == 600.0
    assert stats.phase_deadline([300.0, 300.0], 3.0, 1.0, 600.0, warming=True, slow_phase=False) == 900.0  # never below the step deadline
