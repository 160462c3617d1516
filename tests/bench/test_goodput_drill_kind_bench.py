"""``bench/goodput_drill_kind.py`` without a cluster (its scene runs 30 minutes on kind: the measurement is run by
hand, docs/bench-recovery.md): the scene file is not part of the suite's collection, and the bench reads the scene's
``DRILL`` record into the goodput breakdown it reports, refusing bad flags by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench.test_bench_smoke import REPO

sys.path.insert(0, str(REPO / "bench"))

import goodput_drill_kind  # noqa: E402

RECORD = {
    "seconds": 600, "every": 200, "faults": [{"kind": "kill", "at_s": 200}, {"kind": "delete", "at_s": 400}],
    "goodput": {"wallSeconds": 700.0, "queuedSeconds": 1.0, "startingSeconds": 20.0, "trainingSeconds": 650.0,
                "lostSeconds": {"restart_in_place_retryable": 5.0, "restart_in_place_spare": 9.0}, "ratio": 0.9286},
    "restarts": 0, "inPlaceRestarts": 2, "phase": "Running",
}  # fmt: skip


def test_the_bench_reads_the_scenes_record_and_reports_the_breakdown(tmp_path, capsys):
    output = "noise\n.DRILL {broken\n.DRILL " + json.dumps(RECORD) + "\n"
    record = goodput_drill_kind.drill_in(output)
    assert record == RECORD
    rows = {what: (seconds, share) for what, seconds, share in goodput_drill_kind.breakdown(record)}
    assert rows["training"] == (650.0, 650.0 / 700.0) and rows["lost: restart_in_place_spare"][0] == 9.0
    text = goodput_drill_kind.table(record).plain()
    assert "92.9%" in text and "1 kill, 1 delete" in text and "in place 2, gang 0" in text
    saved = tmp_path / "out.txt"
    saved.write_text(output)
    assert goodput_drill_kind.main(["--parse", str(saved), "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["drill"]["inPlaceRestarts"] == 2
    assert goodput_drill_kind.drill_in("no record here") is None


@pytest.mark.parametrize("flags,named", [(["--kinds", "fire"], "--kinds"), (["--every", "0"], "--every"), (["--seconds", "10", "--every", "20"], "--every")])
def test_bad_flags_are_refused_by_name(flags, named, capsys):
    with pytest.raises(SystemExit) as err:
        goodput_drill_kind.main(flags)
    assert err.value.code == 2 and named in capsys.readouterr().err


def test_the_scene_is_not_collected_by_the_suite():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "e2e"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "scene_goodput_drill" not in out.stdout, out.stdout[-2000:]
