"""A non-finite update is never applied, a non-finite state never saved, the newest good checkpoint never pruned,
and a run that keeps diverging ends with a deterministic ``user-error`` (issue 25, item 1; docs/health.md and
docs/checkpoints.md, "Non-finite updates" / "Only finite states are saved").

The pure parts (the finite check, retention, the numeric rule) run in one process; the input of the issue runs as
two FSDP ranks (gloo, the ``tiny`` preset) with checkpoints every step, keep 2. ``--lr 1e3`` makes step 2's gradient
norm NaN while its loss is still finite (the path the issue describes: the old numeric check then applied step 3's
NaN update and saved it); ``--lr 1e20`` makes step 2's loss NaN as well.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from railtrain.crds import contract
from railtrain.trainer.__main__ import main
from railtrain.trainer.checkpoint import state as checkpoint_state
from railtrain.trainer.checkpoint import Checkpointer, LocalStorage, TierConfig, steps_to_prune
from railtrain.trainer.checkpoint.files import MANIFEST, ShardDir
from railtrain.trainer.config import parse_args
from railtrain.trainer.model import ModelConfig, Transformer
from tests.trainer.health.gang import run_gang
from tests.trainer.health.test_monitor import make_monitor
from tests.trainer.tierkit import COMMON

NON_FINITE_UPDATE = "NonFiniteUpdate"  # contract.REASON_NON_FINITE_UPDATE, spelled out so the test runs against older code too
SMALL = ModelConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64, max_seq_len=16)


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Transformer(SMALL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randint(0, 256, (2, 8))).float().mean().backward()
    optimizer.step()
    return model, optimizer


def _write_manifest(root: Path, step: int, **extra: object) -> None:
    (root / f"step-{step}").mkdir(parents=True)
    (root / f"step-{step}" / MANIFEST).write_text(json.dumps({"format": "railtrain-dcp/1", "step": step, "files": {}, **extra}))


def _checkpoint_is_finite(step_dir: Path, tmp: Path) -> bool:
    """Whether every floating-point tensor of a persistent (DCP) checkpoint is finite, read without a process group."""
    out = tmp / f"{step_dir.parent.name}-{step_dir.name}.pt"
    dcp_to_torch_save(str(step_dir), str(out))
    found: list[torch.Tensor] = []

    def walk(obj: object) -> None:
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(torch.load(out, weights_only=False))
    return bool(found) and all(bool(torch.isfinite(t).all()) for t in found if t.is_floating_point())


# --- the pure parts ---------------------------------------------------------------------------------------------


def test_finite_check_names_the_non_finite_tensors_of_a_state() -> None:
    model, optimizer = _model_and_optimizer()
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    assert checkpoint_state.nonfinite_tensors(state) == []
    with torch.no_grad():
        model.output.weight[3, 1] = math.inf
    next(iter(optimizer.state.values()))["exp_avg_sq"].view(-1)[0] = math.nan
    bad = checkpoint_state.nonfinite_tensors({"model": model.state_dict(), "optim": optimizer.state_dict()})
    assert bad == ["model.output.weight", "optim.state.0.exp_avg_sq"]


@pytest.mark.parametrize(
    "marks, keep, doomed",
    [
        ({1: True, 2: None, 3: None}, 2, []),  # step 1 is the newest known good: kept beyond keep
        ({1: True, 2: True, 3: None}, 2, [1]),  # step 2 is newer and good: step 1 may go
        ({1: True, 2: True, 3: True}, 1, [1, 2]),  # the newest is good and kept anyway
        ({1: None, 2: None, 3: None}, 2, [1]),  # no mark (saved before the check): the old rule
        ({1: True, 2: False, 3: False}, 1, [2]),  # marked not good: never protects itself
    ],
)
def test_retention_never_deletes_the_newest_good_checkpoint(tmp_path: Path, marks: dict[int, bool | None], keep: int, doomed: list[int]) -> None:
    for step, good in marks.items():
        _write_manifest(tmp_path, step, **({} if good is None else {"good": good}))
    assert steps_to_prune(LocalStorage(str(tmp_path)), keep) == doomed


def test_shard_retention_keeps_the_newest_good_shard(tmp_path: Path) -> None:
    shards = ShardDir(str(tmp_path), fsync=False)
    for step, extra in ((1, {"good": True}), (2, {}), (3, {})):
        shards.write_data(step, "rank", 0, b"x")
        shards.write_manifest(step, "rank", 0, {"format": "railtrain-shard/1", "step": step, **extra})
    assert shards.prune("rank", 0, keep=1) == [2]
    assert sorted(shards.entries()[("rank", 0)]) == [1, 3]


def test_a_non_finite_state_is_never_saved_and_the_good_checkpoints_stay(tmp_path: Path) -> None:
    lines: list[str] = []
    tiers = [TierConfig("local", str(tmp_path / "local"), 1, 1), TierConfig("persistent", str(tmp_path / "persistent"), 1, 1)]
    saver = Checkpointer(tiers, rank=0, world_size=1, local_world_size=1, distributed=False, layout="single", log=lines.append, async_save=False)
    model, optimizer = _model_and_optimizer()
    saver.save(1, model, optimizer, {"step": 1}, last_step=9)
    with torch.no_grad():
        model.layers["0"].attention.wq.weight[0, 0] = math.nan
    with pytest.raises(ValueError) as info:
        saver.save(2, model, optimizer, {"step": 2}, last_step=9)
    assert "step 2" in str(info.value) and "NaN or infinite" in str(info.value) and "model.layers.0.attention.wq.weight" in str(info.value)
    saver.wait()
    assert sorted(p.name for p in (tmp_path / "persistent").iterdir()) == ["step-1"]
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["step-1"]
    assert json.loads((tmp_path / "persistent" / "step-1" / MANIFEST).read_text())["good"] is True
    saver.close()


def test_resume_skips_a_non_finite_checkpoint_saved_by_an_older_version(tmp_path: Path) -> None:
    """Checkpoints written before the save check may hold NaN: resume takes the newest finite one."""
    model, optimizer = _model_and_optimizer()
    saver = Checkpointer([TierConfig("persistent", str(tmp_path), 1, 0)], rank=0, world_size=1, local_world_size=1, distributed=False, layout="single", async_save=False)
    saver.save(1, model, optimizer, {"step": 1}, last_step=9)
    good = {k: v.clone() for k, v in model.state_dict().items()}
    saver.save(2, model, optimizer, {"step": 2}, last_step=9)
    # step 3 as an older trainer wrote it: NaN parameters, no "good" mark
    with torch.no_grad():
        model.output.weight.fill_(math.nan)
    saver._refuse_nonfinite = lambda *a: None  # type: ignore[method-assign]  # write it as the old save did
    saver.save(3, model, optimizer, {"step": 3}, last_step=9)
    for step in (1, 2, 3):
        manifest = json.loads((tmp_path / f"step-{step}" / MANIFEST).read_text())
        manifest.pop("good", None)
        (tmp_path / f"step-{step}" / MANIFEST).write_text(json.dumps(manifest))
    lines: list[str] = []
    fresh, fresh_opt = _model_and_optimizer()
    loader = Checkpointer([TierConfig("persistent", str(tmp_path), 1, 0)], rank=0, world_size=1, local_world_size=1, distributed=False, layout="single", log=lines.append)
    assert loader.load_latest(fresh, fresh_opt, {"step": 0}) == {"step": 2}
    assert any("rejected persistent step 3" in line and "NaN or infinite" in line for line in lines), lines
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in good.items())


def test_two_non_finite_steps_in_a_row_end_the_run_with_a_non_retryable_verdict() -> None:
    monitor, lines = make_monitor()
    finite = torch.tensor(5.5)
    assert monitor.check_numeric(2, 5.5, math.nan, finite, lambda: finite.clone()) is True  # once: maybe one bad batch
    with pytest.raises(Exception) as info:
        monitor.check_numeric(3, 5.5, math.nan, finite, lambda: finite.clone())  # again: the model diverged
    v = info.value
    assert (v.verdict, v.reason, v.step, v.ranks) == (contract.VERDICT_USER_ERROR, NON_FINITE_UPDATE, 3, [])  # type: ignore[attr-defined]
    assert "no update was applied" in v.message  # type: ignore[attr-defined]
    contract.format_termination_message(v.verdict, v.reason, v.message, **v.details())  # type: ignore[attr-defined]


def test_a_finite_spike_right_after_a_skip_is_still_applied() -> None:
    monitor, lines = make_monitor()
    for step in range(1, 30):
        monitor.check_numeric(step, 4.0, 1.0, torch.tensor(4.0), lambda: pytest.fail("no re-execution"))
    spike = torch.tensor(400.0)
    assert monitor.check_numeric(30, 400.0, 1.0, spike, lambda: spike.clone()) is True
    assert monitor.check_numeric(31, 400.0, 1.0, spike, lambda: spike.clone()) is False
    assert "not the data; not skipping" in lines[-1]


def test_without_health_checks_a_non_finite_gradient_norm_is_never_applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One process, health checks off: step 2's gradient norm is NaN with a finite loss; no update, no checkpoint of it."""
    term = tmp_path / "termination-log"
    term.write_text("")
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(term))
    ckpt = tmp_path / "ckpt"
    flags = ["--no-health", "--lr", "1e3", "--warmup-steps", "0", "--checkpoint-dir", str(ckpt), "--checkpoint-interval", "1", "--checkpoint-keep", "2"]
    threads = torch.get_num_threads()
    try:
        with pytest.raises(FloatingPointError) as info, contextlib.redirect_stdout(io.StringIO()):
            main([*COMMON, "--steps", "4", *flags])
    finally:
        torch.set_num_threads(threads)
    assert "at step 2" in str(info.value) and "not applied" in str(info.value)
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-1"]
    assert _checkpoint_is_finite(ckpt / "step-1", tmp_path)
    verdict = contract.parse_termination_message(term.read_text())
    assert verdict is not None and (verdict["verdict"], verdict["reason"]) == (contract.VERDICT_RETRYABLE, "LossNotFinite")


def test_a_learning_rate_beyond_float32_is_refused_up_front() -> None:
    """``--lr 1e39`` made AdamW raise a RuntimeError at step 1, a ``retryable`` crash every restart repeated."""
    with pytest.raises(ValueError, match=r"--lr must be > 0 and at most 3\.403e\+38"):
        parse_args(["--data", "pkg://email/*.py", "--lr", "1e39"])


# --- the input: two FSDP ranks --------------------------------------------------------------------------


def _diverging_gang(workdir: Path, ckpt: Path, lr: str):
    args = ["--parallel", "fsdp", "--steps", "4", "--lr", lr, "--warmup-steps", "0",
            "--checkpoint-dir", str(ckpt), "--checkpoint-interval", "1", "--checkpoint-keep", "2"]  # fmt: skip
    return run_gang(workdir, 2, *args, health={"hang_floor_s": 60.0})


def _assert_diverged(run, step: int) -> contract.Verdict:
    found = [v for v in run.verdicts if v is not None]
    assert len(found) == 2 and found[0] == found[1], f"rcs {run.rcs}: {found}\n{run.all()}"
    v = found[0]
    assert (v["verdict"], v["reason"], v["step"]) == (contract.VERDICT_USER_ERROR, NON_FINITE_UPDATE, step), f"{v}\n{run.all()}"
    assert f"step {step}:" in v["message"] and "diverged" in v["message"]
    assert all(rc != 0 for rc in run.rcs)
    return v


@pytest.mark.parametrize("lr", ["1e3", "1e20"])
def test_diverging_fsdp_run_ends_user_error_and_keeps_only_good_checkpoints(tmp_path: Path, lr: str) -> None:
    """Step 2's gradient norm is NaN (with ``1e3`` the loss is still finite): skipped once as a possible bad batch; step 3
    again: the run ends ``user-error NonFiniteUpdate`` at step 3 on both ranks, nothing non-finite was applied or saved, and
    keep 2 left the last finite steps (1 and 2, marked good). Before: step 3's NaN update was applied and saved, keep 2
    deleted steps 1 and 2, and the verdict was ``retryable`` (every restart resumed NaN) or the run even ended "done"."""
    ckpt = tmp_path / "ckpt"
    run = _diverging_gang(tmp_path / "run", ckpt, lr)
    _assert_diverged(run, 3)
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-1", "step-2"], run.all()
    for step in (1, 2):
        assert json.loads((ckpt / f"step-{step}" / MANIFEST).read_text()).get("good") is True
        assert _checkpoint_is_finite(ckpt / f"step-{step}", tmp_path)
    if lr == "1e20":
        return
    # The restart (what a retry or a resubmit does) resumes the newest good checkpoint and reaches the same verdict.
    again = _diverging_gang(tmp_path / "again", ckpt, lr)
    assert "resumed from step 2" in again.logs[0], again.all()
    _assert_diverged(again, 4)
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-2", "step-3"], again.all()
    assert all(_checkpoint_is_finite(ckpt / f"step-{s}", tmp_path) for s in (2, 3))
