"""`railtrain run --local` on real torchrun processes: --steps, a second run of a finished job, --workdir, an injected kill's summary."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]
STEP_LINE = re.compile(r"^\[rank 0\] step=(\d+) ", re.MULTILINE)
TINY = ["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "300", "--seq-len", "64", "--warmup-steps", "2", "--threads", "1"]


def _run(args, cwd, timeout=300):
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_steps_override_second_run_and_workdir(tmp_path):
    """--steps 4 trains to 4 in --workdir; the same run again says there is nothing to train (and that a fault before step 4
    cannot fire); --steps 6 trains 5 and 6 only."""
    work = tmp_path / "work"
    work.mkdir()
    doc = manifests.job(name="steps-test", command=["torchrun", "-m", "railtrain.trainer"], args=TINY, checkpoint={"location": "runs/ckpt", "interval": 2})
    path = manifests.write(tmp_path / "job.yaml", doc)
    args = ["run", str(path), "--local", "--workdir", str(work)]

    first = _run([*args, "--steps", "4"], tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert [int(s) for s in STEP_LINE.findall(first.stdout)] == [1, 2, 3, 4]
    assert "steps=4" in first.stdout
    # the relative checkpoint location resolved against --workdir, not the directory railtrain ran in
    assert (work / "runs" / "ckpt" / "step-4").is_dir() and not (tmp_path / "runs").exists()
    assert f"checkpoints: {work / 'runs' / 'ckpt'}" in first.stderr
    assert "starting 2 ranks on 2 local nodes" in first.stderr

    again = _run([*args, "--steps", "4", "--fault-kill", "rank=1,step=3"], tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert STEP_LINE.findall(again.stdout) == []
    said = " ".join(again.stdout.split())
    assert f"nothing to train: {work / 'runs' / 'ckpt'} already holds step 4, and --steps is 4; delete it to start over, or raise --steps" in said
    assert "warning: injected fault(s) kill at step 3 come at or before the resumed step 4: they will not fire" in said  # not silently

    further = _run([*args, "--steps", "6"], tmp_path)
    assert further.returncode == 0, further.stdout[-3000:] + further.stderr[-3000:]
    assert "resumed from step 4" in further.stdout
    assert [int(s) for s in STEP_LINE.findall(further.stdout)] == [5, 6]


def test_fault_flags_outside_the_job_are_refused_before_anything_starts(tmp_path):
    doc = manifests.job(command=["torchrun", "-m", "railtrain.trainer"], args=TINY)
    path = manifests.write(tmp_path / "job.yaml", doc)
    for flag, message in (
        ("banana", "error: --fault-kill must be comma-separated key=value pairs of rank, step, got 'banana'"),
        ("rank=7,step=5", "error: --fault-kill: rank=7 is not in this job: its ranks are 0 to 1 (world size 2)"),
        ("rank=1,step=301", "error: --fault-kill: step=301 comes after the job's last step 300 (--steps in spec.args): it would never fire"),
    ):
        proc = _run(["run", str(path), "--local", "--fault-kill", flag], tmp_path, timeout=60)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [message], proc.stderr
        assert proc.stdout == ""  # nothing started


def test_killed_rank_is_named_in_the_summary_once(tmp_path):
    """--fault-kill on rank 1: the restart line names rank 1 killed by SIGKILL, not rank 0's closed connection; no traceback twice."""
    doc = manifests.job(name="kill-test", command=["torchrun", "-m", "railtrain.trainer"], args=["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "6", "--seq-len", "64", "--threads", "1"])
    path = manifests.write(tmp_path / "job.yaml", doc)
    proc = _run(["run", str(path), "--local", "--fault-kill", "rank=1,step=3", "--grace", "2"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    assert "gang failed: rank 1 exited with code 1: worker rank 1 was killed by SIGKILL (exit code -9); restarting the whole gang" in said, proc.stderr
    assert "RuntimeError: RuntimeError" not in proc.stdout + proc.stderr
    assert "libc10.so" not in proc.stdout and "frame #" not in proc.stdout  # C++ stacks stay in the log files (issue 25 item 8)
    assert "torch/distributed/run.py" not in proc.stdout  # torchrun's own frames are one line, not 16
    assert "[rank 1] fault: rank 1 kills itself at step 3" in proc.stdout  # filtered while running, shown once it failed
    for rank in (0, 1):  # each node's torchrun report is shown at most once (it used to be repeated as the "last lines")
        assert proc.stdout.count(f"[rank {rank}] torch.distributed.elastic.multiprocessing.errors.ChildFailedError") <= 1, proc.stdout
