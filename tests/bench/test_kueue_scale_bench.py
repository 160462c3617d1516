"""``bench/vs_kueue.py`` and ``bench/scale.py`` at their smallest sizes, plus their pure helpers.

vs_kueue runs its Kueue half only when the Kueue binary is already cached
(``--kueue cached``; building it takes minutes and belongs to
``bench/install-kueue.sh``); its floor and railtrain half always runs, so the
script cannot rot either way.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.bench.test_bench_smoke import REPO, run_bench

sys.path.insert(0, str(REPO / "bench"))

import kueue_local  # noqa: E402
import scale  # noqa: E402
import vs_kueue  # noqa: E402


@pytest.mark.parametrize("script", ["vs_kueue", "scale"])
def test_help(script):
    proc = subprocess.run([sys.executable, f"bench/{script}.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_bad_size_is_one_sentence():
    proc = subprocess.run([sys.executable, "bench/scale.py", "--nodes", "0"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--nodes" in proc.stderr and "Traceback" not in proc.stderr


def test_smallest_feasible_domain_and_span():
    where = {f"n{i}": (f"r{i // 2}", f"b{i // 4}") for i in range(8)}  # racks of 2, blocks of 4
    assert vs_kueue.smallest_feasible(set(where), where, 2) == 0
    assert vs_kueue.smallest_feasible({"n0", "n2", "n3"}, where, 3) == 1
    assert vs_kueue.smallest_feasible({"n0", "n2", "n4"}, where, 3) == 2
    assert vs_kueue.spanned(["n0", "n1"], where) == 0
    assert vs_kueue.spanned(["n1", "n2"], where) == 1
    assert vs_kueue.spanned(["n3", "n4"], where) == 2


def test_pod_group_marks_every_pod():
    pods = kueue_local.pod_group([{"metadata": {"labels": {"a": "b"}}}, {"metadata": {}}], "g1")
    for pod in pods:
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "g1"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "2"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == "railtrain.dev/rack"


def test_job_mix_is_mostly_small_and_starts_with_the_largest():
    sizes = scale.job_sizes(500, 1250, seed=1)
    assert sizes[0] == 128 and max(sizes) == 128 and min(sizes) == 1
    assert sum(s <= 4 for s in sizes) > 250 and sum(s >= 64 for s in sizes) < 40
    assert max(scale.job_sizes(5, 8, seed=1)) == 8


def test_pass_times_group_by_queue_length():
    def snap(count, le01, total_sum, queue):
        return {"buckets": {0.1: le01, 1.0: count, float("inf"): count}, "sum": total_sum, "count": count, "queue": queue}

    samples = [snap(0, 0, 0.0, 0), snap(10, 10, 0.5, 5), snap(12, 10, 1.9, 50)]
    bands = {b["waiting"]: b for b in scale.pass_times(samples)}
    assert bands["<=10"]["passes"] == 10 and bands["<=10"]["p99_s"] == 0.1
    assert bands["11-100"]["passes"] == 2 and bands["11-100"]["p50_s"] == 1.0 and bands["11-100"]["mean_s"] == pytest.approx(0.7)
    assert bands[">100"]["passes"] == 0 and math.isnan(bands[">100"]["p50_s"])


def test_audit_counts_double_booking_and_jobs_that_fit():
    def pod(job, node, gpus=8, phase="Running", pin="nodeName"):
        spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
        if node and pin == "nodeName":
            spec["nodeName"] = node
        elif node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        return {"metadata": {"labels": {"railtrain.dev/job-name": job}}, "spec": spec, "status": {"phase": phase}}

    pods = [pod("a", "n0"), pod("b", "n0", pin="selector", phase="Pending"), pod("c", None, phase="Pending")]
    state = scale.audit(pods, ["n0", "n1", "n2"], {"a": 1, "b": 1, "c": 2, "d": 3})
    assert state["overbooked"] == {"n0": 16}
    assert state["running"] == ["a"] and state["free_nodes"] == 2
    assert state["fits_waiting"] == ["c"]  # d asks 3 nodes, 2 are free


@pytest.mark.cluster
def test_vs_kueue_smallest_size(tmp_path):
    record = run_bench("vs_kueue", tmp_path, "--sizes", "2", "--jobs", "2", "--pods-per-job", "2", "--repeats", "1", "--warmup", "0",
                       "--placement-gangs", "2,3", "--kueue", "cached", timeout=300)
    want = {"floor", "operator"} | ({"kueue", "via-kueue"} if kueue_local.cached_root() else set())
    assert {row["mode"] for row in record["summary"]} == want
    assert [row["workload"] for row in record["summary"] if row["mode"] == "via-kueue"] == (["2"] if "kueue" in want else [])  # whole-node pods only
    assert (record["kueue"]["skipped"] == "") == ("kueue" in want)
    for row in record["summary"]:
        assert row["n"] == 1 and math.isfinite(row["all_running_s_median"]) and row["all_running_s_median"] > 0
    for key, res in record["placement"].items():
        assert res["ran"] == 2, (key, res)
        assert 0 <= res["smallest_domain_share"] <= 1


@pytest.mark.cluster
def test_scale_smallest_size(tmp_path):
    record = run_bench("scale", tmp_path, "--nodes", "8", "--jobs", "5", "--submit-seconds", "2", "--settle", "3",
                       "--restart-timeout", "20", timeout=240)
    assert record["audit"]["overbooked"] == {} and record["audit_after_restart"]["overbooked"] == {}
    assert record["audit"]["fits_waiting"] == []
    assert record["floor"]["pods"] == 8 and record["floor"]["all_running_s"] > 0
    # the first job takes the whole cluster; its restart is timed, or (when a waiting job backfills
    # the nodes it frees, see docs/bench-operator.md) recorded as not back within the limit
    assert record["restart"]["size"] == 8
    assert (record["restart"]["all_running_again_s"] or 0) > 0 or "not" in record["restart"]["error"] or "timed out" in record["restart"]["error"]
    assert 0 < record["operator"]["rss_mb_max"] < 2000


import kueue_fairshare  # noqa: E402


def test_fairshare_quotas_and_summary_are_computed_from_the_samples():
    assert kueue_fairshare.shares(8, 0.75) == {"team-a": 48, "team-b": 16} and kueue_fairshare.shares(2, 0.9) == {"team-a": 8, "team-b": 8}
    with pytest.raises(ValueError, match="--share-a"):
        kueue_fairshare.shares(4, 1.0)
    pod = lambda ns, node, phase, gpus=8: {"metadata": {"namespace": ns}, "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},  # noqa: E731
                                           "status": {"phase": phase}}
    running, booked = kueue_fairshare.sample([pod("a", "n1", "Running"), pod("b", "n2", "Pending"), pod("own", "n1", "Running", 4), pod("a", "n3", "Succeeded")],
                                             {"a": "team-a", "b": "team-b"})
    assert running == {"team-a": 8, "team-b": 0} and booked == {"n1": 12, "n2": 8}
    samples = [{"t": 0.0, "running": {"team-a": 24, "team-b": 8}, "booked": {"n1": 8}}, {"t": 1.0, "running": {"team-a": 16, "team-b": 16}, "booked": {"n1": 12}},
               {"t": 2.0, "running": {}, "booked": {}}]
    out = kueue_fairshare.summarize(samples, {"team-a": 24, "team-b": 8})
    assert out["teams"]["team-a"]["gpu_seconds"] == 40 and out["teams"]["team-b"]["gpu_seconds"] == 24
    assert out["teams"]["team-a"]["measured_share"] == 40 / 64 and abs(out["teams"]["team-b"]["deviation"] - (24 / 64 - 0.25) / 0.25) < 1e-12
    assert out["double_booked_samples"] == [{"t": 1.0, "nodes": {"n1": 12}}]
    proc = subprocess.run([sys.executable, "bench/kueue_fairshare.py", "--nodes", "4", "--own-jobs", "3"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--nodes must leave at least 2 nodes of Kueue quota beside --own-jobs (3)" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.cluster
def test_kueue_fairshare_smallest_size(tmp_path):
    """bench/kueue_fairshare.py at its smallest size (its own control plane, Kueue and operator): both teams' jobs run
    (GPU-seconds on each side), jobs finish and are replaced, and no node is double-booked at any sample. The shares
    themselves are the full run's (docs/kueue.md); a 20 s scene is too short to hold them to 10%, and on a loaded
    machine too short for every side to finish a job."""
    if kueue_local.cached_root() is None:
        pytest.skip("Kueue is not built here (bench/install-kueue.sh, which .ci/test runs, builds it)")
    out = tmp_path / "fairshare.json"
    proc = subprocess.run([sys.executable, "bench/kueue_fairshare.py", "--nodes", "3", "--seconds", "20", "--job-seconds", "1", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "| team-a" in proc.stdout and "double-booked" in proc.stdout, proc.stdout
    record = json.loads(out.read_text())
    assert record["quotas"] == {"team-a": 8, "team-b": 8}  # 3 nodes, one left to the own queue
    result = record["result"]
    assert all(row["gpu_seconds"] > 0 for row in result["teams"].values()) and sum(record["finished"].values()) >= 1, (result["teams"], record["finished"])
    assert result["samples"] > 10 and result["double_booked_samples"] == []
    assert abs(sum(row["measured_share"] for row in result["teams"].values()) - 1) < 1e-9
