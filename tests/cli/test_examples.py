"""The examples stay valid manifests whose trainer arguments the trainer accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from railtrain.cli.main import app
from railtrain.crds.validation import load_manifest
from railtrain.trainer.config import parse_args

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*/trainingjob.yaml"))


def test_there_are_examples():
    assert {p.parent.name for p in EXAMPLES} >= {"tiny", "gpu"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_validates_and_its_trainer_args_parse(path):
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    job = load_manifest(path)
    assert job.spec.command == ["torchrun", "-m", "railtrain.trainer"]
    parse_args(job.spec.args)  # raises on a flag the trainer does not know or a bad value
    assert (path.parent / "README.md").is_file()
