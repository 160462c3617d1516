"""``bench/spare_takeover.py`` at its smallest size: a 2-node gang with one spare on 4 KWOK nodes, one takeover and
one gang restart. Asserts the table and the record's shape and what each path did (the takeover recreated no other
pod and no gang; the gang restart made one); never the speed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench.test_bench_smoke import REPO


@pytest.mark.cluster
def test_spare_takeover_smallest_size(tmp_path):
    out = tmp_path / "spare.json"
    proc = subprocess.run([sys.executable, "bench/spare_takeover.py", "--gang", "2", "--free", "2", "--repeats", "1", "--timeout", "180", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| path " in proc.stdout and "| operator's part s |" in proc.stdout, proc.stdout
    record = json.loads(out.read_text())
    assert record["benchmark"] == "spare_takeover" and record["machine_before"]["loadavg"] and "spare / gang" in record["table"]
    spare, gang = record["samples"]
    assert spare["path"] == "spare" and spare["other_pods_recreated"] == [] and spare["restarts"] == 0 and 0 < spare["reader_pass_s"] <= spare["taken_s"] <= spare["refilled_s"]
    assert gang["path"] == "gang" and gang["restarts"] == 1 and 0 < gang["all_running_s"] <= gang["with_spare_s"]
    assert record["summary"]["other_pods_recreated"] == 0 and record["summary"]["ratio_spare_over_gang"] > 0
