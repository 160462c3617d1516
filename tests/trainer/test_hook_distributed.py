"""StepHook across two real gloo processes (torchrun): the loss all-reduce that after_forward starts early."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from railtrain.cli.local import free_ports

HERE = Path(__file__).resolve().parent


def test_after_forward_starts_checks_all_reduce_early_and_check_returns_the_job_mean_with_every_ranks_times(tmp_path):
    """After ``after_forward`` the mean ``check`` returns is the average of every rank's loss given there (step 2 hands
    ``check`` a different loss, which is not averaged), and the straggler check receives both ranks' compute times;
    a repeated call for the step and a call after the step's ``check`` (on rank 0 alone) start no collective (one would
    leave rank 1's next collective paired with the wrong one: wrong means or a hang)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAILTRAIN_")} | {"OMP_NUM_THREADS": "1"}
    port = free_ports(1)[0]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", str(HERE / "hook_worker.py"), str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for steps in ranks:
        assert [s["step"] for s in steps] == [1, 2, 3]
        for s in steps:
            assert s["mean"] == pytest.approx(sum(s["locals"]) / 2, rel=1e-5)
            assert len(s["times"]) == 2 and all(t > 0 for t in s["times"]), s
            assert s["skip"] is False
    assert [s["mean"] for s in ranks[0]] == pytest.approx([s["mean"] for s in ranks[1]])
    assert ranks[0][0]["locals"][0] != ranks[0][0]["locals"][1]  # the ranks' losses differ: the mean is a real average
