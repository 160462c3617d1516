"""Checkpoint tiers in one process: files, manifests, retention, fallback, metrics, verdicts.

The multi-process behaviour (peer copies across nodes, FSDP shards, SIGKILL)
is in ``test_checkpoint_tiers.py``; these tests take a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from railtrain.crds import contract
from railtrain.trainer.__main__ import main, verdict_of
from railtrain.trainer.checkpoint import checksum
from railtrain.trainer.checkpoint import Checkpointer, TierConfig
from railtrain.trainer.checkpoint.files import MANIFEST, FsspecStorage, LocalStorage, ShardDir, open_storage
from railtrain.trainer.checkpoint.retention import prune_plan
from railtrain.trainer.checkpoint.state import ShardMismatch, deserialize, rebuild, serialize
from railtrain.trainer.checkpoint.comm import Peers
from railtrain.trainer.config import parse_args
from railtrain.trainer.metrics import mfu
from railtrain.trainer.model import ModelConfig, Transformer
from railtrain.trainer.train import Trainer
from tests.trainer.tierkit import COMMON, free_port, scrape

SMALL = ModelConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_seq_len=64)


@pytest.mark.parametrize(
    "series, keep, doomed",
    [
        ({}, 2, []),
        ({4: False}, 2, []),
        ({4: True, 8: True, 12: False}, 2, []),  # 12 may still be in flight
        ({4: True, 8: True, 12: True}, 2, [4]),
        ({4: True, 6: False, 8: True}, 2, [6]),  # a leftover of a save cut short
        ({4: True, 8: True, 12: True}, 0, []),  # 0 keeps every complete one
        ({4: True, 8: True, 12: True}, 1, [4, 8]),
    ],
)
def test_prune_plan(series: dict[int, bool], keep: int, doomed: list[int]) -> None:
    assert prune_plan(series, keep) == doomed


def test_shard_dir_writes_data_before_manifest(tmp_path: Path) -> None:
    shards = ShardDir(str(tmp_path), fsync=True)
    shards.write_data(4, "rank", 3, b"abc")
    assert shards.entries() == {("rank", 3): {4: False}} and shards.read_manifest(4, "rank", 3) is None
    shards.write_manifest(4, "rank", 3, {"format": "railtrain-shard/1", "step": 4})
    shards.write_data(8, "peer", 1, b"xyz")
    shards.write_manifest(8, "peer", 1, {"format": "railtrain-shard/1", "step": 8})
    assert shards.entries() == {("rank", 3): {4: True}, ("peer", 1): {8: True}}
    (tmp_path / "step-8" / "peer-1.json").write_text("{ torn")
    assert shards.read_manifest(8, "peer", 1) is None  # a torn manifest is no manifest
    shards.write_data(4, "rank", 3, b"new")  # rewriting a shard drops its old manifest first
    assert shards.read_manifest(4, "rank", 3) is None and shards.read_data(4, "rank", 3) == b"new"
    shards.remove(4, "rank", 3)
    assert not (tmp_path / "step-4").exists()


def test_storages(tmp_path: Path) -> None:
    assert isinstance(open_storage(f"file://{tmp_path}"), LocalStorage) and isinstance(open_storage("memory://ck"), FsspecStorage)
    with pytest.raises(ValueError, match="fsspec cannot open nosuchproto://"):
        open_storage("nosuchproto://bucket/x")
    local = LocalStorage(str(tmp_path))
    (tmp_path / "step-5").mkdir()
    (tmp_path / "step-x").mkdir()
    local.mark_complete(5, {"format": "railtrain-dcp/1", "step": 5})
    assert local.list_steps() == [5] and local.read_manifest(5) == {"format": "railtrain-dcp/1", "step": 5}
    local.remove(5)
    assert local.list_steps() == []


def test_peers_pair_the_same_local_rank_on_the_next_node() -> None:
    peers = Peers(world_size=8, local_world_size=4)
    assert [peers.dst(r) for r in range(8)] == [4, 5, 6, 7, 0, 1, 2, 3]
    assert all(peers.src(peers.dst(r)) == r for r in range(8)) and peers.nodes == 2


def test_rebuild_names_what_does_not_fit() -> None:
    template = {"model": {"w": torch.zeros(2, 3)}, "train": {"step": torch.tensor(0)}}
    loaded = deserialize(serialize({"model": {"w": torch.ones(2, 3)}, "train": {"step": torch.tensor(7)}}))
    out = rebuild(template, loaded)
    assert torch.equal(out["model"]["w"], torch.ones(2, 3)) and template["model"]["w"].sum() == 0
    with pytest.raises(ShardMismatch, match=r"model.w: saved \(3, 2\)"):
        rebuild(template, {"model": {"w": torch.ones(3, 2)}, "train": {"step": torch.tensor(1)}})
    with pytest.raises(ShardMismatch, match="model: keys differ"):
        rebuild(template, {"model": {"v": torch.ones(2, 3)}, "train": {"step": torch.tensor(1)}})


def _model_and_optimizer(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = Transformer(SMALL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randint(0, 256, (2, 8))).float().mean().backward()
    optimizer.step()
    return model, optimizer


def _checkpointer(tmp_path: Path, lines: list[str], persistent: str) -> Checkpointer:
    tiers = [TierConfig("memory", str(tmp_path / "mem"), 2, 1), TierConfig("local", str(tmp_path / "local"), 2, 2), TierConfig("persistent", persistent, 4, 1)]
    return Checkpointer(tiers, rank=0, world_size=1, local_world_size=1, distributed=False, layout="single", log=lines.append)


def _save(tmp_path: Path, lines: list[str], persistent: str, steps: tuple[int, ...], last_step: int) -> torch.nn.Module:
    """Save the seed-0 model and optimizer at each of ``steps`` to every tier, wait for the saves; return the model."""
    saver = _checkpointer(tmp_path, lines, persistent)
    model, optimizer = _model_and_optimizer(0)
    for step in steps:
        saver.save(step, model, optimizer, {"step": step}, last_step=last_step)
    saver.wait()
    return model


def _resume(tmp_path: Path, lines: list[str], persistent: str, clear_optimizer: bool = False) -> tuple[dict[str, int] | None, torch.nn.Module, torch.optim.Optimizer]:
    """Load the newest valid checkpoint into a seed-1 model and optimizer (with ``clear_optimizer``, an optimizer
    without state, as before its first step); return the train state loaded (None: nothing usable), the model and the optimizer."""
    fresh, fresh_opt = _model_and_optimizer(1)
    if clear_optimizer:
        fresh_opt.state.clear()
    return _checkpointer(tmp_path, lines, persistent).load_latest(fresh, fresh_opt, {"step": 0}), fresh, fresh_opt


def test_fastest_valid_copy_wins_and_corruption_falls_back(tmp_path: Path) -> None:
    lines: list[str] = []
    model = _save(tmp_path, lines, "memory://railtrain-unit/ck", (2, 4), last_step=4)
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["step-2", "step-4"]
    assert sorted(p.name for p in (tmp_path / "mem").iterdir()) == ["step-4"]  # memory keeps 1
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    train, fresh, _ = _resume(tmp_path, lines, "memory://railtrain-unit/ck")
    assert train == {"step": 4} and "loaded step 4 from memory (newest complete step)" in lines[-1]
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in expected.items())
    shard = tmp_path / "mem" / "step-4" / "rank-0.pt"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated
    train, fresh, _ = _resume(tmp_path, lines, "memory://railtrain-unit/ck")
    assert train == {"step": 4} and "loaded step 4 from local (after rejecting memory step 4)" in lines[-1]
    assert any("rejected memory step 4: rank 0: rank-0.pt is " in line and "(truncated or corrupt)" in line for line in lines)
    (tmp_path / "local" / "step-4" / "rank-0.json").unlink()
    train, fresh, _ = _resume(tmp_path, lines, "memory://railtrain-unit/ck")
    assert train == {"step": 4} and "from persistent" in lines[-1]  # memory:// through fsspec
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in expected.items())


def test_checksums_verify_and_name_what_differs() -> None:
    data = bytes(range(256)) * 4096
    digest = checksum.of_bytes(data)
    assert digest == checksum.of_stream(io.BytesIO(data))[0] and len(digest) == 32  # 128 bits
    good = checksum.entry(digest, len(data))
    assert good == {"xxh3_128": digest, "bytes": len(data)}
    assert checksum.verify_bytes(good, data) == "" and checksum.verify_stream(good, io.BytesIO(data)) == ""
    flipped = bytearray(data)
    flipped[12345] ^= 0x10
    assert checksum.verify_bytes(good, flipped) == "does not match its xxh3_128 (corrupt)"
    assert checksum.verify_bytes(good, data[:-1]) == f"is {len(data) - 1} bytes, its manifest says {len(data)} (truncated or corrupt)"
    assert checksum.verify_bytes({"bytes": len(data)}, data) == "has no checksum in its manifest"
    old = {"sha256": checksum.of_bytes(data, "sha256"), "bytes": len(data)}  # what railtrain wrote before xxh3
    assert checksum.verify_bytes(old, data) == "" and checksum.verify_bytes(old, flipped) == "does not match its sha256 (corrupt)"
    with pytest.raises(ValueError, match="unknown checksum 'md5'"):
        checksum.new("md5")


def test_checkpoints_with_sha256_manifests_still_load(tmp_path: Path) -> None:
    """Manifests written before the switch to xxh3-128 record sha256; every tier still verifies and loads them."""
    lines: list[str] = []
    model = _save(tmp_path, lines, str(tmp_path / "persistent"), (4,), last_step=4)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    def to_sha256(entry: dict, path: Path) -> None:
        del entry["xxh3_128"]
        entry["sha256"] = checksum.of_bytes(path.read_bytes(), "sha256")

    for tier in ("mem", "local"):
        manifest_path = tmp_path / tier / "step-4" / "rank-0.json"
        manifest = json.loads(manifest_path.read_text())
        to_sha256(manifest, manifest_path.with_suffix(".pt"))
        manifest_path.write_text(json.dumps(manifest))
    step_dir = tmp_path / "persistent" / "step-4"
    manifest = json.loads((step_dir / MANIFEST).read_text())
    for name, entry in manifest["files"].items():
        to_sha256(entry, step_dir / name)
    (step_dir / MANIFEST).write_text(json.dumps(manifest))
    for drop in ("mem", "local", None):
        train, fresh, _ = _resume(tmp_path, lines, str(tmp_path / "persistent"))
        assert train == {"step": 4}, lines
        assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in expected.items())
        tier_name = {"mem": "memory", "local": "local", None: "persistent"}[drop]
        assert f"loaded step 4 from {tier_name}" in lines[-1], lines
        if drop:
            (tmp_path / drop / "step-4" / "rank-0.json").unlink()


def test_nothing_usable_leaves_a_fresh_optimizer(tmp_path: Path) -> None:
    lines: list[str] = []
    _save(tmp_path, lines, str(tmp_path / "persistent"), (2,), last_step=2)
    for path in tmp_path.rglob("*.pt"):
        path.write_bytes(b"garbage")
    for path in tmp_path.rglob("*.distcp"):
        path.write_bytes(b"garbage")
    train, _, fresh_opt = _resume(tmp_path, lines, str(tmp_path / "persistent"), clear_optimizer=True)
    assert train is None
    assert "no valid copy of any step" in lines[-1] and len(fresh_opt.state) == 0


def test_mfu() -> None:
    assert mfu(6e9, 100.0, 1e12, 2) == pytest.approx(0.3)  # 6 GFLOP/token x 100 token/s over 2 x 1 TFLOP/s
    assert mfu(6e9, 1000.0, 0.0, 2) == 0.0


def _train_in_process(*args: str) -> tuple[Trainer, str]:
    threads = torch.get_num_threads()
    out = io.StringIO()
    trainer = Trainer(parse_args([*COMMON, *args]))
    try:
        with contextlib.redirect_stdout(out):
            trainer.train()
    finally:
        torch.set_num_threads(threads)
    return trainer, out.getvalue()


def test_metrics_endpoint(tmp_path: Path) -> None:
    flags = ["--steps", "3", "--checkpoint-dir", str(tmp_path / "p"), "--checkpoint-local-dir", str(tmp_path / "l"), "--checkpoint-interval", "2", "--peak-tflops", "10"]
    port = free_port()
    trainer, _ = _train_in_process(*flags, "--metrics-port", str(port))
    try:
        m = scrape(port)
    finally:
        trainer.close()
    assert m["railtrain_step"] == 3 and 0 < m["railtrain_loss"] < 6 and m["railtrain_tokens_per_second"] > 0 and m["railtrain_step_seconds"] > 0
    assert 0 < m["railtrain_mfu"] < 1
    for tier in ("local", "persistent"):
        assert m[f'railtrain_checkpoint_saves_total{{tier="{tier}"}}'] == 2  # steps 2 and 3 (the last)
        assert m[f'railtrain_checkpoint_save_bytes_total{{tier="{tier}"}}'] > 1e6
        assert m[f'railtrain_checkpoint_save_seconds_total{{tier="{tier}"}}'] > 0
    assert m["railtrain_checkpoint_blocked_seconds_total"] > 0
    port = free_port()
    trainer, text = _train_in_process(*flags[:-4], "--steps", "4", "--metrics-port", str(port))
    try:
        m = scrape(port)
    finally:
        trainer.close()
    # The first run succeeded with step 3 in the persistent tier, so it emptied its local tier (docs/checkpoints.md, "Run identity").
    assert "resumed from step 3 (tier persistent" in text
    assert m['railtrain_checkpoint_load_seconds{tier="persistent"}'] > 0 and m['railtrain_checkpoint_load_bytes{tier="persistent"}'] > 1e6


def test_failures_leave_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "termination-log"
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(log))
    assert main([*COMMON, "--steps", "0"]) == contract.EXIT_USER_ERROR
    assert not log.exists()  # the kubelet creates the file; without it nothing is written
    log.write_text("")
    assert main([*COMMON, "--steps", "0"]) == contract.EXIT_USER_ERROR
    verdict = contract.parse_termination_message(log.read_text())
    assert verdict is not None
    assert {k: verdict[k] for k in ("verdict", "reason", "message")} == {"verdict": "user-error", "reason": "InvalidConfiguration", "message": "--steps must be >= 1, got 0"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*COMMON, "--steps", "5", "--lr", "1e30", "--warmup-steps", "0", "--grad-clip", "0"]) == contract.EXIT_USER_ERROR
    verdict = contract.parse_termination_message(log.read_text())  # a diverged run: deterministic (tests/trainer/test_nonfinite.py)
    assert verdict is not None and (verdict["verdict"], verdict["reason"]) == ("user-error", contract.REASON_NON_FINITE_UPDATE)
    with pytest.raises(FloatingPointError), contextlib.redirect_stdout(io.StringIO()):
        main([*COMMON, "--steps", "5", "--lr", "1e30", "--warmup-steps", "0", "--grad-clip", "0", "--no-health"])
    verdict = contract.parse_termination_message(log.read_text())  # no re-execution to tell hardware from the run
    assert verdict is not None and (verdict["verdict"], verdict["reason"]) == ("retryable", "LossNotFinite")
    assert verdict_of(torch.OutOfMemoryError("CUDA out of memory")) == ("user-error", "OutOfMemory")
    assert verdict_of(RuntimeError("boom")) == ("retryable", "RuntimeError")


def test_manifest_lists_checkpoint_files(tmp_path: Path) -> None:
    lines: list[str] = []
    saver = Checkpointer([TierConfig("persistent", str(tmp_path), 1, 0)], rank=0, world_size=1, local_world_size=1, distributed=False, layout="x", log=lines.append, async_save=False)
    model, optimizer = _model_and_optimizer(0)
    saver.save(1, model, optimizer, {"step": 1}, last_step=9)
    manifest = json.loads((tmp_path / "step-1" / "railtrain-manifest.json").read_text())
    assert manifest["format"] == "railtrain-dcp/1" and manifest["train"] == {"step": 1} and ".metadata" in manifest["files"]
    assert lines[-1].startswith("checkpoint step=1 tier=persistent complete")


def test_a_crash_verdict_names_the_exception_class_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reason is the class's name; the message is the error's text, not "RuntimeError: RuntimeError: ..." when shown together."""
    import railtrain.trainer.__main__ as entry

    class Crashing:
        def __init__(self, config: object) -> None:
            self.health = type("H", (), {"shared_hang": staticmethod(lambda: None)})()

        def train(self) -> None:
            raise RuntimeError("Connection closed by peer")

        def close(self) -> None:
            pass

    log = tmp_path / "termination-log"
    log.write_text("")
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(log))
    monkeypatch.setattr(entry, "Trainer", Crashing)
    with pytest.raises(RuntimeError):
        entry.main([*COMMON, "--steps", "5"])
    verdict = contract.parse_termination_message(log.read_text())
    assert verdict is not None and (verdict["verdict"], verdict["reason"], verdict["message"]) == ("retryable", "RuntimeError", "Connection closed by peer")
