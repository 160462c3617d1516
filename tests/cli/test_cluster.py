"""`submit` and `get` against the real local control plane (kube-apiserver with the generated CRD)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from railtrain.cli.main import app
from tests.cli import manifests

pytestmark = pytest.mark.cluster
runner = CliRunner()


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trainingjob_crd(cluster, kube):
    """The session cluster normally has the CRD already; install it if not (server-side apply is idempotent)."""
    from kubernetes.client.exceptions import ApiException

    try:
        kube.apiext.read_custom_resource_definition("trainingjobs.railtrain.dev")
    except ApiException as err:
        if err.status != 404:
            raise
        cluster.install_crds([REPO / "crds" / "trainingjob.yaml"])


@pytest.fixture
def cli(cluster, trainingjob_crd):
    """Run the CLI against the test cluster; returns the typer Result."""

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [*args, "--kubeconfig", str(cluster.kubeconfig)], input=input)

    return invoke


def test_submit_then_get(cli, namespace, tmp_path):
    path = manifests.write(tmp_path / "job.yaml", manifests.job(name="llama", nodes=2, procsPerNode=8, resources={"gpus": 8}, parallelism={"fsdp": 16}))
    result = cli("submit", str(path), "-n", namespace)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"trainingjob.railtrain.dev/llama created in namespace {namespace}"

    listed = cli("get", "-n", namespace)
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "NODES", "RESTARTS", "STEP", "GOODPUT", "AGE", "REASON"]
    assert row.split()[0] == "llama" and row.split()[2:4] == ["2", "0"]  # the phase depends on whether an operator runs

    one = cli("get", "llama", "-n", namespace)
    assert one.exit_code == 0, one.output
    assert "Name:       llama" in one.stdout and "2 nodes × 8 processes (world size 16)" in one.stdout

    as_yaml = cli("get", "llama", "-n", namespace, "-o", "yaml")
    assert as_yaml.exit_code == 0 and "procsPerNode: 8" in as_yaml.stdout and "managedFields" not in as_yaml.stdout

    again = cli("submit", str(path), "-n", namespace)
    assert again.exit_code == 1
    assert again.stderr.strip().splitlines() == [
        f"error: trainingjob llama already exists in namespace {namespace}; delete it first "
        f"('railtrain delete llama -n {namespace}') or choose another metadata.name"
    ]


def test_submit_reads_the_manifest_from_stdin(cli, namespace):
    """`sed ... job.yaml | railtrain submit -`: the piped manifest is validated, then created as sent."""
    text = yaml.safe_dump(manifests.job(name="piped", nodes=2, procsPerNode=8, resources={"gpus": 8}, parallelism={"fsdp": 16}))
    result = cli("submit", "-", "-n", namespace, input=text)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"trainingjob.railtrain.dev/piped created in namespace {namespace}"
    one = cli("get", "piped", "-n", namespace, "-o", "yaml")
    assert one.exit_code == 0, one.output
    assert yaml.safe_load(one.stdout)["spec"]["procsPerNode"] == 8

    wrong = cli("submit", "-", "-n", namespace, input=text.replace("name: piped", "name: piped-2").replace("nodes: 2", "nodes: two"))
    assert wrong.exit_code == 1
    assert wrong.stderr.strip().splitlines() == ['error: <stdin>: spec.nodes: must be an integer, not the string "two"']
    assert cli("get", "piped-2", "-n", namespace).exit_code == 1  # nothing was created


def test_the_api_server_refusal_names_the_field(cli, namespace, tmp_path):
    """--no-validate skips the local check, so this is kube-apiserver's own CEL rule speaking."""
    path = manifests.write(tmp_path / "job.yaml", manifests.job(nodes=2, procsPerNode=4, parallelism={"data": 2, "fsdp": 2}))
    result = cli("submit", str(path), "-n", namespace, "--no-validate")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the API server refused trainingjob tiny: spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode")
    assert "Traceback" not in result.output


def test_the_api_server_refuses_unknown_fields(cli, namespace, tmp_path):
    path = manifests.write(tmp_path / "job.yaml", manifests.job(bogus=1))
    result = cli("submit", str(path), "-n", namespace, "--no-validate")
    assert result.exit_code == 1, result.output
    assert "the API server refused trainingjob tiny" in result.stderr and "bogus" in result.stderr


def test_missing_job_and_namespace(cli, namespace, tmp_path):
    missing = cli("get", "nope", "-n", namespace)
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"error: trainingjob nope not found in namespace {namespace}"

    path = manifests.write(tmp_path / "job.yaml", manifests.job())
    nowhere = cli("submit", str(path), "-n", f"{namespace}-absent")
    assert nowhere.exit_code == 1
    assert nowhere.stderr.strip().startswith(f"error: --namespace: namespace {namespace}-absent does not exist")

    empty = cli("get", "-n", namespace)
    assert empty.exit_code == 0 and f"no trainingjobs in namespace {namespace}" in empty.stderr
