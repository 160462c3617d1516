"""The shipped examples, submitted through the CLI to a real control plane with the operator running."""

from __future__ import annotations

import uuid

import pytest
import yaml

from .conftest import railtrain, wait_for

pytestmark = pytest.mark.cluster


def job_yaml(e2e_cluster, name: str, namespace: str) -> dict:
    out = railtrain("get", name, "-n", namespace, "-o", "yaml", kubeconfig=e2e_cluster.kubeconfig, check=False)
    return yaml.safe_load(out.stdout) if out.returncode == 0 else {}


@pytest.fixture
def ns(e2e_cluster):
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    e2e_cluster.kubectl_run("create", "namespace", name)
    wait_for(lambda: "default" in e2e_cluster.kubectl_run("get", "serviceaccounts", "-n", name), 30, "default ServiceAccount")
    yield name
    e2e_cluster.kubectl_run("delete", "namespace", name, "--wait=false")


@pytest.mark.parametrize("example,name,ranks", [("examples/gpu/trainingjob.yaml", "llama-1b", 4), ("examples/tiny/trainingjob.yaml", "tiny", 2)])
def test_example_runs_as_a_placed_gang(e2e_cluster, operator_proc, ns, example, name, ranks):
    railtrain("validate", example)
    railtrain("submit", example, "-n", ns, kubeconfig=e2e_cluster.kubeconfig)
    status = wait_for(lambda: (j := job_yaml(e2e_cluster, name, ns)).get("status", {}).get("phase") == "Running" and j["status"], 120, f"{name} Running")
    assert sorted(p["rank"] for p in status["placement"]) == list(range(ranks))
    assert len({p["node"] for p in status["placement"]}) == ranks

    shown = railtrain("get", name, "-n", ns, kubeconfig=e2e_cluster.kubeconfig).stdout
    assert "Running" in shown and all(p["node"] in shown for p in status["placement"])
    described = e2e_cluster.kubectl_run("describe", "trainingjob", name, "-n", ns)
    assert "GangPlaced" in described and "AllRanksRunning" in described

    # Every rank exits 0 (KWOK stage driven by a label) → the job Succeeded.
    for rank in range(ranks):
        e2e_cluster.kubectl_run("label", "pod", f"{name}-{rank}", "-n", ns, "railtrain.dev/kwok-exit=0")
    wait_for(lambda: job_yaml(e2e_cluster, name, ns).get("status", {}).get("phase") == "Succeeded", 60, f"{name} Succeeded")


def test_submitting_a_bad_manifest_is_one_sentence(e2e_cluster, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: bad}\nspec: {image: x, nodes: 2, procsPerNode: 2, parallelism: {data: 3}}\n")
    out = railtrain("submit", str(bad), kubeconfig=e2e_cluster.kubeconfig, check=False)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "spec.parallelism" in out.stderr
