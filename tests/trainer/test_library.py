"""The library surface's behaviour in one process (docs/library.md): the contract read once, the verdict writer's
exit codes and messages, a detector's internal error never ending a loop, and a checkpoint round trip."""

from __future__ import annotations

import json

import pytest
import railtrain.trainer as rt
import torch
from railtrain.crds import contract
from railtrain.crds.checkpoint import TierConfig
from torch import nn


def pod(**kw):
    return contract.pod_env(contract.PodEnvironment(job_name="j", namespace="ns", nnodes=2, node_rank=1, procs_per_node=1, rdzv_addr="h", **kw))


def test_read_contract_reads_the_gang_once_and_names_a_malformed_variable():
    c = rt.read_contract(pod(checkpoint_dir="/ckpt", checkpoint_interval=7, node_name="n1", run_id="r") | {"RANK": "1", "WORLD_SIZE": "2", contract.health_variable("kat_interval"): "9"})
    assert (c.rank, c.world_size, c.node, c.run_id, c.job_name, c.distributed) == (1, 2, "n1", "r", "j", True)
    assert c.tiers == (TierConfig("persistent", "/ckpt", 7, 2),) and c.health.kat_interval == 9
    for env, message in (
        (pod() | {contract.ENV_NNODES: "two"}, "environment variable RAILTRAIN_NNODES must be an integer, got 'two'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "environment variable RANK must be below WORLD_SIZE (2), got 2"),
        ({contract.health_variable("kat_interval"): "0"}, "RAILTRAIN_HEALTH_KAT_INTERVAL must be >= 1, got 0"),
    ):
        with pytest.raises(rt.ContractError) as info:
            rt.read_contract(env)
        assert str(info.value) == message


@pytest.mark.parametrize(
    "err,code,verdict,reason,line",
    [
        (rt.ContractError("environment variable RANK must be an integer, got 'x'"), 2, "user-error", "InvalidConfiguration", "me: error: environment variable RANK"),
        (rt.HealthVerdict("straggler", "SlowRank", "rank 1 slow", ["n1"], [1], 5), 1, "straggler", "SlowRank", "me: health: verdict=straggler"),
        (RuntimeError("boom"), 1, "retryable", "RuntimeError", None),
    ],
)
def test_write_verdict_gives_the_contract_exit_code_and_message(tmp_path, monkeypatch, capsys, err, code, verdict, reason, line):
    path = tmp_path / "termination-log"
    path.touch()
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(path))
    assert rt.write_verdict(err, prog="me") == code
    written = json.loads(path.read_text())
    assert (written["verdict"], written["reason"]) == (verdict, reason)
    stderr = capsys.readouterr().err
    assert stderr.startswith(line) if line else stderr == ""


def test_exit_with_verdict_exits_with_the_user_error_code_and_lets_a_crash_propagate(tmp_path, monkeypatch):
    path = tmp_path / "termination-log"
    path.touch()
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(path))
    with pytest.raises(SystemExit) as info, rt.exit_with_verdict():
        rt.read_contract({"RANK": "x"})
    assert info.value.code == contract.EXIT_USER_ERROR
    with pytest.raises(KeyError), rt.exit_with_verdict(), rt.exit_with_verdict():
        raise KeyError("k")
    assert json.loads(path.read_text())["reason"] == "KeyError"


def test_a_detectors_internal_error_is_reported_once_and_training_continues(monkeypatch):
    lines: list[str] = []
    model = nn.Linear(4, 1)
    hook = rt.StepHook(model, rt.Contract(), serve_metrics=False, log=lines.append)

    def broken(*args):
        raise IndexError("a detector's bug")

    monkeypatch.setattr(hook.monitor, "check_known_answer", broken)
    monkeypatch.setattr(hook.monitor, "_end_step", broken)
    try:
        for step in (1, 2, 3):
            hook.begin_step(step)
            loss = model(torch.ones(2, 4)).pow(2).mean()
            loss.backward()
            mean, skip = hook.check(step, loss.detach(), 0.5)
            hook.end_step(step, 0.01)
            assert mean == pytest.approx(float(loss.detach())) and not skip
    finally:
        hook.close()
    assert [line for line in lines if "internal error" in line] == [
        "health: internal error in the start check (IndexError: a detector's bug); reported, training continues",
        "health: internal error in the end_step check (IndexError: a detector's bug); reported, training continues",
    ]
    assert hook.internal_errors.labels("end_step")._value.get() == 3
    assert hook.metrics.step._value.get() == 3


def test_checkpoint_round_trip_in_the_persistent_tier(tmp_path):
    contract_ = rt.Contract(tiers=(TierConfig("persistent", str(tmp_path / "ckpt"), 2, 2),))
    torch.manual_seed(0)
    model, fresh = nn.Linear(4, 2), nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    saver = rt.JobCheckpointer(model, optimizer, contract_, async_save=False)
    assert saver.save(1, 4) == [] and saver.save(2, 4, {"cursor": 7}) == ["persistent"]
    saver.close()
    loader = rt.JobCheckpointer(fresh, torch.optim.AdamW(fresh.parameters()), contract_)
    assert loader.resume({"cursor": 0}) == {"step": 2, "cursor": 7}
    assert torch.equal(fresh.weight, model.weight)
    loader.close()
    assert rt.JobCheckpointer(model, optimizer, rt.Contract()).resume() == {"step": 0}  # no tier: a no-op


@pytest.mark.parametrize("tier", ["persistent", "local"])
def test_other_stateful_objects_are_saved_and_resumed_with_the_model_in_each_tier(tmp_path, tier):
    """``states``: an LR scheduler (floats, ints, lists) comes back as it was saved, beside the model, from the
    persistent tier (DCP) and from a node-local tier (per-rank shards); a checkpoint saved before the loop passed it
    still resumes the model, and the scheduler keeps its own state (said in the log)."""
    contract_ = rt.Contract(tiers=(TierConfig(tier, str(tmp_path / tier), 1, 3),))
    torch.manual_seed(0)
    model, fresh = nn.Linear(4, 2), nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for _ in range(5):
        model(torch.ones(1, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    saver = rt.JobCheckpointer(model, optimizer, contract_, async_save=False, states={"scheduler": scheduler})
    assert saver.save(5, 10) == [tier]
    saver.close()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    fresh_scheduler = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=2, gamma=0.5)
    loader = rt.JobCheckpointer(fresh, fresh_opt, contract_, states={"scheduler": fresh_scheduler})
    assert loader.resume() == {"step": 5}
    assert fresh_scheduler.state_dict() == scheduler.state_dict() and fresh_scheduler.last_epoch == 5
    assert fresh_scheduler.get_last_lr() == scheduler.get_last_lr() == [1e-3 * 0.5**2]
    assert torch.equal(fresh.weight, model.weight)
    loader.close()
    without = rt.Contract(tiers=(TierConfig(tier, str(tmp_path / "without"), 1, 3),))
    plain = rt.JobCheckpointer(model, optimizer, without, async_save=False)
    assert plain.save(1, 10) == [tier]
    plain.close()
    other = nn.Linear(4, 2)
    other_opt = torch.optim.AdamW(other.parameters())
    lines: list[str] = []
    own = torch.optim.lr_scheduler.StepLR(other_opt, 2)
    wants = rt.JobCheckpointer(other, other_opt, without, states={"scheduler": own}, log=lines.append)
    assert wants.resume() == {"step": 1} and wants.loaded_tier == tier, lines
    assert torch.equal(other.weight, model.weight) and own.last_epoch == 0
    assert any("holds no 'scheduler' state" in line for line in lines), lines
    wants.close()
