"""Every TrainingJob the project shows a user is a valid manifest whose trainer arguments the trainer accepts.

Two sources: the example folders (``examples/*/trainingjob.yaml``, each with its
README), and every TrainingJob in the documentation: YAML files under ``docs/``
and the fenced ``yaml`` blocks of ``README.md`` and ``docs/*.md`` whose
document is ``kind: TrainingJob`` (spec fragments such as ``spec: {checkpoint:
...}`` are not manifests and are left out). Each goes through ``railtrain
validate``, which also runs the trainer's own checks on its arguments
(:mod:`railtrain.trainer.preflight`), so a documented job that ``validate``,
``submit`` or ``run --local`` would refuse fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from railtrain.cli.main import app
from railtrain.crds.validation import load_manifest
from railtrain.trainer.config import parse_args

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/trainingjob.yaml"))
FENCE = re.compile(r"^(?P<indent>[ \t]*)```ya?ml[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


def documented_jobs() -> list[tuple[str, str]]:
    """``(where, YAML text)`` of every TrainingJob in README.md and docs/: ``docs/**/*.yaml`` files and fenced yaml blocks."""
    found: list[tuple[str, str]] = []
    for path in sorted((ROOT / "docs").rglob("*.y*ml")):
        found.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        for block in FENCE.finditer(text):
            indent = len(block["indent"])
            body = "".join(line[indent:] if line[:indent].isspace() else line for line in block["body"].splitlines(keepends=True))
            line = text.count("\n", 0, block.start()) + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", body))
    return [(where, body) for where, body in found if any(isinstance(d, dict) and d.get("kind") == "TrainingJob" for d in yaml.safe_load_all(body))]


DOCUMENTED = documented_jobs()


def test_there_are_examples():
    assert {p.parent.name for p in EXAMPLES} >= {"tiny", "gpu"}


def test_the_documented_jobs_are_found():
    """The finder sees the fenced manifests it is meant to check (a broken pattern must not pass by finding none)."""
    assert {where.split(":")[0] for where, _ in DOCUMENTED} >= {"docs/template.md", "docs/fabric.md"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_validates_and_its_trainer_args_parse(path):
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    job = load_manifest(path)
    if path.parent.name not in ("own-loop", "torchtitan"):  # a user's own script / torchtitan's trainer (their own tests)
        assert job.spec.command == ["torchrun", "-m", "railtrain.trainer"]
        parse_args(job.spec.args)  # raises on a flag the trainer does not know or a bad value
    assert (path.parent / "README.md").is_file()


@pytest.mark.parametrize("where, text", DOCUMENTED, ids=[where for where, _ in DOCUMENTED])
def test_every_documented_training_job_validates(where, text, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, f"{where}: {result.output}"
