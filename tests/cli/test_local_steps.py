"""`railtrain run --local`: fault flags outside the job are refused before anything starts.

An injected kill's summary is checked on the goodput run in tests/cli/test_local_goodput.py.

--steps, --workdir and a second run of a finished job are tested on the tiny example's segments in tests/cli/test_local_resume.py."""

from __future__ import annotations

import subprocess
import sys

from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]
TINY = ["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "300", "--seq-len", "64", "--warmup-steps", "2", "--threads", "1"]


def _run(args, cwd, timeout=300):
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


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
