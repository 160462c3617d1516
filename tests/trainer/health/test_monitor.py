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


def _groups(monitor: HealthMonitor, group: int, others: dict[int, int], flags: dict[int, list[int]] | None = None) -> list[list[int]]:
    """Wire ``monitor`` as replica group ``group`` whose counterparts in the other groups hold fingerprints ``others``
    (and report re-run flags ``flags``, [rehash differs, known answer differs]; default none); returns what it sent."""
    sent: list[list[int]] = []

    def gather(values: list[int]) -> dict[int, list[int]]:
        sent.append(list(values))
        if len(sent) == 1:
            return {group: values} | {g: [v] for g, v in others.items()}
        return {group: values} | {g: (flags or {}).get(g, [0, 0]) for g in others}

    monitor.replica_group, monitor.across_groups = group, gather
    monitor.check_known_answer(0)  # the reference answer
    return sent


def test_across_replica_groups_a_majority_names_the_odd_group_whose_own_rank_raises_and_the_others_train_on() -> None:
    """Issue 31's SDC check across replica groups (``HealthMonitor.across_groups``), for one 1-process group: the
    odd group out of three raises naming its own rank; a group in the majority only logs; equal copies say nothing."""
    from railtrain.trainer.health.fingerprint import model_fingerprint

    odd, _ = make_monitor()
    mine = model_fingerprint(odd.model)
    _groups(odd, 1, {0: mine + 1, 2: mine + 1})
    with pytest.raises(HealthVerdict) as info:
        odd.check_fingerprints(5)
    v = info.value
    assert (v.verdict, v.reason, v.ranks, v.nodes) == (contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_PARAMETER_MISMATCH, [0], ["gpu-7"])
    assert "replica group 1's parameter bytes" in v.message and v.evidence["majority"] is True

    healthy, lines = make_monitor()
    mine = model_fingerprint(healthy.model)
    _groups(healthy, 0, {1: mine + 1, 2: mine})
    healthy.check_fingerprints(5)  # no verdict here: group 1 goes
    assert any("replica group(s) [1] hold parameter bytes that differ" in line for line in lines), lines

    same, lines = make_monitor()
    sent = _groups(same, 0, {1: model_fingerprint(same.model)})
    same.check_fingerprints(5)
    assert len(sent) == 1 and not any("differ" in line for line in lines)  # one gather, nothing to re-run


def test_across_two_replica_groups_the_re_runs_decide_and_without_evidence_no_node_is_named() -> None:
    """Two groups that differ have no majority: each re-hashes and runs the known-answer test and they exchange the
    flags. The group whose known-answer test is wrong raises naming its rank, the other trains on; when neither
    re-run singles one out, both raise without a node (the job goes back to its checkpoint)."""
    from railtrain.trainer.health.fingerprint import model_fingerprint

    healthy, lines = make_monitor()
    _groups(healthy, 0, {1: model_fingerprint(healthy.model) + 1}, flags={1: [0, 1]})
    healthy.check_fingerprints(5)
    assert any("replica group(s) [1]" in line for line in lines), lines

    bad, _ = make_monitor()
    _groups(bad, 1, {0: model_fingerprint(bad.model) + 1})  # the known-answer reference is taken on a good device
    bad.injector.faults = contract.Faults(bitflip=contract.BitFlipFault(rank=0, step=1, mode="persistent", bit=5))
    bad.injector.step = 5  # its device is bad from step 1: its known-answer test is wrong now
    with pytest.raises(HealthVerdict) as info:
        bad.check_fingerprints(5)
    assert info.value.ranks == [0] and info.value.evidence["known_answer_differs"] == [1]

    unsure, _ = make_monitor()
    _groups(unsure, 0, {1: model_fingerprint(unsure.model) + 1})
    with pytest.raises(HealthVerdict) as info:
        unsure.check_fingerprints(5)
    assert info.value.ranks == [] and info.value.nodes == [] and "no node named" in info.value.message
