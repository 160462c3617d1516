"""`railtrain run --local` of the tiny example in segments: --steps and --workdir override the manifest, a finished
run says there is nothing to train, and the resumed run matches an uninterrupted one.

One job's segments carry every check (each torchrun launch costs about 15 CPU-seconds of imports on these machines):
the first segment is also the --steps/--workdir test, the second the finished-run test (it was
tests/cli/test_local_steps.py's own three runs)."""

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


def run_local(workdir: Path, steps: int, *extra: str, cwd: Path | None = None) -> tuple[dict[int, float], subprocess.CompletedProcess[str]]:
    """Run the tiny example (``--steps`` in the manifest set to ``steps``) with ``extra`` flags, from ``cwd`` (default ``workdir``)."""
    path = manifests.write(workdir / f"tiny-{steps}.yaml", tiny_example(steps))
    proc = subprocess.run([*CLI, "run", str(path), "--local", *extra], cwd=cwd or workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {int(s): float(v) for s, v in STEP.findall(proc.stdout)}, proc


def test_segments_with_steps_and_workdir_resume_and_equal_an_uninterrupted_run(tmp_path):
    """--steps FIRST in --workdir trains 1…FIRST there; the same again has nothing to train (and says an injected fault
    before then cannot fire); --steps TOTAL resumes FIRST+1…TOTAL with the losses of an uninterrupted TOTAL-step run."""
    work, straight_dir = tmp_path / "work", tmp_path / "straight"
    work.mkdir(), straight_dir.mkdir()
    segment = ["--workdir", str(work)]

    first, proc = run_local(tmp_path, TOTAL, *segment, "--steps", str(FIRST))
    assert sorted(first) == list(range(1, FIRST + 1))
    assert f"steps={FIRST}" in proc.stdout
    checkpoints = work / "runs/tiny/checkpoints"
    # the manifest's relative checkpoint location resolved against --workdir, not the directory railtrain ran in
    assert (checkpoints / f"step-{FIRST}").is_dir() and not (tmp_path / "runs").exists()
    assert f"checkpoints: {checkpoints}" in proc.stderr
    assert "starting 2 ranks on 2 local nodes" in proc.stderr

    again, proc = run_local(tmp_path, TOTAL, *segment, "--steps", str(FIRST), "--fault-kill", "rank=1,step=3")
    assert again == {}
    said = " ".join(proc.stdout.split())
    assert f"nothing to train: {checkpoints} already holds step {FIRST}, and --steps is {FIRST}; delete it to start over, or raise --steps" in said
    assert f"warning: injected fault(s) kill at step 3 come at or before the resumed step {FIRST}: they will not fire" in said  # not silently

    second, proc = run_local(tmp_path, TOTAL, *segment)
    assert f"resumed from step {FIRST}" in proc.stdout
    assert sorted(second) == list(range(FIRST + 1, TOTAL + 1))  # the step count continues

    # The uninterrupted run is also the plain two-node run (it was tests/cli/test_local.py's own tiny run): two torchrun
    # nodes rendezvous, train, checkpoint under the directory railtrain ran in, and the loss clearly falls.
    straight, proc = run_local(straight_dir, TOTAL)
    for step in range(FIRST + 1, TOTAL + 1):
        assert abs(second[step] - straight[step]) <= TOL, (step, second[step], straight[step])
    assert straight[TOTAL] < straight[1] - 1.0  # and it learned
    assert "world=2" in proc.stdout and "all 2 nodes succeeded" in proc.stderr
    assert (straight_dir / "runs/tiny/checkpoints" / f"step-{TOTAL}").is_dir()
