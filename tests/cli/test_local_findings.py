"""`railtrain run --local`: what a new user saw at the end of a run (issue 18's findings).

- a wrong trainer flag in spec.args fails before any process starts, quoting argparse's line once;
- a rank's DistNetworkError traceback at shutdown is not shown (when the run failed, it is in the rank's log file);
- a run that recovered from a failed gang says the restart it took.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from railtrain.crds import contract
from tests.cli import manifests

CLI = [sys.executable, "-m", "railtrain.cli.main"]

SHUTDOWN_TRACEBACK = f"""
import os, sys
rank = int(os.environ[{contract.ENV_NODE_RANK!r}])
print(f"rank {{rank}} trained", flush=True)
if rank == 1:
    print("Traceback (most recent call last):", flush=True)
    print('  File "torch/distributed/elastic/rendezvous/api.py", line 1, in shutdown', flush=True)
    print("    store.get(key)", flush=True)
    print("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed.", flush=True)
sys.exit(int(sys.argv[1]))
"""


def _run(tmp_path, doc, *extra):
    path = manifests.write(tmp_path / "job.yaml", doc)
    return subprocess.run([*CLI, "run", str(path), "--local", *extra], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_wrong_trainer_flag_fails_before_any_process_with_argparse_line(tmp_path):
    doc = manifests.job(command=["torchrun", "-m", "railtrain.trainer"], args=["--data", "pkg://email/*.py", "--stesp", "5"])
    proc = _run(tmp_path, doc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'job.yaml'}: spec.args: unrecognized arguments: --stesp 5 (python -m railtrain.trainer --help lists the flags)"
    ]
    assert proc.stdout == "" and "usage:" not in proc.stderr  # nothing started


def test_a_shutdown_traceback_is_not_shown_when_the_run_succeeded(tmp_path):
    proc = _run(tmp_path, manifests.job(command=["python", "-c", SHUTDOWN_TRACEBACK, "0"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DistNetworkError" not in proc.stdout and "Traceback" not in proc.stdout
    assert "[rank 0] rank 0 trained" in proc.stdout
    assert "not shown: 1 shutdown traceback(s) of node rank 1" in proc.stderr
    assert "tiny: all 2 nodes succeeded in" in proc.stderr and "restart" not in proc.stderr.splitlines()[-1]


def test_a_shutdown_traceback_of_a_failed_run_is_in_the_log_file_not_on_the_screen(tmp_path):
    """Both ranks exit 3 at once: the blamed rank's last lines are shown; rank 1's traceback stays in its log file (issue 25, item 8)."""
    proc = _run(tmp_path, manifests.job(command=["python", "-c", SHUTDOWN_TRACEBACK, "3"], runPolicy={"backoffLimit": 0}))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout
    logs = next(line.split()[1] for line in proc.stderr.splitlines() if line.startswith("logs: "))
    assert "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes" in (Path(logs) / "restart-0-node-1.log").read_text()


RECOVERS = f"""
import os, sys
if os.environ[{contract.ENV_NODE_RANK!r}] == "1" and os.environ[{contract.ENV_RESTART_COUNT!r}] == "0":
    sys.exit(1)
"""


def test_a_run_that_recovered_says_the_restart_it_took(tmp_path):
    proc = _run(tmp_path, manifests.job(command=["python", "-c", RECOVERS], runPolicy={"backoffLimit": 2}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tiny: all 2 nodes succeeded in") and "after 1 restart of the whole gang (" in last, last


def test_the_trainer_quotes_argparse_in_its_termination_message(tmp_path, monkeypatch, capsys):
    """A pod started with --no-validate still says what was wrong: the verdict's message is argparse's line, printed once."""
    from railtrain.trainer.__main__ import main

    path = tmp_path / "termination-log"
    path.write_text("")
    monkeypatch.setenv(contract.ENV_TERMINATION_MESSAGE_PATH, str(path))
    assert main(["--data", "x", "--stesp", "5"]) == contract.EXIT_USER_ERROR
    verdict = contract.parse_termination_message(path.read_text())
    assert (verdict["verdict"], verdict["reason"]) == (contract.VERDICT_USER_ERROR, "InvalidArguments")
    assert verdict["message"].startswith("unrecognized arguments: --stesp 5")
    err = capsys.readouterr().err
    assert err.count("unrecognized arguments") == 1 and "usage:" not in err
