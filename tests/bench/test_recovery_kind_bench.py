"""``bench/recovery_kind.py`` without a cluster (its scene needs kind and takes minutes a pair: the measurement is run
by hand, docs/bench-recovery.md): the scene file is collected with one pair by default and is not part of the
suite's own collection, and the bench reads the scene's ``PAIR`` lines into the table and medians it reports."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.bench.test_bench_smoke import REPO

sys.path.insert(0, str(REPO / "bench"))

import recovery_kind  # noqa: E402


def pair(n, in_place, gang, at=45):
    return {"pair": n, "in-place": {"path": "in-place", "seconds": in_place, "killed_at_step": at, "resumed_step": 40},
            "gang": {"path": "gang", "seconds": gang, "killed_at_step": at, "resumed_step": 40}, "load_after_in-place": 3.0, "load_after_gang": 4.0}  # fmt: skip


def test_the_bench_reads_the_scenes_pairs_and_reports_medians_of_times_and_ratios():
    output = "\n".join(["noise", "PAIR " + json.dumps(pair(0, 10.0, 40.0)), "PAIR {broken", ".PAIR " + json.dumps(pair(1, 20.0, 40.0)),
                        "PAIR " + json.dumps(pair(2, 12.0, 30.0, at=50)), "PAIR " + json.dumps({"pair": 3, "gang": {}})])  # fmt: skip
    pairs = recovery_kind.pairs_in(output)
    assert [p["pair"] for p in pairs] == [0, 1, 2]  # a broken line and an incomplete pair are left out
    s = recovery_kind.summary(pairs)
    assert (s["pairs"], s["in-place_p50_s"], s["gang_p50_s"], s["in-place_over_gang_p50"]) == (3, 12.0, 40.0, 0.4)
    assert s["steps_lost_p50"] == {"in-place": 5, "gang": 5}
    text = recovery_kind.table(pairs).plain()
    assert "| median " in text and "0.40x" in text and "3.0 / 4.0" in text


def test_with_a_cold_arm_the_bench_reports_the_warm_launchers_ratio():
    arms = ("in-place", "in-place-cold", "gang")
    rows = [pair(0, 6.0, 20.0) | {"in-place-cold": {"seconds": 8.0, "killed_at_step": 45, "resumed_step": 40}},
            pair(1, 5.0, 16.0) | {"in-place-cold": {"seconds": 10.0, "killed_at_step": 45, "resumed_step": 41}}]  # fmt: skip
    pairs = recovery_kind.pairs_in("\n".join("PAIR " + json.dumps(p) for p in rows), arms)
    assert len(pairs) == 2 and recovery_kind.pairs_in("PAIR " + json.dumps(pair(0, 1.0, 2.0)), arms) == []  # no cold sample: incomplete
    s = recovery_kind.summary(pairs, arms)
    assert (s["in-place_p50_s"], s["in-place-cold_p50_s"], s["warm_over_cold_p50"]) == (5.5, 9.0, 0.625)
    assert s["in-place-cold_over_gang_p50"] == (8.0 / 20.0 + 10.0 / 16.0) / 2
    assert "warm / cold" in recovery_kind.table(pairs, arms).plain()


def test_the_scene_is_collected_with_one_pair_only_when_named():
    named = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", recovery_kind.SCENE], cwd=REPO,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "e2e/scene_inplace_pairs.py::test_pair[0]" in named.stdout and "test_pair[1]" not in named.stdout, named.stdout + named.stderr
    suite = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "e2e"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "scene_inplace_pairs" not in suite.stdout, suite.stdout[-2000:]


def test_a_hang_pair_reports_the_detection_and_the_restart_apart_and_a_data_pair_no_steps_lost():
    def hang(n, seconds, detect):
        return {"path": "x", "seconds": seconds, "detect_seconds": detect, "verdict_to_step_seconds": seconds - detect, "fault_step": 40, "resumed_step": 30}

    rows = [{"pair": 0, "in-place": hang(0, 14.0, 10.5), "gang": hang(0, 28.0, 10.5)}, {"pair": 1, "in-place": hang(1, 16.0, 11.0), "gang": hang(1, 30.0, 11.0)}]
    s = recovery_kind.summary(recovery_kind.pairs_in("\n".join("PAIR " + json.dumps(p) for p in rows)))
    assert (s["in-place_p50_s"], s["in-place_detect_seconds_p50"], s["in-place_verdict_to_step_seconds_p50"]) == (15.0, 10.75, 4.25)
    assert s["steps_lost_p50"] == {"in-place": 10, "gang": 10}
    assert "hung rank" in recovery_kind.table(recovery_kind.pairs_in("PAIR " + json.dumps(rows[0])), fault="hang").plain()
    data = {"pair": 0, "in-place": {"seconds": 0.4, "median_step_seconds": 0.3, "fault_step": 40, "restarts": 0}, "gang": {"seconds": 0.5, "fault_step": 40, "restarts": 0}}
    s = recovery_kind.summary(recovery_kind.pairs_in("PAIR " + json.dumps(data)))
    assert s["steps_lost_p50"] == {} and s["gang_p50_s"] == 0.5  # nothing restarted: no step to lose


def test_a_fault_outside_the_list_is_refused_by_name(capsys):
    import pytest

    with pytest.raises(SystemExit) as err:
        recovery_kind.main(["--fault", "fire"])
    assert err.value.code == 2 and "--fault" in capsys.readouterr().err


def test_a_groups_pair_reports_the_rejoin_against_the_gang_and_the_survivors_stall(capsys):
    """Issue 31's arm: the job as two replica groups, the killed rank's group replaced alone; its seconds are the time
    back at full strength, and the survivor's stall and steps lost get their own columns."""
    arms = ("groups", "gang")
    rows = [{"pair": 0, "groups": {"seconds": 14.0, "stall_seconds": 1.2, "survivor_steps_lost": 0, "killed_at_step": 41, "resumed_step": 41},
             "gang": {"seconds": 35.0, "killed_at_step": 41, "resumed_step": 40}},
            {"pair": 1, "groups": {"seconds": 18.0, "stall_seconds": 1.6, "survivor_steps_lost": 0, "killed_at_step": 42, "resumed_step": 42},
             "gang": {"seconds": 45.0, "killed_at_step": 42, "resumed_step": 40}}]  # fmt: skip
    pairs = recovery_kind.pairs_in("\n".join("PAIR " + json.dumps(p) for p in rows), arms)
    s = recovery_kind.summary(pairs, arms)
    assert (s["groups_p50_s"], s["groups_stall_seconds_p50"], s["groups_survivor_steps_lost_p50"]) == (16.0, 1.4, 0)
    assert s["steps_lost_p50"] == {"groups": 0, "gang": 1.5} and s["groups_over_gang_p50"] == (14 / 35 + 18 / 45) / 2
    text = recovery_kind.table(pairs, arms).plain()
    assert "groups survivor stall (s)" in text and "groups / gang" in text
    import pytest

    with pytest.raises(SystemExit) as err:
        recovery_kind.main(["--arms", "groups,gang", "--fault", "hang"])
    assert err.value.code == 2 and "--fault kill" in capsys.readouterr().err
