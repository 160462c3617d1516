"""``submit --wait``'s follower (cli/watch.py) on plain job objects: it stops with exit status 1 when the operator
says the gang can never fit, keeps following a gang that waits for capacity, and after Ctrl-C names the job's phase."""

from __future__ import annotations

import io
from datetime import datetime, timezone

from rich.console import Console

from railtrain.cli.watch import follow_job, never_fits
from railtrain.crds import contract

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
NEVER = f"gang needs 5 nodes with 8 free GPUs each; 4 of 4 nodes fit now. {contract.NEVER_FITS} as it is: only 4 eligible nodes have 8 GPUs allocatable"
WAITS = "gang needs 3 nodes with 8 free GPUs each; 2 of 4 nodes fit now: 2 full. It waits until enough nodes free up"


def _job(phase: str, message: str | None = None) -> dict:
    conditions = [{"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": message}] if message else []
    return {"metadata": {"name": "big"}, "status": {"phase": phase, "conditions": conditions}}


def _follow(*jobs: dict) -> tuple[int, str]:
    """Run follow_job over ``jobs``; after the last one the stream raises KeyboardInterrupt (Ctrl-C)."""
    def stream():
        yield from jobs
        raise KeyboardInterrupt

    out = io.StringIO()
    code = follow_job(stream, Console(file=out, width=400, force_terminal=False), "big", clock=lambda: NOW)
    return code, " ".join(out.getvalue().split())


def test_never_fits_reads_the_operators_sentence():
    assert never_fits(_job("Pending", NEVER)) == NEVER
    assert never_fits(_job("Pending", WAITS)) is None
    assert never_fits(_job("Running")) is None


def test_wait_exits_1_when_the_job_can_never_fit():
    code, text = _follow(_job("Pending"), _job("Pending", NEVER))
    assert code == 1
    assert f"stopped following; trainingjob big stays Pending: {NEVER} ('railtrain delete big' removes it)" in text


def test_wait_keeps_following_a_job_that_waits_for_capacity_and_ctrl_c_says_pending():
    code, text = _follow(_job("Pending", WAITS))
    assert code == 130
    assert "stopped following; trainingjob big keeps waiting (Pending) ('railtrain delete big' stops it)" in text
    assert "keeps running" not in text


def test_ctrl_c_on_a_running_job_says_it_keeps_running():
    code, text = _follow(_job("Pending", WAITS), _job("Running"))
    assert code == 130 and "stopped following; trainingjob big keeps running" in text


def _operator_refusals() -> list[str]:
    """The operator's own permanent sentences (issue 26, item 6): a level it does not know, no NVLink-domain level,
    an NVLink job on nodes without clique labels, and a gang whose image can never start."""
    from datetime import timedelta

    from railtrain.operator.job import planner
    from railtrain.operator.scheduling.snapshot import snapshot
    from railtrain.operator.job.conditions import find
    from railtrain.operator.scheduling.placement import GangRequest, place_gang
    from railtrain.operator.scheduling.topology import PRESETS
    from tests.operator.builders import gang, job_obj, node

    plain = snapshot([node("a"), node("b")], [])
    said = [
        place_gang(GangRequest("t/j", 1, 8, policy="required", level="example.com/pod"), plain).message,
        place_gang(GangRequest("t/j", 1, 8, nvlink=True), plain).message,
        place_gang(GangRequest("t/j", 2, 8, nvlink=True), snapshot([node("a"), node("b")], [], levels=PRESETS["nvidia"])).message,
    ]
    released = (NOW - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = job_obj(nodes=1, status={"phase": "Pending", "admittedNodes": 1, "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": released}]})
    (pod,) = gang(obj, gated=False, nodes=["a"])
    pod["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {"reason": "InvalidImageName", "message": "invalid reference format"}}}]
    said.append(find(planner.plan(obj, [pod], True, NOW).status["conditions"], "Scheduled")["message"])
    return said


def test_wait_exits_1_on_every_permanent_sentence_of_the_operator():
    for message in _operator_refusals():
        code, text = _follow(_job("Pending"), _job("Pending", message))
        assert code == 1 and "stopped following; trainingjob big stays Pending" in text, message
