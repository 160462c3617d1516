"""`railtrain run --local` is a new run each time: a stale memory tier in /dev/shm is never resumed by accident.

Real runs of the tiny model (2 local nodes × 1 process, a memory tier and no
persistent one, so a successful run keeps its node-local shards and says where).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]
KEPT = re.compile(r"node-local checkpoints kept: memory (\S+) \(run (\S+); set spec\.checkpoint\.runId: (\S+) to resume them in a new run")


def run_local(workdir: Path, run_id: str | None = None) -> str:
    checkpoint: dict = {"memory": {"interval": 2, "keep": 1}}
    if run_id:
        checkpoint["runId"] = run_id
    doc = manifests.job(
        command=["torchrun", "-m", "railtrain.trainer"], checkpoint=checkpoint,
        args=["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "4", "--seq-len", "64", "--warmup-steps", "2", "--log-every", "1"],
    )  # fmt: skip
    path = manifests.write(workdir / "job.yaml", doc)
    proc = subprocess.run([*CLI, "run", str(path), "--local"], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr  # the runner's own lines go to stderr


def test_a_second_local_run_does_not_resume_the_first_runs_memory_tier(tmp_path: Path) -> None:
    first = run_local(tmp_path)
    kept = KEPT.search(first)
    assert kept, first
    root, run_id = Path(kept.group(1)), kept.group(2)
    try:
        assert kept.group(3) == run_id and root.name == run_id and (root / "node-0" / "step-4" / "rank-0.json").is_file()

        second = run_local(tmp_path)
        assert "resumed from step" not in second and "nothing to train" not in second, second
        assert "[rank 0] step=1 " in second
        second_root = Path(KEPT.search(second).group(1))  # type: ignore[union-attr]
        shutil.rmtree(second_root, ignore_errors=True)

        # Naming the first run's id resumes its memory tier on purpose; the hint names that tier, not a location to delete.
        third = run_local(tmp_path, run_id=run_id)
        assert "resumed from step 4 (tier memory" in third, third
        assert f"nothing to train: the memory tier of run {run_id} (rank 0's shards in {root / 'node-0'}) already holds step 4" in third
        assert "set another spec.checkpoint.runId (or none) to start over" in third
    finally:
        shutil.rmtree(root, ignore_errors=True)
