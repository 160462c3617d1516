"""The goodput breakdown (crds/goodput.py): table tests over recorded timestamps; the parts always add up to the wall time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from railtrain.crds.goodput import Attempt, breakdown, restart_cause, total

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


CASES = {
    "never admitted: all queued": ([], 50, dict(queued=50), 0.0),
    "admitted, no step yet": ([Attempt(at(10))], 50, dict(queued=10, starting=40), 0.0),
    "one running attempt": ([Attempt(at(10), 1, at(30), 40, at(120))], 130, dict(queued=10, starting=20, training=100), 100 / 130),
    "checkpoint saves block the loop": ([Attempt(at(10), 1, at(30), 40, at(120), blocked_seconds=5)], 130, dict(queued=10, starting=20, training=95, checkpoint=5), 95 / 130),
    "node lost, resumed 10 steps back": (
        [Attempt(at(10), 1, at(30), 101, at(130), ended=at(140), end_reason="NodeLost"), Attempt(at(150), 92, at(170), 150, at(260), resumed_from=91)],
        270, dict(queued=10, starting=20, training=190, restart_node_lost=40, recompute=10), 190 / 270,
    ),
    "job restart then quarantine, no step lost": (
        [Attempt(at(0), 1, at(10), 11, at(20), ended=at(25), end_reason="Restarting", resumed_from=0),
         Attempt(at(30), 12, at(40), 21, at(50), ended=at(52), end_reason="NodeQuarantined", resumed_from=11),
         Attempt(at(60), 22, at(70), resumed_from=21)],
        100, dict(starting=10, training=10 + 10 + 30, restart_job=20, restart_quarantine=20), 50 / 100,
    ),
    "suspended then resumed: the wait is queued": (
        [Attempt(at(0), 1, at(10), 5, at(20), ended=at(21), end_reason="Suspended"), Attempt(at(100), 6, at(110), resumed_from=5)],
        120, dict(starting=10, training=20, queued=90), 20 / 120,
    ),
    "first gang timed out and re-queued: still starting": (
        [Attempt(at(5), ended=at(65), end_reason="GangTimeout"), Attempt(at(80), 1, at(90))],
        100, dict(queued=5, starting=85, training=10), 0.1,
    ),
    "elastic grow, resumed from the last step": (
        [Attempt(at(0), 1, at(10), 11, at(30), ended=at(31), end_reason="ElasticGrow"), Attempt(at(35), 12, at(45), resumed_from=11)],
        55, dict(starting=10, training=30, restart_elastic=15), 30 / 55,
    ),
}  # fmt: skip


@pytest.mark.parametrize("attempts,now,parts,ratio", CASES.values(), ids=CASES.keys())
def test_breakdown(attempts, now, parts, ratio):
    g = breakdown(T0, attempts, at(now))
    got = {"queued": g.queued_seconds, "starting": g.starting_seconds, "training": g.training_seconds}
    got = {k: v for k, v in got.items() if v} | {k.removeprefix("lost_"): v for k, v in g.lost_seconds.items()}
    assert got == pytest.approx(parts)
    assert g.wall_seconds == now and total(g) == pytest.approx(now)
    assert g.ratio == pytest.approx(ratio, abs=1e-4)
    assert g.last_update_time == at(now)


def test_a_running_attempt_without_a_new_step_is_not_training_past_its_stall_bound():
    """Issue 25 item 6: a gang hung for 14 minutes after step 40 (its last step seen at 120 s, 1 s steps)."""
    hung = breakdown(T0, [Attempt(at(10), 1, at(30), 40, at(120))], at(120 + 14 * 60))
    assert hung.training_seconds == 90 and hung.lost_seconds == {"no_progress": 14 * 60} and total(hung) == pytest.approx(120 + 14 * 60)
    slow = Attempt(at(10), 1, at(30), 4, at(120))  # 30 s steps: 89 s without a new step is within 3 steps, still training
    assert breakdown(T0, [slow], at(209)).training_seconds == 179


def test_a_timestamp_out_of_order_makes_its_window_zero_not_negative():
    g = breakdown(T0, [Attempt(at(10), 1, at(5))], at(20))  # first step "before" the release: skewed clocks
    assert min([g.queued_seconds, g.starting_seconds, g.training_seconds]) >= 0 and total(g) == pytest.approx(20)


@pytest.mark.parametrize("reason,cause", [("NodeLost", "node_lost"), ("RankVanished", "node_lost"), ("NodeQuarantined", "quarantine"),
                                          ("ElasticGrow", "elastic"), ("Restarting", "job"), (None, "job")])  # fmt: skip
def test_restart_cause(reason, cause):
    assert restart_cause(reason) == cause


def test_the_status_models_round_trip_in_camel_case():
    g = breakdown(T0, [Attempt(at(10), 1, at(30), 40, at(120), blocked_seconds=5)], at(130))
    api = g.to_api()
    assert set(api) == {"wallSeconds", "queuedSeconds", "startingSeconds", "trainingSeconds", "lostSeconds", "ratio", "lastUpdateTime", "attempts"}
    assert type(g).model_validate(api) == g


def test_replica_groups_absences_are_degraded_training_in_seconds_of_the_whole_job():
    """Issue 31, goodput: while one of R groups is absent the job trains at (R-1)/R; the absence is degraded training, not lost time."""
    from railtrain.crds.goodput import degraded_seconds, with_degraded

    # three groups: group 1 was absent 12 s and came back, group 2 has been absent since 100 s; at 130 s
    absences = [(0.0, None), (12.0, None), (0.0, at(100))]
    assert degraded_seconds(absences, at(130)) == pytest.approx((12 + 30) / 3)
    assert degraded_seconds([], at(130)) == 0 and degraded_seconds([(0.0, at(140))], at(130)) == 0  # a start after now counts 0
    g = with_degraded(breakdown(T0, [Attempt(at(10), 1, at(30), 40, at(120))], at(130)), degraded_seconds(absences, at(130)))
    assert g.degraded_seconds == 14 and g.training_seconds == 100 and g.lost_seconds == {} and total(g) == pytest.approx(130)  # counted in training
    assert with_degraded(g, 500).degraded_seconds == 100  # never more than the training time
    assert "degradedSeconds" not in breakdown(T0, [], at(5)).to_api()  # a job without replica groups does not show it


def test_a_gang_that_ends_before_its_first_step_keeps_the_earlier_restarts_time_until_it_ended():
    """A gang restart (job), then the new gang loses a node to a hot spare before its first step: the time from the
    old gang's last step to the new gang's end is the gang restart's, only the rest the spare's (before, all of it
    went to the spare)."""
    attempts = [
        Attempt(released=at(0), first_step=1, first_step_at=at(10), last_step=100, last_step_at=at(100), ended=at(110), end_reason="Restarting"),
        Attempt(released=at(110), ended=at(140), end_reason="Restarting", in_place="spare"),
        Attempt(released=at(140), first_step=91, first_step_at=at(150), last_step=100, last_step_at=at(160), resumed_from=90),
    ]
    g = breakdown(at(0), attempts, at(160))
    assert g.lost_seconds["restart_job"] == pytest.approx(40.0) and g.lost_seconds["restart_in_place_spare"] == pytest.approx(10.0)
