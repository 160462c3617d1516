"""examples/torchtitan under `railtrain run --local` on CPU: torchtitan 0.3.0's own trainer (llama3 debugmodel, HSDP over
gloo, 2 nodes x 1 process) with railtrain's hook wired in through torchtitan's extension points (issue 30).

Nothing is downloaded: the tokenizer (a small byte-level BPE) and the text data set are made here with `tokenizers`
and read by torchtitan's own HuggingFaceTokenizer and c4_test data loader from local paths.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "torchtitan"
CLI = [sys.executable, "-m", "railtrain.cli.main"]


def _assets(root: Path) -> tuple[Path, Path]:
    """A 300-token byte-level BPE tokenizer (torchtitan's tokenizer.json + tokenizer_config.json) and a JSON-lines text set."""
    texts = [f"sample {i}: the quick brown fox jumps over the lazy dog {i * 7} times and keeps running" for i in range(200)]
    tok_dir, data_dir = root / "tokenizer", root / "data"
    tok_dir.mkdir(parents=True)
    data_dir.mkdir()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    special = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"bos_token": special[0], "eos_token": special[1]}))
    (data_dir / "data.json").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return tok_dir, data_dir


def test_a_bad_batch_is_skipped_and_a_bit_flip_is_hardware_suspect_inside_torchtitans_loop(tmp_path):
    """One gang, two faults. Every rank's batch at step 2 is poisoned (NaN output): the hook re-executes torchtitan's
    forward-backward, finds it again (data), and drops the batch: no gradients reach torchtitan's optimizer step (its
    own log shows grad_norm 0) and training goes on. Rank 1's activation at step 3 gets a flipped bit: the re-execution
    differs (hardware-suspect, RerunMismatch, rank 1 on node local-1), written by the verdict writer with exit code 1;
    the failure policy fails the job there (no restart, to keep the test short). Rank 0 prints the hook's progress."""
    tok_dir, data_dir = _assets(tmp_path / "assets")
    doc = yaml.safe_load((EXAMPLE / "trainingjob.yaml").read_text())
    spec = doc["spec"]
    assert spec["command"] == ["torchrun", "-m", "torchtitan.train"]
    spec["command"] = ["torchrun", str(EXAMPLE / "cpu_launch.py")]  # CPU: torchtitan's device module pointed at the CPU
    # the committed (GPU) manifest's args, then the CPU run's: torchtitan parses them all (the last of a flag wins)
    spec["args"] += ["--module", "cpu_launch", "--config", "llama3_debugmodel_cpu", "--training.steps", "4", "--training.seq_len", "64",
                    "--training.local_batch_size", "2", "--parallelism.data_parallel_replicate_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "1",  # gloo has no PREMUL_SUM reduce-scatter: replicas, not shards
                    "--hf_assets_path", str(tok_dir), "--dataloader.dataset_path", str(data_dir), "--dump_folder", str(tmp_path / "out")]  # fmt: skip
    spec.update(nodes=2, procsPerNode=1, resources={"cpu": "1", "memory": "2Gi"})
    spec["env"] = [{"name": "HF_DATASETS_OFFLINE", "value": "1"}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
    spec["runPolicy"] = {"failurePolicy": {"rules": [{"verdict": "hardware-suspect", "action": "Fail"}]}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    faults = ["--fault-bad-batch", "rank=-1,step=2",
              "--fault-bitflip", "rank=1,step=3,target=activation,bit=14"]  # bf16 output (torchtitan's FSDP mixed precision): its top exponent bit
    proc = subprocess.run([*CLI, "run", str(path), "--local", "--grace", "2", *faults], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out, err = proc.stdout, " ".join(proc.stderr.split())
    assert proc.returncode != 0, out[-3000:] + proc.stderr[-3000:]
    assert "[rank 0] step=1 loss=" in out and "[rank 0] step=2 loss=" in out and "[rank 0] step=3 loss=" not in out, out
    assert "step 2: loss=nan (z=inf) grad_norm=nan (z=inf) reproduced by re-execution: data, not hardware; skipping the batch (1 of at most 5)" in out, out
    assert re.search(r"\[rank 0\] \[titan\] .*step:\s+2\s.*loss:\s+0\.00000\s.*grad_norm:\s+0\.0000\s", out), out  # torchtitan's own line
    assert "railtrain: health: verdict=hardware-suspect reason=RerunMismatch ranks=[1] nodes=['local-1'] step=3: " in out, out
    assert re.search(r"gang failed: rank [01] exited with code 1: RerunMismatch: step 3: ", err), err  # every rank has the verdict
    assert "(runPolicy.failurePolicy: hardware-suspect → Fail); not restarting" in err and "failed with exit status 1" in err, err
    assert re.search(r"goodput: wall [0-9.]+ s = .* training [0-9.]+ ", err), err  # seen from the hook's progress lines

