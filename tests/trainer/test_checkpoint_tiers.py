"""Checkpoint tiers end to end: real trainers, real torch.distributed (gloo), simulated nodes on this host.

One ``base`` run (2 nodes x 1 process, FSDP2, 14 steps) writes all three
tiers: memory every 4 steps (keep 2, a copy on the other node), local every 4
(keep 3), persistent every 6 (keep 2), plus the last step everywhere. Each
scenario copies its tiers without step 14 (as if the job had died after step
13), breaks something the way the real world would, resumes, and checks both
what the trainer chose (its log) and that the resumed run reproduces the base
run's losses exactly (same layout) or within float-reordering tolerance
(another world size). The whole file takes about a minute on 2 CPU cores.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest
import torch

from railtrain.crds import contract
from railtrain.trainer.__main__ import main
from railtrain.trainer.checkpoint import checksum
from railtrain.trainer.checkpoint import MANIFEST
from tests.trainer.tierkit import COMMON, Gang, Layout, Run, Tiers, free_port, max_diff, pod_template, read_losses, run_gang, scrape

BASE_TIERS = Tiers(memory=(4, 2), local=(4, 3), persistent=(6, 2))
STEPS = 14
RESUME_TOL = 1e-6  # same layout, same ops: the resumed run repeats the base run
RESHARD_TOL = 2e-3  # 2 FSDP ranks vs 1 process: float reduction order only (see test_trainer_training.py)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiers")


@pytest.fixture(scope="module")
def base(workdir: Path) -> Iterator[tuple[Layout, Run]]:
    layout = Layout.create(workdir / "base")
    try:
        # --no-checkpoint-cleanup: the scenarios start from what a run that died after step 13 leaves in every tier
        run = run_gang(workdir / "base", pod_template(layout, BASE_TIERS, 2, 1), layout, "--steps", str(STEPS), "--no-checkpoint-cleanup")
        yield layout, run
    finally:
        layout.remove()


@pytest.fixture
def scenario(workdir: Path, base: tuple[Layout, Run], request: pytest.FixtureRequest) -> Iterator[Layout]:
    """The base run's tiers as they were after step 12: step 14 never written."""
    layout = base[0].copy_to(workdir / request.node.name, skip_steps=(STEPS,))
    try:
        yield layout
    finally:
        layout.remove()


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_every_tier_is_written_with_checksummed_manifests(base: tuple[Layout, Run]) -> None:
    layout, run = base
    assert "memory(" in run.stdout and "copy on the next node" in run.stdout and "async" in run.stdout
    for node, rank in ((0, 0), (1, 1)):
        other = 1 - rank
        assert sorted(p.name for p in layout.memory(node).iterdir()) == ["step-12", "step-14"]  # keep 2
        assert sorted(p.name for p in (layout.memory(node) / "step-12").iterdir()) == sorted(
            [f"rank-{rank}.pt", f"rank-{rank}.json", f"peer-{other}.pt", f"peer-{other}.json"]
        )
        assert sorted(p.name for p in layout.local(node).iterdir()) == ["step-12", "step-14", "step-8"]  # keep 3
        shard = layout.local(node) / "step-12"
        manifest = json.loads((shard / f"rank-{rank}.json").read_text())
        assert manifest["xxh3_128"] == checksum.of_bytes((shard / f"rank-{rank}.pt").read_bytes())
        assert (manifest["step"], manifest["rank"], manifest["world_size"], manifest["train"]["step"]) == (12, rank, 2, 12)
    # The copy of rank 1 kept on node 0 is byte for byte rank 1's own shard.
    assert (layout.memory(0) / "step-12" / "peer-1.pt").read_bytes() == (layout.memory(1) / "step-12" / "rank-1.pt").read_bytes()
    assert sorted(p.name for p in layout.persistent.iterdir()) == ["step-12", "step-14"]  # 6 was pruned (keep 2)
    manifest = json.loads((layout.persistent / "step-12" / MANIFEST).read_text())
    on_disk = {p.name for p in (layout.persistent / "step-12").iterdir()} - {MANIFEST}
    assert set(manifest["files"]) == on_disk and ".metadata" in on_disk
    for name, entry in manifest["files"].items():
        assert entry["xxh3_128"] == checksum.of_bytes((layout.persistent / "step-12" / name).read_bytes())


def test_memory_tier_outlives_the_trainer_and_a_peer_copy_restores_a_lost_node(workdir: Path, base: tuple[Layout, Run], scenario: Layout) -> None:
    for path in sorted(scenario.memory(1).rglob("*"), reverse=True):  # node 1 was replaced: its RAM is empty
        path.unlink() if path.is_file() else path.rmdir()
    run = run_gang(workdir / "lost-node", pod_template(scenario, BASE_TIERS, 2, 1), scenario, "--steps", str(STEPS), "--no-checkpoint-cleanup")
    assert "checkpoint: loaded step 12 from memory" in run.stdout, run.stdout
    assert "rank 1's shard came from the copy on rank 0" in run.stdout
    assert max_diff(run.losses, base[1].losses, range(13, STEPS + 1)) <= RESUME_TOL
    # Node 1 has its own shard again (written back on restore), next to newer saves.
    assert (scenario.memory(1) / "step-12" / "rank-1.json").is_file()


def test_memory_tier_restores_a_gang_whose_ranks_moved_to_other_nodes(workdir: Path, base: tuple[Layout, Run], scenario: Layout) -> None:
    """Rank 0's node was lost, and the restarted gang runs rank 0 on the node that was rank 1's and rank 1 on a
    fresh node (as a kind cluster placed it): rank 0 finds its shard in the copy on its own node, rank 1 gets its
    shard from the node rank 0 now runs on."""
    for tier in (scenario.memory, scenario.local):
        shutil.rmtree(tier(0))
        tier(1).rename(tier(0))
        tier(1).mkdir()
    run = run_gang(workdir / "moved", pod_template(scenario, BASE_TIERS, 2, 1), scenario, "--steps", str(STEPS), "--no-checkpoint-cleanup")
    assert "checkpoint: loaded step 12 from memory" in run.stdout, run.stdout
    assert "rank 0's shard came from the copy on its own node" in run.stdout
    assert "rank 1's shard came from the copy on rank 0" in run.stdout
    assert max_diff(run.losses, base[1].losses, range(13, STEPS + 1)) <= RESUME_TOL
    # Both nodes hold their rank's own shard again.
    assert (scenario.memory(0) / "step-12" / "rank-0.json").is_file() and (scenario.memory(1) / "step-12" / "rank-1.json").is_file()


def test_corrupt_local_shard_falls_back_to_the_persistent_copy_of_the_same_step(workdir: Path, base: tuple[Layout, Run], scenario: Layout) -> None:
    _corrupt(scenario.local(1) / "step-12" / "rank-1.pt")
    tiers = Tiers(local=BASE_TIERS.local, persistent=BASE_TIERS.persistent)  # this gang's nodes have no memory tier
    run = run_gang(workdir / "corrupt-local", pod_template(scenario, tiers, 2, 1), scenario, "--steps", str(STEPS))
    assert "rejected local step 12: rank 1: rank-1.pt does not match its xxh3_128 (corrupt)" in run.stdout, run.stdout
    assert "checkpoint: loaded step 12 from persistent (after rejecting local step 12)" in run.stdout
    assert max_diff(run.losses, base[1].losses, range(13, STEPS + 1)) <= RESUME_TOL


def test_missing_manifest_and_corrupt_persistent_file_fall_back_to_an_older_step(workdir: Path, base: tuple[Layout, Run], scenario: Layout) -> None:
    (scenario.local(1) / "step-12" / "rank-1.json").unlink()  # rank 1's save of step 12 never finished
    _corrupt(next((scenario.persistent / "step-12").glob("__1_*.distcp")))
    tiers = Tiers(local=BASE_TIERS.local, persistent=BASE_TIERS.persistent)
    run = run_gang(workdir / "older", pod_template(scenario, tiers, 2, 1), scenario, "--steps", str(STEPS))
    assert "ignored local step 12: no manifest for rank(s) 1" in run.stdout, run.stdout
    assert "rejected persistent step 12: __1_" in run.stdout and "does not match its xxh3_128 (corrupt)" in run.stdout
    assert "checkpoint: loaded step 8 from local (after rejecting persistent step 12)" in run.stdout
    assert sorted(run.losses) == list(range(9, STEPS + 1))
    assert max_diff(run.losses, base[1].losses, range(9, STEPS + 1)) <= RESUME_TOL


def test_resume_at_another_world_size_reshards_the_persistent_tier(workdir: Path, base: tuple[Layout, Run], scenario: Layout) -> None:
    flags = ["--checkpoint-dir", str(scenario.persistent), "--checkpoint-local-dir", str(scenario.local(0)), "--checkpoint-interval", "6"]
    metrics = workdir / "reshard.jsonl"
    out = io.StringIO()
    threads = torch.get_num_threads()
    try:
        with contextlib.redirect_stdout(out):
            assert main([*COMMON, "--steps", str(STEPS), "--metrics-file", str(metrics), *flags]) == 0
    finally:
        torch.set_num_threads(threads)
    text = out.getvalue()
    assert "ignored local step 12: saved by 2 ranks" in text and "only the persistent tier reshards" in text, text
    assert "resumed from step 12 (tier persistent, newest complete step)" in text
    losses = read_losses(metrics)
    assert sorted(losses) == [13, 14]
    assert max_diff(losses, base[1].losses, range(13, STEPS + 1)) <= RESHARD_TOL


def test_sigkill_during_an_async_save_resumes_from_the_last_complete_checkpoint(workdir: Path) -> None:
    """One node of 2 processes; the save of step 8 is held before its manifests (fault injection), training goes on
    to step 11 meanwhile (the save is asynchronous), the metrics endpoint is scraped, and the node is SIGKILLed."""
    layout = Layout.create(workdir / "kill")
    try:
        pod = pod_template(layout, Tiers(local=(4, 3)), 1, 2)
        port = free_port()
        pod = replace(pod, metrics_port=port)
        gang = Gang(workdir / "kill", pod, layout, ["--steps", "12", "--peak-tflops", "1"], {contract.ENV_FAULT_HOLD_CHECKPOINT_STEP: "8"})
        try:
            gang.wait_for("step=11 ")
            metrics = scrape(port)
        finally:
            gang.kill()
        first = read_losses(gang.metrics)
        assert metrics["railtrain_step"] >= 11 and metrics['railtrain_checkpoint_saves_total{tier="local"}'] == 1.0
        assert metrics['railtrain_checkpoint_last_save_bytes{tier="local"}'] > 1e6 and 0 < metrics["railtrain_mfu"] < 1
        shard_dir = layout.local(0) / "step-8"
        assert sorted(p.name for p in shard_dir.iterdir()) == ["rank-0.pt", "rank-1.pt"]  # data, no manifests
        resumed = Gang(workdir / "kill", replace(pod, rdzv_port=free_port(), metrics_port=0), layout, ["--steps", "12", "--no-checkpoint-cleanup"]).wait()
        assert resumed.rcs == [0], resumed.stdout
        assert "ignored local step 8: no manifest for rank(s) 0, 1" in resumed.stdout, resumed.stdout
        assert "resumed from step 4 (tier local, newest complete step)" in resumed.stdout
        assert max_diff(resumed.losses, first, range(5, 12)) <= RESUME_TOL
        assert (shard_dir / "rank-0.json").is_file()  # step 8 written again, completely
    finally:
        layout.remove()
