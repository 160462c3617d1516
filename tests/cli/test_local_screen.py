"""`railtrain run --local`: the user's screen is not a log dump (issue 25, item 8).

- a run with an injected fault shows the summary and the failing rank's last lines, no tracebacks and no
  torchrun reports before it; every line is in the run's log files;
- a successful run does not show the C++ DistNetworkError a rank's torchrun prints at its exit barrier;
- when a rank is SIGKILLed, the rank that died first is blamed, not the survivor whose connection it reset,
  even when the survivor's node exits first.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from railtrain.cli.local_recovery import local_failures
from railtrain.crds import contract, recovery
from railtrain.crds.validation import parse_manifest
from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]


def _run(tmp_path, doc, *extra, timeout=300):
    """The CLI's output as the user's terminal shows it: stdout and stderr interleaved in order."""
    path = manifests.write(tmp_path / "job.yaml", doc)
    return subprocess.run([*CLI, "run", str(path), "--local", *extra], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def _logs(output: str) -> Path:
    return Path(next(line.split()[1] for line in output.splitlines() if line.startswith("logs: ")))


# A survivor (node 1) whose peer's death reset its connection writes its verdict and exits at once; node 0,
# whose worker was SIGKILLed, reports it only after its launcher noticed (torchrun's Root Cause box).
KILLED_RANK_0 = f"""
import os, sys, time
from railtrain.crds import contract
rank = int(os.environ[{contract.ENV_NODE_RANK!r}])
if rank == 1:
    msg = "[../gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:63671: Connection reset by peer"
    contract.write_termination_message("retryable", "RuntimeError", msg)
    print("[rank1]: Traceback (most recent call last):", flush=True)
    print('[rank1]:   File "reductions.py", line 60, in mean_loss_and_sum', flush=True)
    print("[rank1]: RuntimeError: " + msg, flush=True)
    sys.exit(1)
time.sleep(2.5)
for line in ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 20, "railtrain.trainer FAILED",
             "-" * 20, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 20, "Root Cause (first observed failure):", "[0]:",
             "  rank      : 0 (local_rank: 0)", "  exitcode  : -9 (pid: 1406)  (SIGKILL)",
             "  traceback : Signal 9 (SIGKILL) received by PID 1406", "=" * 20]:
    print(line, flush=True)
sys.exit(1)
"""


def test_a_sigkilled_rank_0_is_blamed_not_the_survivor_that_exited_first(tmp_path):
    proc = _run(tmp_path, manifests.job(command=["python", "-c", KILLED_RANK_0], runPolicy={"backoffLimit": 0}))
    assert proc.returncode == 1, proc.stdout
    summary = proc.stdout.strip().splitlines()[-1]
    assert "rank 0 exited with code 1: worker rank 0 was killed by SIGKILL" in summary, proc.stdout
    assert "Connection reset" not in summary


def test_the_first_death_wins_over_the_first_exit_seen():
    """Node 1 exited first with a reported connection reset; node 0's process was killed (status 137) a moment later."""
    reset = contract.format_termination_message("retryable", "RuntimeError", "Connection reset by peer")
    job = parse_manifest(manifests.job())
    d = recovery.decide(local_failures([None, reset], 1, first=1, ended={1: (100.0, 1), 0: (100.4, 137)}, written={1: 99.9}),
                        job.spec.run_policy, recovery.Counters(), datetime.now(timezone.utc))
    assert d.blamed.rank == 0 and d.blamed.signalled


def test_the_rank_whose_failure_began_first_is_blamed_when_neither_was_killed():
    """Both reported; node 1 exited first, but node 0 wrote its verdict before node 1's connection was reset."""
    first = contract.format_termination_message("retryable", "ValueError", "bad value")
    reset = contract.format_termination_message("retryable", "RuntimeError", "Connection reset by peer")
    job = parse_manifest(manifests.job())
    evidence = local_failures([first, reset], 1, first=1, ended={1: (100.0, 1), 0: (100.5, 1)}, written={0: 99.5, 1: 99.8})
    d = recovery.decide(evidence, job.spec.run_policy, recovery.Counters(), datetime.now(timezone.utc))
    assert (d.blamed.rank, d.blamed.reason) == (0, "ValueError")


# torchrun's exit barrier on a rank that finished after its peer's launcher (the rendezvous store's host) had gone.
EXIT_BARRIER = f"""
import os, sys
rank = int(os.environ[{contract.ENV_NODE_RANK!r}])
print(f"step=10 loss=3.7 rank {{rank}} done", flush=True)
if rank == 1:
    lines = ["E1203 08:30:15.094000 1239 torch/distributed/elastic/agent/server/api.py:1007] Error waiting on exit barrier. Elapsed: 0.1 seconds",
             "Traceback (most recent call last):",
             '  File "torch/distributed/elastic/agent/server/api.py", line 1001, in _exit_barrier',
             "    store_util.barrier(",
             "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
             "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call first):",
             "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f3c in libc10.so)",
             "frame #1: <unknown function> + 0x5f1c (0x7f3d in libtorch_cpu.so)",
             "frame #2: c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::milliseconds) + 0x1b2 (0x7f3e in libtorch_cpu.so)"]
    for line in lines:
        print(line, flush=True)
"""


def test_a_successful_run_does_not_show_the_exit_barrier_error(tmp_path):
    proc = _run(tmp_path, manifests.job(command=["python", "-c", EXIT_BARRIER]))
    assert proc.returncode == 0, proc.stdout
    shown = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("[rank "))  # the processes' lines
    assert shown == "[rank 0] step=10 loss=3.7 rank 0 done", proc.stdout
    assert "tiny: all 2 nodes succeeded in" in proc.stdout
    assert "frame #2: c10d::TCPStore::doWait" in (_logs(proc.stdout) / "restart-0-node-1.log").read_text()


SUMMARY = re.compile(r"^gang failed: ")


def test_an_injected_fault_shows_the_summary_and_the_failing_ranks_last_lines_not_tracebacks(tmp_path):
    """The tiny trainer, 2 nodes, rank 1 SIGKILLed at step 2: before the summary only the run's own lines, none of gloo's or torchrun's."""
    doc = manifests.job(command=["torchrun", "-m", "railtrain.trainer"], args=["--data", "pkg://email/*.py", "--steps", "4", "--log-every", "1"],
                        runPolicy={"backoffLimit": 0})  # fmt: skip
    proc = _run(tmp_path, doc, "--fault-kill", "rank=1,step=2")
    assert proc.returncode == 1, proc.stdout
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if SUMMARY.match(line))
    before = lines[:at]
    for noise in ("Traceback", "ChildFailedError", "=====", "Connection reset", "Connection closed", "E1203", "exitcode"):
        assert not [line for line in before if noise in line], proc.stdout
    assert len(before) <= 25, proc.stdout
    assert "worker rank 1 was killed by SIGKILL" in lines[at]
    after = lines[at + 1:]
    assert any(line.startswith("node rank 1's last") for line in after), proc.stdout
    assert any(line == "[rank 1] fault: rank 1 kills itself at step 2" for line in after), proc.stdout
    log = (_logs(proc.stdout) / "restart-0-node-1.log").read_text()
    assert "ChildFailedError" in log and "Signal 9 (SIGKILL)" in log  # nothing is lost: torchrun's report is in the log
