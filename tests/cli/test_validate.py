"""`railtrain validate` and the command line's handling of user errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from railtrain.cli.main import app
from tests.cli import manifests

runner = CliRunner()


def test_valid_manifest_prints_the_gang(tmp_path):
    path = manifests.write(tmp_path / "job.yaml", manifests.job(nodes=4, procsPerNode=8, resources={"gpus": 8}, parallelism={"fsdp": 16, "data": 2}))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{path}: valid TrainingJob tiny (4 nodes × 8 processes, world size 32)"


def _drop_image(doc):
    del doc["spec"]["image"]
    return doc


BAD_MANIFESTS = [
    # (case, manifest or raw text, expected fragment of the one error sentence)
    ("missing field", _drop_image(manifests.job()), "spec.image: required field is missing"),
    ("wrong type", manifests.job(nodes="two"), 'spec.nodes: must be an integer, not the string "two"'),
    ("a string of digits is not an integer", manifests.job(priority="5"), 'spec.priority: must be an integer, not the string "5"'),
    ("a boolean is not an integer", manifests.job(procsPerNode=True), "spec.procsPerNode: must be an integer, not true"),
    ("empty level with policy required", manifests.job(topology={"policy": "required", "level": ""}), "spec.topology.level is required"),
    ("unknown field", manifests.job(gpus=8), "spec.gpus: unknown field"),
    (
        "parallelism product",
        manifests.job(nodes=2, procsPerNode=4, parallelism={"data": 2, "fsdp": 2}),
        "spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode",
    ),
    (
        "tensor across nodes",
        manifests.job(nodes=3, procsPerNode=4, parallelism={"data": 4, "tensor": 3}),
        "spec.parallelism.tensor must divide procsPerNode",
    ),
    ("invalid yaml", "apiVersion: railtrain.dev/v1alpha1\nspec: [unclosed\n", "not valid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence started at line 2, column 7)"),
    # finding 1 of the new-user trial: bad quantities
    ("cpu lots", manifests.job(resources={"cpu": "lots", "memory": "64Gi"}), 'spec.resources.cpu: "lots" is not a Kubernetes quantity; use e.g. 4, 500m or 1.5'),
    ("memory 2GB", manifests.job(resources={"memory": "2GB"}), 'spec.resources.memory: "2GB" is not a Kubernetes quantity; use e.g. 2Gi, 2G or 2000M'),
    ("shm lots", manifests.job(resources={"shm": "lots"}), 'spec.resources.shm: "lots" is not a Kubernetes quantity'),
    ("memory negative", manifests.job(resources={"memory": "-5Gi"}), "spec.resources.memory: -5Gi is negative; use a quantity of at least 0"),
    # finding 7: what used to pass silently
    (
        "duplicate key",
        "apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\nspec: {image: i, command: [a], nodes: 1, procsPerNode: 1, nodes: 3}\n",
        "line 4, column 59: key nodes appears twice in one mapping (first at column 32)",
    ),
    ("level not a label key", manifests.job(topology={"level": "not a label!!"}), 'spec.topology.level: "not a label!!" is not a Kubernetes label key'),
    ("empty checkpoint location", manifests.job(checkpoint={"location": ""}), "spec.checkpoint.location: must not be empty"),
    # finding 6: the project's wording, not pydantic's
    ("nodes below 1", manifests.job(nodes=0), "spec.nodes: must be at least 1, not 0"),
    ("procsPerNode above 64", manifests.job(procsPerNode=65), "spec.procsPerNode: must be at most 64, not 65"),
    ("name pattern", manifests.job(name="Bad_Name"), "metadata.name: \"Bad_Name\" is not allowed; use lowercase letters, digits and '-', starting with a letter"),
    ("name too long", manifests.job(name="a" * 53), "metadata.name: must have at most 52 characters, not 53"),
    ("empty image", manifests.job(image=""), "spec.image: must not be empty"),
    ("policy enum", manifests.job(topology={"policy": "strict"}), "spec.topology.policy: must be 'none', 'preferred' or 'required', not the string \"strict\""),
    (
        "parallelism numbers",
        manifests.job(nodes=4, procsPerNode=2, parallelism={"data": 3, "tensor": 2}),
        "data 3 × fsdp 1 × tensor 2 × pipeline 1 × context 1 = 6, but nodes 4 × procsPerNode 2 = 8",
    ),
    (
        "another kind",
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": []}}}},
        "kind: this is a batch/v1 Job, not a TrainingJob (apiVersion railtrain.dev/v1alpha1, kind TrainingJob)",
    ),
    (
        "template type",
        manifests.job(template={"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": 5}}]}}),
        "spec.template.spec.volumes[0].persistentVolumeClaim.claimName: must be of type string, got integer",
    ),
    (
        "template conflict",
        manifests.job(template={"spec": {"containers": [{"name": "trainer", "image": "other:1"}]}}),
        "spec.template.spec.containers[trainer].image conflicts with spec.image",
    ),
]


@pytest.mark.parametrize("case, doc, expected", BAD_MANIFESTS, ids=[c[0] for c in BAD_MANIFESTS])
def test_bad_manifest_gives_one_sentence_with_the_field_path(tmp_path, case, doc, expected):
    path = manifests.write(tmp_path / "job.yaml", doc)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: ")
    assert expected in lines[0]
    assert "Traceback" not in result.output
    assert not any(stock in lines[0] for stock in ("Input should", "String should", "List should", "Value error")), lines[0]
    assert result.stdout == ""


def test_one_node_one_process_is_singular(tmp_path):
    path = manifests.write(tmp_path / "job.yaml", manifests.job(nodes=1, procsPerNode=1))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{path}: valid TrainingJob tiny (1 node × 1 process, world size 1)"


def test_missing_file(tmp_path):
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'nope.yaml'}: no such file"]


def test_every_problem_is_reported_at_once(tmp_path):
    doc = manifests.job(nodes=0, bogus=1)
    del doc["spec"]["image"]
    result = runner.invoke(app, ["validate", str(manifests.write(tmp_path / "job.yaml", doc))])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3, result.stderr
    assert any("spec.image" in line for line in lines) and any("spec.nodes" in line for line in lines) and any("spec.bogus" in line for line in lines)


USAGE_ERRORS = [
    (["run", "job.yaml"], "--local"),
    (["get", "-o", "xml"], "'table', 'json', 'yaml'"),
    (["dev", "up", "--nodes", "0"], "--nodes"),
    (["validate", "job.yaml", "--bogus"], "--bogus"),
    (["get", "x", "-A"], "--all-namespaces"),
]


@pytest.mark.parametrize("args, names", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_bad_flags_give_one_sentence_naming_the_flag(args, names):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert names in lines[0]
    assert "Traceback" not in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("railtrain ")


def test_the_installed_entry_point_reports_errors_without_a_traceback(tmp_path):
    path = manifests.write(tmp_path / "job.yaml", manifests.job(nodes="two"))
    proc = subprocess.run([sys.executable, "-m", "railtrain.cli.main", "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {path}: spec.nodes: must be an integer, not the string \"two\""]


def test_null_means_unset_as_on_the_api_server(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: tiny}\n"
                    "spec: {image: img, nodes: 2, procsPerNode: 1, resources: {gpus: ~}}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(path.read_text().replace("gpus: ~", "gpu: ~"))
    result = runner.invoke(app, ["validate", str(unknown)])
    assert result.exit_code == 1 and "spec.resources.gpu: unknown field" in result.output
