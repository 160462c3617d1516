"""The pure parts of the job commands: log interleaving, describe/live views at 80 columns, the failure sentence, plan, preflight."""

from __future__ import annotations

import io
import threading
from datetime import datetime, timedelta, timezone

import pytest
from rich.console import Console

from railtrain.cli import describe, logs, plan
from railtrain.cli.errors import CliError
from railtrain.crds import contract
from railtrain.crds.validation import parse_manifest
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.trainer import preflight
from tests.cli import manifests
from tests.operator.builders import fabric, gang, job_obj, node, other_pod
from tests.polling import wait_for

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def render(renderable, width=80) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(renderable)
    return buf.getvalue()


# -- logs ------------------------------------------------------------------------------------------

def test_timestamps_sort_as_times_not_as_text():
    # RFC 3339 with trailing zeros trimmed: as text "…:00Z" sorts after "…:00.1Z"
    assert logs.split_timestamp("2026-05-01T12:00:00Z hello world") == ("2026-05-01T12:00:00.000000000", "hello world")
    assert logs.split_timestamp("2026-05-01T12:00:00.1Z x")[0] > logs.split_timestamp("2026-05-01T12:00:00Z x")[0]
    assert logs.split_timestamp("no stamp here") == ("", "no stamp here")


def test_merge_interleaves_ranks_in_time_order_keeping_each_ranks_order():
    merged = logs.merge({
        0: ["2026-05-01T12:00:00Z r0 first", "2026-05-01T12:00:02Z r0 third", "continuation without stamp"],
        1: ["2026-05-01T12:00:01.5Z r1 second", "2026-05-01T12:00:02Z r1 tie goes to the lower rank first? no: rank order"],
    })
    assert [logs.prefixed(line.rank, line.text) for line in merged] == [
        "[rank 0] r0 first",
        "[rank 1] r1 second",
        "[rank 0] r0 third",
        "[rank 0] continuation without stamp",
        "[rank 1] r1 tie goes to the lower rank first? no: rank order",
    ]


def _pods(restarts):
    obj = job_obj("tiny", nodes=2, gpus=0, procs=1)
    return obj, [p for r in restarts for p in gang(obj, restarts=r)]


def test_pick_pods_current_gang_one_rank_or_all_and_previous():
    obj, pods = _pods([0, 1])
    obj["status"] = {"restarts": 1}
    assert [p["metadata"]["name"] for p in logs.pick_pods(obj, pods, None, False)] == ["tiny-0", "tiny-1"]
    assert [logs.pod_restart(p) for p in logs.pick_pods(obj, pods, None, False)] == [1, 1]
    assert [logs.pod_restart(p) for p in logs.pick_pods(obj, pods, 1, True)] == [0]
    with pytest.raises(CliError, match="--rank 5: trainingjob tiny has node ranks 0..1"):
        logs.pick_pods(obj, pods, 5, False)
    obj["status"] = {"restarts": 0}
    with pytest.raises(CliError, match="no earlier gang"):
        logs.pick_pods(obj, [p for p in pods if logs.pod_restart(p) == 0], None, True)


def test_follow_job_prefixes_ranks_marks_each_new_attempt_and_exits_with_the_outcome():
    """The pure driver of ``logs -f``: lines of every rank prefixed, a marker when the gang restarts, the new pods read
    once they run, a pod whose log cannot be opened said once, and the job's end as the exit status (the real
    control plane: tests/cli/test_job_commands_cluster.py)."""
    obj = job_obj("tiny", nodes=2, gpus=8, procs=8, status={"phase": "Running", "restarts": 0})
    first = gang(obj, restarts=0)
    second = gang(obj, restarts=1)
    for i, p in enumerate(first + second):
        p["metadata"]["uid"] = f"u{i}"
        p["status"] = {"phase": "Running"}
    second[1]["status"] = {"phase": "Pending"}  # not started yet: not read until it runs
    restarted = {**obj, "status": {"phase": "Running", "restarts": 1}}
    failed = {**obj, "status": {"phase": "Failed", "restarts": 1, "conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "rank 1 exited with code 1"}]}}
    pods = list(first)
    both_read = threading.Event()
    got: list[str] = []

    def watch():
        yield obj
        wait_for(lambda: len(got) >= 2, 10, "the first gang's lines")
        pods[:] = second
        yield restarted
        second[1]["status"] = {"phase": "Running"}
        yield None
        wait_for(both_read.is_set, 10, "the second gang read")
        yield failed

    def open_log(pod):
        if pod["metadata"]["uid"] == "u3":
            both_read.set()
            raise CliError("no log of pod tiny-1: the kubelet is away")
        return iter([f"2026-05-01T12:00:0{logs.pod_rank(pod)}Z {pod['metadata']['name']} attempt {logs.pod_restart(pod)}"])

    notes: list[str] = []
    code = logs.follow_job("tiny", watch, lambda: list(pods), open_log, got.append, notes.append, None, "trainer")
    assert code == 1
    assert sorted(got[:2]) == ["[rank 0] tiny-0 attempt 0", "[rank 1] tiny-1 attempt 0"]
    assert got[2:] == ["==> trainingjob tiny: attempt 2 (restart 1) <==", "[rank 0] tiny-0 attempt 1"]
    assert notes == ["no log of pod tiny-1: the kubelet is away", "trainingjob tiny failed: BackoffLimitExceeded: rank 1 exited with code 1"]


# -- describe / live ---------------------------------------------------------------------------------

def _failed_job():
    obj = job_obj("tiny", nodes=2, gpus=8, procs=8, status={
        "phase": "Failed", "restarts": 2, "jobRestarts": 1, "infrastructureRestarts": 1,
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": "2026-05-01T11:59:00Z",
                        "message": "rank 1 exited with code 1: LossNotFinite: the loss was NaN at step 40 on every retry"}],
        "placement": [{"rank": 0, "node": "b0r0n0", "domains": {"railtrain.dev/block": "b0", "railtrain.dev/rack": "b0-r0"}},
                      {"rank": 1, "node": "b0r0n1", "domains": {"railtrain.dev/block": "b0", "railtrain.dev/rack": "b0-r0"}}],
        "progress": {"step": 40, "totalSteps": 300, "loss": 2.51, "tokensPerSecond": 5210.4, "etaSeconds": 130},
        "goodput": {"wallSeconds": 610, "queuedSeconds": 20, "startingSeconds": 30, "trainingSeconds": 500, "lostSeconds": {"restart_node_lost": 60}, "ratio": 0.82,
                    "lastUpdateTime": "2026-05-01T12:00:00Z"},
    })
    obj["metadata"]["creationTimestamp"] = "2026-05-01T11:50:00Z"
    pods = gang(obj, restarts=2)
    message = contract.format_termination_message(contract.VERDICT_RETRYABLE, "LossNotFinite", "the loss was NaN at step 40 on every retry")
    pods[1]["status"] = {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 1, "message": message}}}]}
    events = [
        {"type": "Warning", "reason": "NodeLost", "count": 1, "message": "node b0r1n0 is lost; restarting the whole gang", "lastTimestamp": "2026-05-01T11:55:00Z"},
        {"type": "Warning", "reason": "Restarting", "count": 1, "message": "rank 1 exited; restarting the gang (job restart 1 of 3)", "lastTimestamp": "2026-05-01T11:57:00Z"},
        {"type": "Normal", "reason": "GangPlaced", "count": 3, "message": "placed 2 ranks", "lastTimestamp": "2026-05-01T11:58:00Z"},
    ]
    return obj, pods, events


def test_describe_shows_every_section_within_80_columns():
    obj, pods, events = _failed_job()
    text = render(describe.describe_view(obj, pods, events, NOW))
    assert max(len(line) for line in text.splitlines()) <= 80
    for expected in ("Name:", "Placement", "BLOCK", "RACK", "b0-r0", "Restarts:", "2 (job 1, infrastructure 1); by reason: NodeLost 1, Restarting 1",
                     "step 40/300", "loss 2.510", "5210 tokens/s", "ETA 2m10s", "82% training of", "restart_node_lost",
                     "Failed ranks", "retryable (LossNotFinite)", "Events", "GangPlaced ×3"):
        assert expected in text, expected
    last = " ".join(text.strip().split("\n\n")[-1].split())  # the last paragraph, wrapped at 80 columns
    assert last == "trainingjob tiny failed: BackoffLimitExceeded: rank 1 exited with code 1: LossNotFinite: the loss was NaN at step 40 on every retry"


def test_describe_without_progress_or_goodput_shows_the_rest():
    obj = job_obj("fresh", status={"phase": "Pending", "progress": "garbage", "goodput": None})
    obj["metadata"]["creationTimestamp"] = "2026-05-01T11:59:50Z"
    text = render(describe.describe_view(obj, [], [], NOW))
    assert "step" not in text and "training of" not in text and "Events: none" in text


def test_the_failure_sentence_names_reason_and_the_failing_ranks_message():
    obj, _, _ = _failed_job()
    assert describe.failure_sentence(obj) == (
        "trainingjob tiny failed: BackoffLimitExceeded: rank 1 exited with code 1: LossNotFinite: the loss was NaN at step 40 on every retry"
    )
    assert describe.failure_sentence(job_obj("ok", status={"phase": "Succeeded"})) is None


def test_condition_changes_report_the_phase_and_each_changed_condition_once():
    a = {"status": {"phase": "Pending", "conditions": [{"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": "m"}]}}
    b = {"status": {"phase": "Running", "conditions": [{"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": ""},
                                                      {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": ""}]}}
    assert describe.condition_changes(None, a) == ["phase Pending", "Scheduled=False Unschedulable: m"]
    assert describe.condition_changes(a, b) == ["phase Running", "Scheduled=True GangPlaced", "Running=True AllRanksRunning"]
    assert describe.condition_changes(b, b) == []


def test_the_live_view_shows_phase_restarts_and_a_progress_bar():
    obj, _, _ = _failed_job()
    obj["status"]["phase"] = "Running"
    text = render(describe.live_view(obj, NOW))
    assert text.splitlines()[0].split() == ["tiny", "Running", "age", "10m", "2", "restarts"]
    assert "step 40/300" in text and "13%" in text and "loss 2.51" in text and "tokens/s 5,210" in text and "ETA 2m10s" in text


def test_progress_eta_from_a_finish_time():
    status = {"progress": {"step": "10", "totalSteps": 20, "estimatedFinishTime": (NOW + timedelta(seconds=95)).isoformat()}}
    assert describe.progress_numbers(status, NOW)["eta"] == pytest.approx(95)
    assert "ETA 1m35s" in render(describe.progress_line(status, NOW))


# -- plan ----------------------------------------------------------------------------------------------

LEVELS = ("railtrain.dev/block", "railtrain.dev/rack", "kubernetes.io/hostname")


def test_plan_places_the_job_in_one_rack_and_explains_every_node():
    nodes, pods = fabric(blocks=1, racks=2, per_rack=2, used={"b0r0n0": 4})
    result = plan.plan(manifests.job(name="new", nodes=2, procsPerNode=8, resources={"gpus": 8}), "team", {"nodes": nodes, "pods": pods, "trainingjobs": []}, LEVELS, NOW)
    assert isinstance(result.result, Placement)
    assert set(result.result.nodes) == {"b0r1n0", "b0r1n1"}
    verdicts = {row.name: row.verdict for row in result.nodes}
    assert verdicts == {"b0r1n0": "fits", "b0r1n1": "fits", "b0r0n1": "fits", "b0r0n0": "4 of 8 GPUs free, needs 8"}
    text = render(plan.plan_view(result))
    assert "team/new would be admitted now: placed 2 ranks" in text and "FOR THIS JOB" in text


def test_plan_says_why_not_and_what_the_job_waits_behind():
    nodes = [node("a", 8), node("b", 8), node("c", 8, ready=False)]
    earlier = job_obj("earlier", ns="team", nodes=2, priority=5)
    earlier["metadata"]["creationTimestamp"] = "2026-05-01T11:00:00Z"
    objects = {"nodes": nodes, "pods": gang(earlier), "trainingjobs": [earlier]}
    result = plan.plan(manifests.job(name="new", nodes=2, procsPerNode=8, resources={"gpus": 8}), "team", objects, LEVELS, NOW)
    assert isinstance(result.result, Refusal) and result.result.reason == "WaitingForEarlierJobs"
    assert result.ahead == (("team/earlier", 5, "placed first (2 nodes)"),)
    assert {r.name: r.verdict for r in result.nodes}["c"] != "fits"
    assert plan.as_data(result)["decision"] == {"admitted": False, "reason": "WaitingForEarlierJobs", "message": result.result.message}


def test_plan_of_a_suspended_job_and_a_snapshot_round_trip():
    nodes = [node("a", 8), other_pod("a", 8)]
    snap = plan.make_snapshot({"nodes": [nodes[0]], "pods": [nodes[1]], "trainingjobs": []}, NOW)
    objects = plan.read_snapshot(snap, "s.yaml")
    result = plan.plan(manifests.job(name="s", nodes=1, resources={"gpus": 8}, runPolicy={"suspend": True}), "team", objects, LEVELS, NOW)
    assert result.result is None and "suspended" in result.not_queued
    full = plan.plan(manifests.job(name="f", nodes=1, resources={"gpus": 8}), "team", objects, LEVELS, NOW)
    assert isinstance(full.result, Refusal) and full.result.reason == "Unschedulable"
    with pytest.raises(ValueError, match="not a cluster snapshot"):
        plan.read_snapshot({"kind": "List"}, "x.yaml")


# -- the trainer's arguments, offline -------------------------------------------------------------------

def _trainer_job(args, **spec):
    return parse_manifest(manifests.job(command=["torchrun", "-m", "railtrain.trainer"], args=["--data", "pkg://email/*.py", *args], **spec)).spec


@pytest.mark.parametrize("args, spec, expected", [
    (["--steps", "5"], {}, []),
    (["--stesp", "5"], {}, ["spec.args: unrecognized arguments: --stesp 5 (python -m railtrain.trainer --help lists the flags)"]),
    (["--preset", "huge"], {}, ["spec.args: argument --preset: invalid choice: 'huge'"]),
    (["--steps", "0"], {}, ["spec.args: --steps must be >= 1, got 0"]),
    (["--tp", "3"], {"nodes": 1, "procsPerNode": 3}, ["spec.args: --tp 3 must divide the model's hidden_dim (512)"]),
    # the degree set in spec.parallelism is named as written there, not as the trainer flag the pod never gets (issue 26)
    ([], {"nodes": 1, "procsPerNode": 3, "parallelism": {"tensor": 3}}, ["spec.parallelism.tensor=3 must divide the model's hidden_dim (512)"]),
    ([], {"nodes": 1, "procsPerNode": 8, "parallelism": {"pipeline": 8}}, ["spec.parallelism.pipeline=8 exceeds the model's 4 transformer blocks"]),
    (["--batch-size", "3"], {"nodes": 2}, ["spec.args: --batch-size 3 is not divisible by the data-parallel degree 2"]),
    (["--batch-size", "42"], {"nodes": 5, "procsPerNode": 8, "parallelism": {"data": 5, "fsdp": 8}},
     ["spec.args: --batch-size 42 is not divisible by the data-parallel degree 40 (data 5 × fsdp 8: the ranks that each get"]),
    (["--pp", "2"], {"nodes": 1, "procsPerNode": 2, "parallelism": {"pipeline": 2}}, []),
    (["--steps", "$(STEPS)"], {}, []),  # expanded by Kubernetes in the pod: not checked here
])
def test_preflight_runs_the_trainers_own_checks(args, spec, expected):
    found = preflight.problems(_trainer_job(args, **spec))
    assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected)), found


def test_preflight_ignores_other_commands():
    assert preflight.problems(parse_manifest(manifests.job(args=["--stesp"])).spec) == []
