"""Pre-tokenized token files (docs/data.md): ``railtrain data tokenize`` writes them, the trainer samples and trains on them.

One scene per module: a folder of real text (a few modules of the standard library's ``email`` package) and a
byte-level BPE tokenizer trained on it in memory with ``tokenizers`` and saved as tokenizer.json (nothing is
downloaded), tokenized once through the real command; the tests read that token file.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from railtrain.cli.main import app
from railtrain.crds import contract
from railtrain.trainer import tokens
from railtrain.trainer.__main__ import main
from railtrain.trainer.config import TOKEN_DTYPES, TrainConfig, model_shape
from railtrain.trainer.data import WindowSampler, load_corpus, resolve_files
from typer.testing import CliRunner

VOCAB = 1000  # far from the 256 byte values, so a loss of ln(VOCAB) at the start tells the vocabularies apart
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A text folder (one file in a subfolder), its tokenizer.json, and the token file ``railtrain data tokenize`` wrote."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("tokens")
    texts = root / "texts"
    (texts / "sub").mkdir(parents=True)
    files = resolve_files("pkg://email/*.py")[:5]
    for i, (_, content) in enumerate(files):
        (texts / ("sub" if i == 0 else "") / f"doc{i}.txt").write_bytes(content)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([c.decode() for _, c in files], trainer)
    tok.save(str(root / "tokenizer.json"))
    out = root / "data.bin"
    done = CliRunner().invoke(app, ["data", "tokenize", str(texts), "--tokenizer", str(root / "tokenizer.json"), "--out", str(out), "--eot", EOT])
    assert done.exit_code == 0, done.output
    return {"root": root, "texts": texts, "tokenizer": root / "tokenizer.json", "bin": out}


def test_tokenize_writes_the_ids_of_every_file_in_path_order_and_declares_them(scene: dict[str, Path]) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(scene["tokenizer"]))
    declared = json.loads(Path(str(scene["bin"]) + ".json").read_text())
    ids = np.fromfile(scene["bin"], dtype="<u2")
    assert declared["format"] == tokens.FORMAT and declared["dtype"] == "uint16"
    assert declared["vocab_size"] == tok.get_vocab_size(with_added_tokens=True) == VOCAB
    assert declared["tokens"] == len(ids) and declared["files"] == 5
    paths = sorted(p for p in scene["texts"].rglob("*.txt"))  # doc1..doc4, then sub/doc0: sorted by path
    eot = tok.token_to_id(EOT)
    expected = [i for p in paths for i in [*tok.encode(p.read_text(), add_special_tokens=False).ids, eot]]
    assert ids.tolist() == expected
    first = ids[: list(ids).index(eot)]
    assert tok.decode(first.tolist()) == paths[0].read_text()  # byte-level BPE: the text comes back exactly
    assert not [p.name for p in scene["root"].iterdir() if p.name.endswith(".tmp")]


def test_sampling_a_token_file_is_a_function_of_seed_and_step(scene: dict[str, Path]) -> None:
    """A "resume" (a fresh process mapping the file again) sees the same batch at the same step, read from the file."""
    first = WindowSampler(load_corpus(str(scene["bin"]), "tokens"), seq_len=32, global_batch=6, seed=3)
    resumed = WindowSampler(load_corpus(str(scene["bin"]), "tokens"), seq_len=32, global_batch=6, seed=3)
    for step in (1, 7, 40):
        assert all(torch.equal(a, b) for a, b in zip(first.batch(step), resumed.batch(step)))
    inputs, targets = first.batch(7)
    ids = np.fromfile(scene["bin"], dtype="<u2")
    start = int(first.global_starts(7)[2])
    assert inputs.dtype == torch.int64 and inputs[2].tolist() == ids[start : start + 32].tolist()
    assert targets[2].tolist() == ids[start + 1 : start + 33].tolist()
    assert not torch.equal(first.batch(8)[0], inputs)
    shards = [WindowSampler(first.corpus, 32, 6, seed=3, dp_rank=r, dp_degree=3).batch(7)[0] for r in range(3)]
    assert torch.equal(torch.cat(shards), inputs)
    assert first.state()["data_bytes"] == scene["bin"].stat().st_size


def test_the_model_follows_the_declared_vocabulary_or_a_larger_vocab_size(scene: dict[str, Path]) -> None:
    assert load_corpus(str(scene["bin"]), "tokens").vocab_size == VOCAB
    assert load_corpus(str(scene["bin"]), "tokens", vocab_size=1024).vocab_size == 1024  # padded, e.g. to a multiple of 64
    assert model_shape(TrainConfig(data="x", vocab_size=1024)).vocab_size == 1024
    assert model_shape(TrainConfig(data="x")).vocab_size == 256
    assert TOKEN_DTYPES == tokens.DTYPES


def _bad(path: Path, ids: list[int] | bytes, dtype: str = "uint16", declare: dict | None = None) -> str:
    path.write_bytes(ids if isinstance(ids, bytes) else np.asarray(ids, dtype=dtype).tobytes())
    if declare is not None:
        Path(str(path) + ".json").write_text(json.dumps({"format": tokens.FORMAT, "version": 1, **declare}))
    return str(path)


def test_bad_token_files_are_refused_with_one_sentence(tmp_path: Path, scene: dict[str, Path]) -> None:
    cases = [
        (lambda: load_corpus(_bad(tmp_path / "a.bin", [1, 2, 700, 3]), "tokens", "uint16", 500),
         "--data .*a.bin holds token id 700 at position 2, outside the vocabulary of 500 declared by --vocab-size"),
        (lambda: load_corpus(_bad(tmp_path / "b.bin", [1, 2, 99], declare={"dtype": "uint16", "vocab_size": 50, "tokens": 3}), "tokens"),
         "token id 99 at position 2, outside the vocabulary of 50 declared by .*b.bin.json"),
        (lambda: load_corpus(_bad(tmp_path / "c.bin", b"\x01\x00\x02"), "tokens", "uint16", 500),
         "holds 3 bytes, not a multiple of 2 \\(uint16 per token, from --token-dtype\\)"),
        (lambda: load_corpus(str(scene["bin"]), "tokens", vocab_size=512),
         "--vocab-size 512 is smaller than the vocabulary of 1000 declared in .*data.bin.json"),
        (lambda: load_corpus(str(scene["bin"]), "tokens", token_dtype="uint32"),
         "--token-dtype uint32 differs from the dtype uint16 declared in .*data.bin.json"),
        (lambda: load_corpus(_bad(tmp_path / "d.bin", [1, 2, 3]), "tokens"),
         "--data-format tokens needs --token-dtype and --vocab-size for .*d.bin, which has no declaration"),
        (lambda: load_corpus(_bad(tmp_path / "e.bin", [1, 2, 3], declare={"dtype": "uint16", "vocab_size": 50, "tokens": 4}), "tokens"),
         "holds 3 tokens but .*e.bin.json declares 4"),
        (lambda: load_corpus(str(tmp_path), "tokens", "uint16", 10), "is a directory"),
        (lambda: load_corpus(str(scene["bin"])), "--data .*data.bin is a token file \\(declared by .*data.bin.json\\): add --data-format tokens"),
    ]
    for call, sentence in cases:
        with pytest.raises(ValueError, match=sentence) as err:
            call()
        assert "\n" not in str(err.value)


def test_the_trainer_exits_as_a_user_error_on_a_bad_token_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad(tmp_path / "big.bin", [5, 2**16 - 1, 7], "uint16")
    assert main(["--data", path, "--data-format", "tokens", "--token-dtype", "uint16", "--vocab-size", "300", "--threads", "1"]) == contract.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds token id 65535 at position 1, outside the vocabulary of 300 declared by --vocab-size" in err
    assert main(["--data", path, "--token-dtype", "uint16"]) == contract.EXIT_USER_ERROR
    assert "--token-dtype must be one of uint16, uint32, with --data-format tokens" in capsys.readouterr().err


def test_tokenize_refuses_bad_input_and_writes_nothing(tmp_path: Path, scene: dict[str, Path]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "x.txt").write_bytes(b"\xff\xfe\x00")
    tokenizer = str(scene["tokenizer"])
    cases = [
        ([str(tmp_path / "missing"), "--tokenizer", tokenizer], "DIR .*missing is not a directory"),
        ([str(tmp_path / "empty"), "--tokenizer", tokenizer], "no files match --glob '\\*\\*/\\*' under"),
        ([str(scene["texts"]), "--tokenizer", str(tmp_path / "broken.json")], "--tokenizer .*broken.json cannot be read as a Hugging Face tokenizer.json"),
        ([str(scene["texts"]), "--tokenizer", tokenizer, "--eot", "<none>"], "--eot '<none>' is not a token of"),
        ([str(tmp_path / "bin"), "--tokenizer", tokenizer], "x.txt is not UTF-8 text"),
    ]
    for args, sentence in cases:
        done = CliRunner().invoke(app, ["data", "tokenize", *args, "--out", str(tmp_path / "out.bin")], env={"COLUMNS": "400"})
        assert done.exit_code == 2, done.output
        lines = [line for line in done.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), done.output
        assert re.search(sentence, lines[0]), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "broken.json", "empty"]  # no out.bin, no temporary file


def test_the_tiny_model_trains_on_the_token_file_with_its_vocabulary(tmp_path: Path, scene: dict[str, Path]) -> None:
    metrics = tmp_path / "metrics.jsonl"
    threads, out = torch.get_num_threads(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            rc = main(["--data", str(scene["bin"]), "--data-format", "tokens", "--preset", "tiny", "--seq-len", "32", "--batch-size", "4",
                       "--steps", "6", "--warmup-steps", "2", "--threads", "1", "--metrics-file", str(metrics)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0, out.getvalue()
    shape = model_shape(TrainConfig(data="x", vocab_size=VOCAB))
    assert f"params={shape.num_params()} vocab_size={VOCAB} " in out.getvalue() and "data_tokens=" in out.getvalue()
    losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert len(losses) == 6 and abs(losses[0] - math.log(VOCAB)) < 0.5  # a near-uniform start over 1000 ids, not 256
    assert losses[-1] < losses[0] - 0.3
