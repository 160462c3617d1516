"""A deterministic error is not retryable: a checkpoint written by another model, and exceptions outside ``Exception``.

The input: a persistent checkpoint written by a model with a different number of
layers, resumed by a real 2-rank FSDP gang (torchrun). The trainer must end with a
``user-error`` verdict naming the tensor, which the failure policy does not retry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import subprocess
from datetime import datetime, timezone
import sys
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException

from railtrain.cli.local_recovery import local_failures
from railtrain.crds import contract, recovery
from railtrain.crds.api import TrainingJob
from railtrain.operator.job.phases.verdict import rank_failure
from railtrain.trainer.checkpoint import Checkpointer, TierConfig
from railtrain.trainer.checkpoint.state import CheckpointMismatch, model_mismatch
from railtrain.trainer.model import PRESETS, Transformer
from tests.trainer.tierkit import COMMON, RUN_TIMEOUT_S, clean_env


def write_checkpoint(location: Path, n_layers: int, step: int = 4) -> None:
    """A persistent checkpoint of step ``step`` of the tiny preset with ``n_layers`` blocks, written by the trainer's own Checkpointer."""
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(PRESETS["tiny"], n_layers=n_layers))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 256, (2, 8))).float().mean().backward()
    optimizer.step()
    saver = Checkpointer([TierConfig("persistent", str(location), 1, 2)], rank=0, world_size=1, local_world_size=1, distributed=False, layout="single", async_save=False)
    saver.save(step, model, optimizer, {"step": step}, last_step=step)
    saver.close()


def test_a_checkpoint_of_a_model_with_fewer_layers_is_a_user_error_naming_the_tensor(tmp_path: Path) -> None:
    location = tmp_path / "ckpt"
    write_checkpoint(location, n_layers=2)  # the tiny preset has 4
    message = tmp_path / "termination-log"
    message.write_text("")  # the kubelet creates it before the container starts
    env = clean_env({contract.ENV_TERMINATION_MESSAGE_PATH: str(message)})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "railtrain.trainer", *COMMON,
           "--steps", "6", "--parallel", "fsdp", "--checkpoint-dir", str(location)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out

    verdict = contract.parse_termination_message(message.read_text())
    assert verdict is not None, f"no verdict in the termination message:\n{out}"
    assert (verdict["verdict"], verdict["reason"]) == (contract.VERDICT_USER_ERROR, contract.REASON_CHECKPOINT_MISMATCH)
    assert f"the persistent checkpoint at {location} (step 4) does not fit this model: layers.2." in verdict["message"]
    assert "is not in the checkpoint" in verdict["message"]
    assert "railtrain.trainer: error: the persistent checkpoint" in out and "CheckpointException" not in out

    # The operator reads the pod's termination message (exit code 1: torchrun's); the one failure decision fails the job
    # now, whatever backoffLimit is left, and run --local, reading the same message from its file, decides the same.
    pod = {
        "metadata": {"name": "llm-0", "labels": {contract.LABEL_NODE_RANK: "0"}},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 1, "message": message.read_text()}}}]},
    }
    failure = rank_failure(pod)
    assert (failure.verdict, failure.reason) == (contract.VERDICT_USER_ERROR, contract.REASON_CHECKPOINT_MISMATCH)
    job = TrainingJob.model_validate({"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "llm"},
                                      "spec": {"image": "i", "runPolicy": {"backoffLimit": 5}}})  # fmt: skip
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    operator = recovery.decide(recovery.GangFailure((failure,), {0: "node-a"}), job.spec.run_policy, recovery.Counters(), now)
    local = recovery.decide(local_failures([message.read_text()], 1, 0), job.spec.run_policy, recovery.Counters(), now)
    for decision in (operator, local):
        assert decision.action == recovery.FAIL and decision.verdict == contract.VERDICT_USER_ERROR, decision
        assert "CheckpointMismatch" in decision.message and "layers.2." in decision.message and decision.counters.job_restarts == 0
    assert operator.message == local.message  # one decision, one sentence


def _resume_into_tiny(location: Path) -> list[str]:
    lines: list[str] = []
    model = Transformer(PRESETS["tiny"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = Checkpointer([TierConfig("persistent", str(location), 1, 2)], rank=0, world_size=1, local_world_size=1, distributed=False, layout="single", log=lines.append)
    with pytest.raises(CheckpointMismatch) as err:
        loader.load_latest(model, optimizer, {"step": 0})
    return [str(err.value), *lines]


def test_a_checkpoint_of_a_deeper_model_is_refused_not_loaded_in_part(tmp_path: Path) -> None:
    """DCP alone would load the first 4 of 6 layers and ignore the rest."""
    write_checkpoint(tmp_path / "ckpt", n_layers=6)
    text = _resume_into_tiny(tmp_path / "ckpt")[0]
    assert "the checkpoint holds layers.4." in text and "which this model does not have (and " in text


def test_model_mismatch_names_the_first_tensor_that_differs() -> None:
    model = {"emb": (256, 8), "layers.0.w": (8, 8), "layers.1.w": (8, 8)}
    assert model_mismatch(model, dict(model)) == ""
    assert model_mismatch(model, {"emb": (256, 8), "layers.0.w": (8, 8)}) == "layers.1.w is not in the checkpoint"
    assert model_mismatch(model, {**model, "layers.2.w": (8, 8), "layers.3.w": (8, 8)}) == "the checkpoint holds layers.2.w, which this model does not have (and 1 more such tensors)"
    assert model_mismatch(model, {"emb": (256, 16), "layers.0.w": (16, 16)}) == "emb is [256, 16] in the checkpoint but [256, 8] in this model (and 1 more tensors differ in shape)"


class _Raising:
    """A stand-in Trainer whose ``train`` raises ``error``."""

    error: BaseException = RuntimeError()

    def __init__(self, config: object) -> None:
        self.health = type("H", (), {"shared_hang": staticmethod(lambda: None)})()

    def train(self) -> None:
        raise self.error

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "error, reason, text",
    [
        (CheckpointException("CheckpointException ranks:dict_keys([0])", {0: (RuntimeError("Missing key in checkpoint state_dict: model.x"), None)}), "CheckpointException", "Missing key in checkpoint state_dict: model.x"),
        (KeyboardInterrupt(), "KeyboardInterrupt", "KeyboardInterrupt with no message"),
        (SystemExit(3), "SystemExit", "3"),
    ],
)
def test_base_exceptions_that_end_the_trainer_leave_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, reason: str, text: str) -> None:
    import railtrain.trainer.__main__ as entry

    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(log))
    monkeypatch.setattr(entry, "Trainer", type("T", (_Raising,), {"error": error}))
    with pytest.raises(type(error)), contextlib.redirect_stderr(io.StringIO()):
        entry.main([*COMMON, "--steps", "5"])
    verdict = contract.parse_termination_message(log.read_text())
    assert verdict is not None and (verdict["verdict"], verdict["reason"]) == (contract.VERDICT_RETRYABLE, reason)
    assert text in verdict["message"]


def test_a_base_exception_while_building_the_trainer_leaves_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import railtrain.trainer.__main__ as entry

    class Failing:
        def __init__(self, config: object) -> None:
            raise CheckpointException("CheckpointException ranks:dict_keys([1])", {})

    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(log))
    monkeypatch.setattr(entry, "Trainer", Failing)
    with pytest.raises(CheckpointException):
        entry.main([*COMMON, "--steps", "5"])
    verdict = contract.parse_termination_message(log.read_text())
    assert verdict is not None and (verdict["verdict"], verdict["reason"]) == (contract.VERDICT_RETRYABLE, "CheckpointException")
