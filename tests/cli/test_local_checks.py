"""`railtrain run --local` before the gang starts: --steps, fault flags that could never fire, a gang too big for the machine (pure)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railtrain.cli import local, local_checks
from railtrain.cli.errors import CliError
from railtrain.cli.main import app
from railtrain.crds.validation import parse_manifest
from tests.cli import manifests

TRAINER = ["torchrun", "-m", "railtrain.trainer"]


def _job(**spec):
    return parse_manifest(manifests.job(**spec))


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--preset", "tiny", "--steps", "300", "--log-every", "10"], ["--preset", "tiny", "--steps", "7", "--log-every", "10"]),
        (["--steps=300"], ["--steps=7"]),
        (["--preset", "tiny"], ["--preset", "tiny", "--steps", "7"]),  # the trainer's default, overridden by appending
    ],
)
def test_steps_flag_changes_the_trainers_own_steps_in_args(args, expected):
    job = local_checks.with_steps(_job(command=TRAINER, args=args), 7)
    assert job.spec.args == expected
    assert local_checks.job_steps(job) == 7


def test_steps_flag_needs_a_steps_to_change_or_the_trainer():
    with pytest.raises(CliError, match=r"^--steps: spec.args has no --steps to change") as info:
        local_checks.with_steps(_job(command=["python", "train.py"], args=["--epochs", "3"]), 7)
    assert info.value.exit_code == 2
    with pytest.raises(CliError, match=r"^--steps must be >= 1 \(the step to train until\), got -3$"):
        local_checks.with_steps(_job(command=TRAINER, args=["--steps", "300"]), -3)


def test_fault_flag_errors_name_the_flag_not_the_variable():
    with pytest.raises(CliError, match=r"^--fault-kill must be comma-separated key=value pairs of rank, step, got 'banana'$") as info:
        local.fault_environment({"kill": "banana"})
    assert info.value.exit_code == 2
    with pytest.raises(CliError) as info:
        local.fault_environment({"slow": "rank=1,factor=0.5"})
    assert str(info.value) == "--fault-slow factor must be >= 1, got 0.5"
    assert "RAILTRAIN_" not in str(info.value)


@pytest.mark.parametrize(
    "flag, text, message",
    [
        ("kill", "rank=7,step=5", "--fault-kill: rank=7 is not in this job: its ranks are 0 to 1 (world size 2)"),
        ("hang", "rank=0,step=301", "--fault-hang: step=301 comes after the job's last step 300 (--steps in spec.args): it would never fire"),
        ("slow", "rank=1,factor=2,from_step=400", "--fault-slow: from_step=400 comes after the job's last step 300 (--steps in spec.args): it would never fire"),
    ],
)
def test_faults_outside_the_job_are_refused(flag, text, message):
    job = _job(command=TRAINER, args=["--steps", "300"])
    faults = local.parse_fault_flags({flag: text})
    with pytest.raises(CliError) as info:
        local_checks.check_faults(faults, local.FAULT_FLAGS, job.spec.world_size, local_checks.job_steps(job))
    assert str(info.value) == message and info.value.exit_code == 2


def test_faults_inside_the_job_pass_and_unknown_last_step_is_not_guessed():
    faults = local.parse_fault_flags({"kill": "rank=1,step=300", "bad_batch": "step=5,rank=-1"})
    local_checks.check_faults(faults, local.FAULT_FLAGS, 2, 300)
    local_checks.check_faults(local.parse_fault_flags({"kill": "rank=1,step=10000"}), local.FAULT_FLAGS, 2, None)


def test_size_warning_names_processes_and_cores():
    assert local_checks.size_warning(4, 2) is None  # two per core: fine
    line = local_checks.size_warning(32, 2)
    assert line.startswith("warning: this job starts 32 processes on 2 CPU cores (16 per core)")
    assert local_checks.size_warning(32, None) is None


@pytest.mark.parametrize("words", [["run"], ["dev", "up"], ["get"]], ids=" ".join)
def test_help_has_no_rest_markup_or_source_paths(words):
    text = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200"}).stdout
    assert "Usage: railtrain" in text
    assert "``" not in text and not re.search(r"\w+/\w+\.py", text), text
    if words == ["get"]:  # get takes no manifest: its namespace comes from --namespace or the kubeconfig context only
        assert "Namespace; default: the kubeconfig context's." in text and "manifest" not in text


def test_memory_warning_for_a_model_too_big_for_the_machine():
    gpu = parse_manifest(manifests.job(command=TRAINER, args=["--preset=1b"], nodes=4, procsPerNode=8, parallelism={"data": 4, "fsdp": 8}))
    line = local_checks.memory_warning(gpu, 24 * 2**30)
    assert line == (
        "warning: the 1b model (1.23 billion parameters) needs about 74 GiB for weights, gradients and AdamW state "
        "(16 bytes per parameter × 4 data-parallel replicas); this machine has 24 GiB"
    )
    assert local_checks.memory_warning(gpu, 1024 * 2**30) is None
    # Context parallel under DDP: every rank of a ring holds a replica; under FSDP2 the ring shares one.
    ring = parse_manifest(manifests.job(command=TRAINER, args=["--preset=1b"], nodes=1, procsPerNode=8, parallelism={"data": 2, "context": 4}))
    assert "× 8 data-parallel replicas" in local_checks.memory_warning(ring, 24 * 2**30)
    sharded = parse_manifest(manifests.job(command=TRAINER, args=["--preset=1b"], nodes=1, procsPerNode=8, parallelism={"data": 2, "fsdp": 2, "context": 2}))
    assert "× 2 data-parallel replicas" in local_checks.memory_warning(sharded, 24 * 2**30)
    assert local_checks.memory_warning(_job(command=TRAINER, args=["--preset", "tiny"]), 24 * 2**30) is None
    assert local_checks.memory_warning(_job(command=["python", "train.py"], args=["--preset=1b"]), 2**30) is None  # not our trainer: no guess


def test_the_gpu_example_warns_up_front_with_the_numbers(tmp_path):
    """examples/gpu on this machine: the warnings and the start line come before any process output (stopped at once here)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "gpu" / "trainingjob.yaml"
    proc = subprocess.Popen([sys.executable, "-m", "railtrain.cli.main", "run", str(example), "--local", "--grace", "1"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("starting "):
                break
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    said = "".join(lines)
    assert "starting 32 ranks on 4 local nodes" in said, said
    assert "warning: the 1b model (1.23 billion parameters)" in said
    if (os.cpu_count() or 1) * local_checks.OVERSUBSCRIBED < 32:
        assert f"warning: this job starts 32 processes on {os.cpu_count()} CPU cores" in said
