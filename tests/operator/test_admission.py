"""Gang admission across jobs: queue order, one ledger, no partial holds (pure)."""

from railtrain.operator.scheduling.queue import apply_order, queue_key, schedule
from railtrain.operator.scheduling.snapshot import snapshot
from railtrain.operator.scheduling.placement import GangRequest, Placement
from railtrain.operator.scheduling.refusal import Refusal

from .builders import fabric


def job(name, nodes, gpus=8, created="2026-01-01T00:00:00Z", **kw):
    kw.setdefault("procs_per_node", gpus or 1)
    return GangRequest(f"ns/{name}", nodes, gpus, created=created, **kw)


def results(decisions):
    return {d.job.split("/")[1]: d.result for d in decisions}


def small_cluster(**kw):
    return snapshot(*fabric(blocks=1, racks=1, **kw))  # 4 nodes x 8 GPUs


def test_two_big_jobs_that_cannot_both_fit_exactly_one_is_placed_whole():
    out = results(schedule([job("b", 3, created="2026-01-01T00:00:01Z"), job("a", 3)], small_cluster()))
    assert isinstance(out["a"], Placement) and len(out["a"].nodes) == 3
    assert isinstance(out["b"], Refusal) and out["b"].reason == "WaitingForEarlierJobs" and not out["b"].warning
    assert "ns/a (priority 0)" in out["b"].message


def test_priority_goes_before_submission_time():
    out = results(schedule([job("old", 3), job("urgent", 3, created="2026-01-02T00:00:00Z", priority=10)], small_cluster()))
    assert isinstance(out["urgent"], Placement) and isinstance(out["old"], Refusal)


def test_equal_priority_and_time_go_by_name():
    out = results(schedule([job("y", 3), job("x", 3)], small_cluster()))
    assert isinstance(out["x"], Placement) and isinstance(out["y"], Refusal)


def test_later_small_job_backfills_what_earlier_jobs_leave():
    out = results(schedule([job("big", 3), job("small", 1, created="2026-01-01T00:00:05Z")], small_cluster()))
    assert isinstance(out["big"], Placement) and isinstance(out["small"], Placement)
    assert not set(out["big"].nodes) & set(out["small"].nodes)


def test_earlier_job_that_cannot_fit_does_not_block_later_ones():
    out = results(schedule([job("huge", 5), job("later", 2, created="2026-01-01T00:00:05Z")], small_cluster()))
    assert isinstance(out["huge"], Refusal) and out["huge"].reason == "Unschedulable"
    assert isinstance(out["later"], Placement)


def test_later_job_never_takes_what_an_earlier_fitting_job_needs():
    # earlier: 3 nodes; later: 2 nodes. Together 5 > 4: the later one waits even though it is smaller.
    out = results(schedule([job("later", 2, created="2026-01-01T00:00:09Z"), job("earlier", 3)], small_cluster()))
    assert isinstance(out["earlier"], Placement)
    assert isinstance(out["later"], Refusal) and out["later"].reason == "WaitingForEarlierJobs"


def test_partial_gangs_go_first():
    snap = small_cluster(used={"b0r0n0": 8})  # rank 0 of "resuming" already pinned there
    out = results(schedule([job("first", 3, priority=100), job("resuming", 2, fixed={0: "b0r0n0"}, created="2026-01-03T00:00:00Z")], snap))
    assert isinstance(out["resuming"], Placement) and out["resuming"].nodes[0] == "b0r0n0"
    assert isinstance(out["first"], Refusal)


def test_half_node_gangs_share_nodes_on_one_ledger():
    snap = snapshot(*fabric(blocks=1, racks=1, per_rack=2))
    out = results(schedule([job(n, 2, gpus=4, created=f"2026-01-01T00:00:0{i}Z") for i, n in enumerate("abc")], snap))
    assert isinstance(out["a"], Placement) and isinstance(out["b"], Placement)
    assert isinstance(out["c"], Refusal)


def test_elastic_job_takes_what_fits_and_later_jobs_get_the_rest():
    out = results(schedule([job("elastic", 8, counts=tuple(range(2, 9))), job("later", 1, created="2026-01-01T00:00:05Z")], small_cluster()))
    assert len(out["elastic"].nodes) == 4
    assert isinstance(out["later"], Refusal) and out["later"].reason == "WaitingForEarlierJobs"


def test_separate_resources_are_not_mixed_by_the_caller():
    # schedule() sees one resource; a GPU-less gang fits anywhere and never blocks.
    out = results(schedule([job("gpu", 4), job("cpu", 4, gpus=0, created="2026-01-01T00:00:05Z")], small_cluster()))
    assert isinstance(out["gpu"], Placement) and isinstance(out["cpu"], Placement)


def test_queue_key_orders_partial_then_priority_then_time():
    keys = [job("c", 1, priority=1), job("b", 1, fixed={0: "n"}), job("a", 1, created="2025-01-01T00:00:00Z")]
    assert [r.job for r in sorted(keys, key=queue_key)] == ["ns/b", "ns/c", "ns/a"]


def test_a_pass_writes_its_admissions_before_its_refusals_each_in_queue_order():
    requests = [job("a", 3), job("b", 3, created="2026-01-01T00:00:01Z"), job("c", 1, created="2026-01-01T00:00:02Z"),
                job("d", 5, created="2026-01-01T00:00:03Z")]
    decisions = schedule(requests, small_cluster())
    assert [d.job for d in decisions] == ["ns/a", "ns/b", "ns/c", "ns/d"]  # queue order, refusals interleaved
    ordered = apply_order(decisions)
    assert [d.job for d in ordered] == ["ns/a", "ns/c", "ns/b", "ns/d"]
    assert [type(d.result) for d in ordered] == [Placement, Placement, Refusal, Refusal]
