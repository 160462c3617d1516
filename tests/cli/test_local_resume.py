"""`railtrain run --local` of the tiny example twice: the second run resumes and matches an uninterrupted run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.cli import manifests

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "railtrain.cli.main"]
STEP = re.compile(r"^\[rank 0\] step=(\d+) loss=([0-9.]+)", re.MULTILINE)
FIRST, TOTAL = 10, 20
TOL = 1e-3  # losses are printed with 4 decimals; CPU runs are bit-identical in practice


def tiny_example(steps: int) -> dict:
    """The shipped tiny example, shortened to ``steps`` (everything else as shipped)."""
    doc = yaml.safe_load((REPO / "examples/tiny/trainingjob.yaml").read_text())
    args = doc["spec"]["args"]
    args[args.index("--steps") + 1] = str(steps)
    args[args.index("--lr-decay-steps") + 1] = str(TOTAL)  # same schedule in every segment
    args[args.index("--log-every") + 1] = "1"
    args += ["--seq-len", "64"]
    doc["spec"]["checkpoint"]["interval"] = FIRST
    return doc


def run_local(workdir: Path, steps: int) -> tuple[dict[int, float], str]:
    path = manifests.write(workdir / f"tiny-{steps}.yaml", tiny_example(steps))
    proc = subprocess.run([*CLI, "run", str(path), "--local"], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {int(s): float(v) for s, v in STEP.findall(proc.stdout)}, proc.stdout


def test_second_local_run_resumes_and_equals_an_uninterrupted_run(tmp_path):
    resumed_dir, straight_dir = tmp_path / "resumed", tmp_path / "straight"
    resumed_dir.mkdir(), straight_dir.mkdir()
    first, _ = run_local(resumed_dir, FIRST)
    assert sorted(first) == list(range(1, FIRST + 1))
    checkpoints = resumed_dir / "runs/tiny/checkpoints"
    assert (checkpoints / f"step-{FIRST}").is_dir()

    second, out = run_local(resumed_dir, TOTAL)
    assert f"resumed from step {FIRST}" in out
    assert sorted(second) == list(range(FIRST + 1, TOTAL + 1))  # the step count continues

    straight, _ = run_local(straight_dir, TOTAL)
    for step in range(FIRST + 1, TOTAL + 1):
        assert abs(second[step] - straight[step]) <= TOL, (step, second[step], straight[step])
    assert straight[TOTAL] < straight[1] - 1.0  # and it learned
