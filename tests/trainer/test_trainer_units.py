"""Fast trainer tests without process groups: pure rules, builders, and the entry point's exit codes."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from railtrain.crds import contract
from railtrain.trainer.__main__ import main
from railtrain.trainer.checkpoint import MANIFEST, LocalStorage, latest_complete, should_save, steps_to_prune
from railtrain.trainer.config import (
    TrainConfig,
    apply_launch_context,
    build_parser,
    field_docs,
    parse_args,
    read_launch_context,
)
from railtrain.trainer.data import ByteCorpus, WindowSampler, batch_seed, glob_regex, resolve_files
from railtrain.trainer.model import PRESETS, Transformer
from railtrain.trainer.train import format_step, lr_at

# --- data --------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern, path, matches",
    [
        ("*.py", "message.py", True),
        ("*.py", "mime/text.py", False),
        ("**/*.py", "message.py", True),
        ("**/*.py", "mime/text.py", True),
        ("mime/*.py", "mime/text.py", True),
        ("mes?age.py", "message.py", True),
        ("[mn]essage.py", "message.py", True),
        ("[!m]essage.py", "message.py", False),
        ("*.py", "message.pyc", False),
        ("a.b", "axb", False),
    ],
)
def test_glob_regex(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is matches


def test_package_spec_reads_stdlib_source() -> None:
    files = resolve_files("pkg://email/*.py")
    names = [name for name, _ in files]
    assert names == sorted(names)
    assert "pkg://email/message.py" in names
    assert not any("/mime/" in n for n in names)
    assert any("/mime/" in n for n, _ in resolve_files("pkg://email/**/*.py"))
    text = dict(files)["pkg://email/message.py"].decode()
    assert "class Message" in text  # real code and prose, not random bytes


def test_filesystem_specs(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "sub" / "b.txt").write_text("beta")
    (tmp_path / "empty.txt").write_text("")
    assert [c for _, c in resolve_files(str(tmp_path))] == [b"alpha", b"beta"]
    assert [c for _, c in resolve_files(str(tmp_path / "*.txt"))] == [b"alpha"]
    assert [c for _, c in resolve_files(str(tmp_path / "**" / "*.txt"))] == [b"alpha", b"beta"]
    assert [c for _, c in resolve_files(str(tmp_path / "a.txt"))] == [b"alpha"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("pkg://email/*.nope", "matched no non-empty files"),
        ("pkg://no_such_package_xyz/*.py", "cannot be imported"),
        ("pkg://email", "must look like"),
        ("/no/such/dir/*.txt", "matched no non-empty files"),
    ],
)
def test_bad_data_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        resolve_files(spec)
    assert "--data" in str(err.value)


@pytest.fixture(scope="module")
def corpus() -> ByteCorpus:
    return ByteCorpus.load("pkg://email/*.py")


def test_sampler_is_a_function_of_seed_and_step(corpus: ByteCorpus) -> None:
    a = WindowSampler(corpus, seq_len=32, global_batch=4, seed=7)
    b = WindowSampler(corpus, seq_len=32, global_batch=4, seed=7)
    assert torch.equal(a.batch(5)[0], b.batch(5)[0])  # a fresh (resumed) sampler sees the same batch
    assert not torch.equal(a.batch(5)[0], a.batch(6)[0])
    assert not torch.equal(a.batch(5)[0], WindowSampler(corpus, 32, 4, seed=8).batch(5)[0])
    inputs, targets = a.batch(3)
    assert inputs.shape == targets.shape == (4, 32) and inputs.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])


def test_rank_shards_tile_the_global_batch(corpus: ByteCorpus) -> None:
    whole = WindowSampler(corpus, 16, 6, seed=1).batch(9)[0]
    shards = [WindowSampler(corpus, 16, 6, seed=1, dp_rank=r, dp_degree=3).batch(9)[0] for r in range(3)]
    assert torch.equal(torch.cat(shards), whole)


def test_sampler_rejects_bad_shapes(corpus: ByteCorpus) -> None:
    with pytest.raises(ValueError, match="--batch-size 5 is not divisible"):
        WindowSampler(corpus, 16, 5, seed=0, dp_rank=0, dp_degree=2)
    tiny = ByteCorpus(torch.zeros(10, dtype=torch.uint8), ("x",))
    with pytest.raises(ValueError, match="fewer than --seq-len"):
        WindowSampler(tiny, 16, 2, seed=0)


def test_batch_seed_is_64_bit_and_distinct() -> None:
    seeds = {batch_seed(s, t) for s in range(4) for t in range(1000)}
    assert len(seeds) == 4000 and all(0 <= x < 2**64 for x in seeds)


# --- model -------------------------------------------------------------------


def test_preset_sizes() -> None:
    assert 1_000_000 <= PRESETS["tiny"].num_params() <= 3_000_000
    assert PRESETS["1b"].num_params() >= 1_000_000_000
    for config in PRESETS.values():
        with torch.device("meta"):
            model = Transformer(config)
        assert sum(p.numel() for p in model.parameters()) == config.num_params()


def test_model_is_causal() -> None:
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"])
    tokens = torch.randint(0, 256, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 256
    out, out2 = model(tokens), model(changed)
    assert out.shape == (2, 16, 256)
    assert torch.allclose(out[:, :10], out2[:, :10], atol=1e-5)
    assert not torch.allclose(out[:, 10:], out2[:, 10:])
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, PRESETS["tiny"].max_seq_len + 1, dtype=torch.int64))


# --- checkpoint policy ---------------------------------------------------------


class FakeStorage:
    """In-memory :class:`CheckpointStorage`: step -> complete?"""

    def __init__(self, steps: dict[int, bool]) -> None:
        self.steps = dict(steps)

    def list_steps(self) -> list[int]:
        return sorted(self.steps)

    def is_complete(self, step: int) -> bool:
        return self.steps[step]

    def mark_complete(self, step: int, manifest: dict) -> None:
        self.steps[step] = True

    def remove(self, step: int) -> None:
        self.steps.pop(step, None)

    def path(self, step: int) -> str:
        return f"fake/step-{step}"


@pytest.mark.parametrize(
    "step, interval, last, save",
    [(10, 10, 100, True), (11, 10, 100, False), (7, 10, 7, True), (100, 10, 100, True), (1, 1, 5, True)],
)
def test_should_save(step: int, interval: int, last: int, save: bool) -> None:
    assert should_save(step, interval, last) is save


@pytest.mark.parametrize(
    "steps, latest, keep, prune",
    [
        ({}, None, 2, []),
        ({10: False}, None, 2, []),
        ({10: True, 20: True, 30: False}, 20, 2, []),  # 30 may still be in progress: leave it
        ({10: True, 20: True, 30: True}, 30, 2, [10]),
        ({10: True, 15: False, 20: True}, 20, 2, [15]),  # a leftover partial save
        ({10: True, 20: True, 30: True}, 30, 0, []),  # keep=0 keeps all
        ({10: True, 20: True, 30: True}, 30, 1, [10, 20]),
    ],
)
def test_latest_and_pruning(steps: dict[int, bool], latest: int | None, keep: int, prune: list[int]) -> None:
    storage = FakeStorage(steps)
    assert latest_complete(storage) == latest
    assert steps_to_prune(storage, keep) == prune


def test_local_storage(tmp_path: Path) -> None:
    storage = LocalStorage(f"file://{tmp_path}")
    assert storage.list_steps() == []
    for step in (5, 10, 100):
        Path(storage.path(step)).mkdir()
    (tmp_path / "step-x").mkdir()
    (tmp_path / "step-7").write_text("not a directory")
    storage.mark_complete(10, {"step": 10})
    assert storage.list_steps() == [5, 10, 100]
    assert [storage.is_complete(s) for s in (5, 10, 100)] == [False, True, False]
    assert (tmp_path / "step-10" / MANIFEST).is_file() and not (tmp_path / "step-10" / f"{MANIFEST}.tmp").exists()
    assert latest_complete(storage) == 10
    storage.remove(5)
    assert storage.list_steps() == [10, 100]


# --- config ----------------------------------------------------------------------


def test_every_flag_has_help() -> None:
    docs = field_docs(TrainConfig)
    names = [f.name for f in TrainConfig.__dataclass_fields__.values()]
    assert set(docs) == set(names) and all(docs.values())
    help_text = build_parser().format_help()
    assert "--checkpoint-interval" in help_text and "pkg://<package>/<glob>" in help_text


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "--data is required"),
        (["--data", "x", "--steps", "0"], "--steps must be >= 1"),
        (["--data", "x", "--lr", "0"], "--lr must be > 0"),
        (["--data", "x", "--seq-len", "5000"], "--seq-len 5000 exceeds"),
        (["--data", "x", "--checkpoint-interval", "0"], "--checkpoint-interval must be >= 1"),
        (["--data", "x", "--checkpoint-local-dir", "s3://bucket/x"], "--checkpoint-local-dir must be a local directory"),
        (["--data", "x", "--checkpoint-memory-keep", "0"], "--checkpoint-memory-keep must be >= 1"),
    ],
)
def test_config_errors_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_args(argv)


def _pod_environ(**changes: object) -> dict[str, str]:
    pod = contract.PodEnvironment(
        job_name="j1", namespace="ns", nnodes=2, node_rank=0, procs_per_node=1, rdzv_addr="127.0.0.1",
        parallelism=contract.format_parallelism(1, 2, 1, 1), checkpoint_dir="/ckpt", checkpoint_interval=7,
    )  # fmt: skip
    env = contract.pod_env(pod)
    env.update({k: str(v) for k, v in changes.items()})
    return env


def test_pod_contract_fills_unset_flags() -> None:
    ctx = read_launch_context(_pod_environ())
    merged = apply_launch_context(parse_args(["--data", "x"]), ctx)
    assert (merged.checkpoint_dir, merged.checkpoint_interval, merged.job_name) == ("/ckpt", 7, "j1")
    assert ctx.parallelism == {"data": 1, "fsdp": 2, "tensor": 1, "pipeline": 1}
    flags = parse_args(["--data", "x", "--checkpoint-dir", "/mine", "--checkpoint-interval", "3", "--job-name", "me"])
    merged = apply_launch_context(flags, ctx)
    assert (merged.checkpoint_dir, merged.checkpoint_interval, merged.job_name) == ("/mine", 3, "me")
    standalone = apply_launch_context(parse_args(["--data", "x"]), read_launch_context({}))
    assert (standalone.checkpoint_dir, standalone.checkpoint_interval) == ("", 100)


def test_bad_pod_contract_names_the_variable() -> None:
    env = _pod_environ()
    env[contract.ENV_CHECKPOINT_INTERVAL] = "often"
    with pytest.raises(ValueError, match=contract.ENV_CHECKPOINT_INTERVAL):
        read_launch_context(env)
    with pytest.raises(ValueError, match=contract.ENV_CHECKPOINT_INTERVAL):
        apply_launch_context(parse_args(["--data", "x"]), read_launch_context(_pod_environ(**{contract.ENV_CHECKPOINT_INTERVAL: 0})))


def test_learning_rate_schedule() -> None:
    c = TrainConfig(data="x", lr=1.0, warmup_steps=10)
    assert [lr_at(s, c) for s in (1, 5, 10, 11, 10_000)] == [0.1, 0.5, 1.0, 1.0, 1.0]
    c = TrainConfig(data="x", lr=1.0, warmup_steps=10, lr_decay_steps=110)
    assert lr_at(10, c) == 1.0 and math.isclose(lr_at(60, c), 0.55) and math.isclose(lr_at(110, c), 0.1)
    assert math.isclose(lr_at(500, c), 0.1)


def test_step_line_format() -> None:
    line = format_step(10, 4.12345, 0.5, 0.003, 12345.67)
    assert line == "step=10 loss=4.1235 grad_norm=0.5000 lr=3.00e-03 tokens_per_s=12345.7"
    assert dict(kv.split("=") for kv in line.split())["loss"] == "4.1235"


# --- entry point -----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data", "pkg://email/*.nope"], "--data 'pkg://email/*.nope' matched no non-empty files"),
        (["--data", "pkg://email/*.py", "--steps", "-1"], "--steps must be >= 1"),
    ],
)
def test_main_exits_2_on_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == contract.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_module_entry_point_exit_codes() -> None:
    env = {"PATH": "/usr/bin:/bin", contract.ENV_JOB_NAME: "only-the-name"}  # an incomplete pod contract
    proc = subprocess.run([sys.executable, "-m", "railtrain.trainer", "--data", "pkg://email/*.py"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == contract.EXIT_USER_ERROR, proc.stderr
    assert "Traceback" not in proc.stderr and contract.ENV_NAMESPACE in proc.stderr
    usage = subprocess.run([sys.executable, "-m", "railtrain.trainer", "--steps", "many"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == contract.EXIT_USER_ERROR and "--steps" in usage.stderr
    help_ = subprocess.run([sys.executable, "-m", "railtrain.trainer", "--help"], capture_output=True, text=True, timeout=120)
    assert help_.returncode == contract.EXIT_OK and "--parallel {ddp,fsdp}" in help_.stdout
