"""A job is observed once per pass: its spec validated once and rank 0's pod rendered once, whoever reads it (issue 27)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from railtrain.crds.api import AdmissionRecord, HoldRecord, TrainingJob
from railtrain.operator.job import ledger, planner, render
from railtrain.operator.job.observed import observe_job, spec_problem
from railtrain.operator.job.records import admission_record, hold_record
from tests.operator.builders import job_obj

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
UNTIL = (NOW + timedelta(seconds=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
SCHEDULED = {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}


@pytest.fixture
def calls(monkeypatch):
    """Counts of TrainingJob validations and rank pod renders while the test runs."""
    seen = {"validate": 0, "render": 0}
    validate, render_pod = TrainingJob.model_validate.__func__, render.render_pod

    def counting_validate(cls, *args, **kwargs):
        seen["validate"] += 1
        return validate(cls, *args, **kwargs)

    def counting_render(*args, **kwargs):
        seen["render"] += 1
        return render_pod(*args, **kwargs)

    monkeypatch.setattr(TrainingJob, "model_validate", classmethod(counting_validate))
    monkeypatch.setattr(render, "render_pod", counting_render)
    return seen


def test_a_restarting_job_is_validated_and_rendered_once_for_the_queue_its_hold_and_its_plan(calls):
    held = job_obj("held", status={"phase": "Restarting", "restarts": 1, "hold": {"restarts": 1, "nodes": ["n0", "n1"], "until": UNTIL}})
    found = ledger.read([held], {}, NOW)
    seen = found.observed["team/held"]
    planner.plan(seen, [], None, NOW)
    planner.gang_request(seen, [], NOW)
    assert "team/held" in found.holds
    assert calls == {"validate": 1, "render": 1}


def test_a_finished_job_in_the_ledger_is_never_parsed(calls):
    done = job_obj("done", status={"phase": "Succeeded", "restarts": 0})
    found = ledger.read([done], {}, NOW)
    assert found.waiting == {} and found.holds == {} and found.promised == []
    assert calls == {"validate": 0, "render": 0}


def test_a_spec_is_usable_only_without_a_spec_error():
    refused = observe_job(job_obj("bad", resources={"gpus": 8, "cpu": "lots"}))
    assert refused.job is None and refused.usable is None and refused.pod0 is None and "cpu" in refused.spec_error
    good = observe_job(job_obj("good"))
    assert good.spec_error == "" and good.usable is good.job and spec_problem(good.job) is None


def test_the_records_are_read_back_as_the_api_models():
    admitted = {"restarts": 0, "phase": "Pending", "conditions": [SCHEDULED], "admission": {"restarts": 0, "nodes": ["n0", "n1"]}}
    assert admission_record(admitted) == AdmissionRecord(restarts=0, nodes=["n0", "n1"], created=False)
    held = {"restarts": 1, "phase": "Restarting", "hold": {"restarts": 1, "nodes": ["n0", ""], "until": UNTIL}}
    record = hold_record(held, NOW)
    assert isinstance(record, HoldRecord) and record.nodes == ["n0", ""] and record.until == NOW + timedelta(seconds=100)
    assert admission_record(admitted | {"admission": {"restarts": 0, "nodes": ["n0"], "typo": 1}}) is None  # not the model: absent


def test_a_partial_older_or_unknown_status_is_read_leniently_and_a_corrupt_one_is_named():
    stored = {
        "phase": "Running", "restarts": 2, "futureField": {"x": 1},  # a field this version does not know
        "topology": {"level": "rack"},  # a summary without its policy: left out
        "conditions": [{"type": "Scheduled", "status": "True"}],  # no reason, no time: read (only the type is needed)
        "placement": [{"rank": 0, "node": "n0"}, {"node": "n1"}],  # the entry without a rank is left out
        "progress": {"lastUpdateTime": "2026-01-01T00:00:00Z"},
        "hold": None,
    }
    seen = observe_job(job_obj("partial", status=stored))
    s = seen.status
    assert (s.phase, s.restarts, s.topology, [p.node for p in s.placement], seen.status_error) == ("Running", 2, None, ["n0"], "")
    assert s.conditions[0].status == "True" and s.conditions[0].reason == "" and s.progress.last_update_time == NOW
    corrupt = observe_job(job_obj("odd", status={"phase": "Pending", "requeueAfter": "not a time"}))
    assert corrupt.status.phase == "Pending" and corrupt.status.requeue_after is None and "status.requeueAfter" in corrupt.status_error
    with pytest.raises(ValueError, match="status.requeueAfter"):
        planner.admission_request(corrupt, [], NOW)
