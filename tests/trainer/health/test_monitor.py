"""HealthMonitor in one process (no gang): classification by re-execution, skipped batches, settings re-read while running."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry

from railtrain.crds import contract
from railtrain.trainer.health.monitor import HealthMonitor, HealthVerdict
from railtrain.trainer.model import ModelConfig, Transformer


def make_monitor(settings: contract.HealthSettings | None = None, settings_file: str = "") -> tuple[HealthMonitor, list[str]]:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64, max_seq_len=16))
    lines: list[str] = []
    monitor = HealthMonitor(
        settings or contract.HealthSettings(), contract.Faults(), model, rank=0, world_size=1, distributed=False,
        device=torch.device("cpu"), coordinates=[{"pp": 0, "dp_replicate": 0, "dp_shard": 0, "tp": 0}], node="gpu-7",
        registry=CollectorRegistry(), log=lines.append, settings_file=settings_file,
    )  # fmt: skip
    return monitor, lines


def test_a_reproducible_nan_is_data_and_skipped_until_the_limit() -> None:
    monitor, lines = make_monitor(contract.HealthSettings(max_skipped_batches=1))
    nan = torch.tensor(math.nan)
    assert monitor.check_numeric(3, math.nan, 1.0, nan, lambda: nan.clone()) is True
    assert "data, not hardware; skipping the batch (1 of at most 1)" in lines[-1]
    # (a non-finite step right after a skip is the model, not the data: tests/trainer/test_nonfinite.py)
    with pytest.raises(HealthVerdict) as info:
        monitor.check_numeric(6, math.nan, 1.0, nan, lambda: nan.clone())
    v = info.value
    assert (v.verdict, v.reason, v.step, v.ranks, v.evidence["skipped"]) == (contract.VERDICT_USER_ERROR, contract.REASON_DATA_ANOMALY, 6, [], 2)


def test_a_re_execution_that_differs_is_hardware_on_this_node() -> None:
    monitor, _ = make_monitor()
    with pytest.raises(HealthVerdict) as info:
        monitor.check_numeric(7, math.inf, 1.0, torch.tensor(1e30), lambda: torch.tensor(2.5))
    v = info.value
    assert (v.verdict, v.reason, v.ranks, v.nodes, v.step) == (contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_RERUN_MISMATCH, [0], ["gpu-7"], 7)
    assert v.evidence["loss"] == "inf"  # non-finite numbers stay JSON-safe
    contract.format_termination_message(v.verdict, v.reason, v.message, **v.details())


def test_normal_values_pass_and_feed_the_statistic() -> None:
    monitor, _ = make_monitor()
    for step in range(1, 30):
        assert monitor.check_numeric(step, 4.0 - 0.01 * step, 1.0, torch.tensor(4.0), lambda: pytest.fail("no re-execution")) is False
    assert len(monitor.loss_spikes.values) == 29


def test_settings_file_is_re_read_and_a_bad_one_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"straggler_threshold": 0.3, "spike_threshold": 5}))
    monitor, lines = make_monitor(settings_file=str(path))
    monitor.reload_settings()
    assert (monitor.settings.straggler_threshold, monitor.straggler.threshold, monitor.loss_spikes.threshold) == (0.3, 0.3, 5.0)
    assert lines[-1].startswith(f"health: settings changed from {path}")
    path.write_text(json.dumps({"straggler_action": "panic"}))
    import os

    os.utime(path, (1, 1))  # a new modification time
    monitor.reload_settings()
    assert monitor.settings.straggler_action == "report"
    assert "must be 'report' or 'stop'" in capsys.readouterr().err


def test_known_answer_test_decides_against_a_bad_device() -> None:
    monitor, _ = make_monitor()
    monitor.check_known_answer(0)  # the reference
    monitor.injector.faults = contract.Faults(bitflip=contract.BitFlipFault(rank=0, step=1, mode="persistent", bit=5))
    monitor.injector.step = 2
    with pytest.raises(HealthVerdict) as info:
        monitor.check_known_answer(2)
    assert (info.value.reason, info.value.ranks) == (contract.REASON_KNOWN_ANSWER_MISMATCH, [0])
