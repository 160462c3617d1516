"""Context parallel (ring attention): the chunk layout, the sampler's chunks, and parity with one process on real gloo processes.

The parity test runs ``tests/trainer/cpkit.py`` once under ``torchrun`` with 4
processes: every layout with ``context > 1`` that fits 4 processes (context 4;
DDP × context 2; FSDP2 × context 2; context 2 × tensor 2) trains 20 float32
steps of the ``tiny`` preset, and rank 0 also trains them alone. The
checkpoint test changes the context degree across a resume through the real
entry point (FSDP2 × CP 2 → one process → CP 4). Two to five minutes on 2 CPU
cores (2 min 13 s at load average ~10, 4 min 38 s at ~24).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from railtrain.crds.parallel import Degrees
from railtrain.trainer.context_parallel import shard_positions, shard_sequence
from railtrain.trainer.data import ByteCorpus, WindowSampler
from railtrain.trainer.parallel import ParallelDims, check_model_fits, resolve_dims
from railtrain.trainer.presets import PRESETS
from tests.trainer import cpkit
from tests.trainer.test_trainer_training import _clean_env, run_in_process, run_torchrun
from tests.trainer.tierkit import RUN_TIMEOUT_S, max_diff

# Observed after 20 steps (torch 2.15, gloo): losses within 7e-6 of one process (context 4; 2e-6 or less for
# the others); step-1 gradients within 5e-8 (the same parameters, only the order of float32 sums differs).
# Later gradients drift further (1.5e-5 at step 20 with context 4, against gradients up to 0.06) because
# 19 AdamW updates of slightly different gradients leave slightly different parameters; that is rounding, not error.
LOSS_TOL = 1e-5
GRAD_TOL = 1e-5


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_chunks_cover_the_sequence_once_and_balance_causal_work(cp: int) -> None:
    seq = 2 * cp * 5
    held = [shard_positions(seq, cp, r) for r in range(cp)]
    assert sorted(torch.cat(held).tolist()) == list(range(seq))
    assert held[0][:5].tolist() == list(range(5)) and held[0][5:].tolist() == list(range(seq - 5, seq))  # chunks 0 and 2N-1
    # Causal work of a rank: the keys each of its queries sees (position p sees p + 1 keys). Equal on every rank.
    work = [int((h + 1).sum()) for h in held]
    assert len(set(work)) == 1


def test_chunk_layout_refuses_a_sequence_it_cannot_split() -> None:
    with pytest.raises(ValueError, match="--seq-len 12 must be a multiple of 2 x the context-parallel degree 4"):
        shard_positions(12, 4, 0)
    with pytest.raises(ValueError, match="--seq-len 64 must be a multiple of 2 x --cp 2 x --tp 3 = 12"):
        check_model_fits(ParallelDims(Degrees(tensor=3, context=2), 6), PRESETS["tiny"], 64, 8, 1, 1)


def test_sampler_gives_each_context_rank_its_chunks_of_the_same_windows() -> None:
    corpus = ByteCorpus(torch.arange(10_000, dtype=torch.int64).remainder(251).to(torch.uint8), ("synthetic",))
    whole = WindowSampler(corpus, 32, 8, seed=3, dp_rank=1, dp_degree=2)
    x, y = whole.batch(5)
    for c in range(4):
        part = WindowSampler(corpus, 32, 8, seed=3, dp_rank=1, dp_degree=2, cp_rank=c, cp_degree=4)
        px, py = part.batch(5)
        assert px.shape == (4, 8)
        assert torch.equal(px, shard_sequence(x, 4, c)) and torch.equal(py, shard_sequence(y, 4, c))


def test_context_degree_from_flags_and_pod() -> None:
    dims = resolve_dims("fsdp", {}, 8, 4, flag_tp=2, flag_cp=2)
    assert dims.degrees == Degrees(data=1, fsdp=2, tensor=2, pipeline=1, context=2) and dims.loss_ranks == 4
    assert dims.describe() == "fsdp data=1 fsdp=2 tensor=2 pipeline=1 context=2 world=8"
    assert resolve_dims(None, {"data": 2, "fsdp": 1, "tensor": 1, "pipeline": 1, "context": 2}, 4, 4).cp == 2
    with pytest.raises(ValueError, match="--cp: context × tensor = 8 must divide the processes per node \\(4\\)"):
        resolve_dims(None, {}, 8, 4, flag_cp=8)
    with pytest.raises(ValueError, match="--cp: context=2 with pipeline=2 is not supported"):
        resolve_dims(None, {}, 4, 4, flag_pp=2, flag_cp=2)
    with pytest.raises(ValueError, match="RAILTRAIN_PARALLELISM context × tensor = 4 must divide the processes per node \\(2\\)"):
        resolve_dims(None, {"data": 1, "fsdp": 1, "tensor": 1, "pipeline": 1, "context": 4}, 4, 2)


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("cp") / "parity.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(cpkit.WORLD), cpkit.__file__, str(out)]
    proc = subprocess.run(cmd, env=_clean_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-5000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(cpkit.LAYOUTS))
def test_context_parallel_matches_one_process(name: str, parity: dict) -> None:
    ref, run = parity["reference"], parity[name]
    assert run["layout"].endswith(f"context={cpkit.LAYOUTS[name][4]} world=4")
    assert len(run["losses"]) == len(ref["losses"]) == cpkit.STEPS
    assert max(abs(a - b) for a, b in zip(run["losses"], ref["losses"])) < LOSS_TOL
    assert run["unmatched_parameters"] == []
    assert run["grad_max_abs_diff"]["1"] < GRAD_TOL
    assert ref["grad_max_abs"]["1"] > 1e-2  # the gradients compared are not vanishingly small


def test_checkpoint_resumes_across_context_degrees(tmp_path: Path) -> None:
    """FSDP2 × context 2 saves; one process (context 1) resumes and saves; context 4 resumes: DCP reshards each time."""
    ckpt = tmp_path / "ckpt"
    lr = ["--lr", "1e-3", "--checkpoint-dir", str(ckpt), "--checkpoint-interval", "4"]
    single = run_in_process(tmp_path / "single", "--lr", "1e-3", "--steps", "12")
    first = run_torchrun(tmp_path / "cp2", 4, "--parallel", "fsdp", "--cp", "2", *lr, "--steps", "4")
    assert "parallel=fsdp data=1 fsdp=2 tensor=1 pipeline=1 context=2 world=4" in first.stdout
    second = run_in_process(tmp_path / "cp1", *lr, "--steps", "8")
    assert second.rc == 0 and "resumed from step 4" in second.stdout
    third = run_torchrun(tmp_path / "cp4", 4, "--cp", "4", *lr, "--steps", "12")
    assert "parallel=ddp data=1 fsdp=1 tensor=1 pipeline=1 context=4 world=4" in third.stdout and "resumed from step 8" in third.stdout
    losses = {**first.losses, **second.losses, **third.losses}
    assert sorted(losses) == list(range(1, 13))
    assert max_diff(losses, single.losses, range(1, 13)) < 1e-4
