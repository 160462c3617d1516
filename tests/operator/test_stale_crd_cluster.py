"""Issue 26 item 4 on a real control plane: a CRD from an older railtrain.

Input: the README's kind flow with Helm ``crds.install=false`` against a CRD applied by an older railtrain, which
lacks ``status.admission`` and ``status.hold``: the API server prunes both from every status write, so a Running
job loses its admission record, and the operator used to start silently. Now it refuses to start with one sentence
naming the missing fields (exit 1). And ``helm upgrade`` from the chart that kept the CRD in ``crds/`` (0.1.0) fails
on Helm's ownership check: helm/railtrain/README.md gives the one command that fixes it, run here as written.

This module starts its own control plane: it replaces the one CRD every other test's operator relies on.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from railtrain.cli.controlplane.cluster import LocalCluster
from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import contract, schema
from tests.polling import wait_for

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
CRD_NAME = f"{contract.PLURAL}.{contract.API_GROUP}"
STALE = ("admission", "hold")  # the status fields an older railtrain's CRD lacks


@pytest.fixture(scope="module")
def own():
    local = LocalCluster(f"stale-crd-{uuid.uuid4().hex[:6]}")
    local.start(owner_pid=os.getpid())
    try:
        yield local
    finally:
        local.stop()


def stale_crd() -> dict:
    """Today's CRD as an older railtrain applied it: without status.admission and status.hold."""
    crd = copy.deepcopy(schema.crd())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for name in STALE:
        status.pop(name)
    return crd


def served_status_fields(local: LocalCluster) -> set[str]:
    out = local.kubectl("get", "crd", CRD_NAME, "-o", "json", check=False)
    if out.returncode != 0:
        return set()
    crd = yaml.safe_load(out.stdout)
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])


def apply_crd(local: LocalCluster, crd: dict, tmp_path: Path) -> None:
    path = tmp_path / f"crd-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(crd))
    local.install_crds([path])  # server-side apply, then waits for Established


def delete_crd(local: LocalCluster) -> None:
    local.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=true", "--timeout=60s")


def job(name: str, namespace: str) -> dict:
    return {"apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}", "kind": contract.KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": {"image": "img:1"}}  # fmt: skip


def admission_kept(local: LocalCluster, namespace: str) -> bool:
    """Write status.admission through the status subresource and read it back: whether the server kept it."""
    name = f"j{uuid.uuid4().hex[:6]}"
    local.kubectl("apply", "-f", "-", input=yaml.safe_dump(job(name, namespace)))
    patch = '{"status": {"phase": "Running", "admission": {"restarts": 0, "nodes": ["n1"], "created": true}}}'
    local.kubectl("patch", f"{contract.PLURAL}.{contract.API_GROUP}", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch)
    status = yaml.safe_load(local.kubectl("get", f"{contract.PLURAL}.{contract.API_GROUP}", name, "-n", namespace, "-o", "json").stdout)["status"]
    assert status["phase"] == "Running", status  # the write itself succeeded: nothing says a field was dropped
    return "admission" in status


def test_the_operator_refuses_to_start_against_a_crd_without_the_fields_it_writes(own, tmp_path):
    delete_crd(own)
    apply_crd(own, stale_crd(), tmp_path)
    own.kubectl("create", "namespace", "jobs")
    # The input: the stale CRD silently prunes the admission record of a Running job.
    wait_for(lambda: not admission_kept(own, "jobs"), 30, "the stale schema to be served")

    op = OperatorProcess(own.kubeconfig, tmp_path / "stale.log", resync_seconds=1)
    op.start()
    try:
        wait_for(lambda: not op.running(), 60, "the operator to refuse the stale CRD and exit")
    finally:
        op.stop()
    lines = op.log_path.read_text(errors="replace").splitlines()
    assert op.proc.returncode == 1, lines[-5:]
    assert "Traceback" not in "\n".join(lines)
    errors = [line for line in lines if line.startswith("railtrain-operator: error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], lines[-5:]
    assert f"the served CRD {CRD_NAME} is older than this operator" in errors[0], errors[0]
    assert "lacks status.admission, status.hold," in errors[0] and "prune" in errors[0], errors[0]
    assert "kubectl apply --server-side -f crds/trainingjob.yaml" in errors[0], errors[0]

    # This release's CRD: the record is kept and the operator starts.
    apply_crd(own, schema.crd(), tmp_path)
    wait_for(lambda: admission_kept(own, "jobs"), 30, "the current schema to be served")
    fresh = OperatorProcess(own.kubeconfig, tmp_path / "fresh.log", resync_seconds=1)
    fresh.start()
    try:
        wait_for(lambda: f"the served CRD {CRD_NAME} has every field" in fresh.log_path.read_text(errors="replace"), 60, "the check to pass")
        wait_for(lambda: "leading:" in fresh.log_path.read_text(errors="replace"), 60, "the operator to lead")
        assert fresh.running(), fresh.tail()
    finally:
        fresh.stop()


def readme_fix(release: str, namespace: str) -> str:
    """The one command helm/railtrain/README.md gives for the upgrade from the chart that kept the CRD in crds/."""
    text = (REPO / "helm" / "railtrain" / "README.md").read_text()
    section = text.split("### Upgrading from 0.1.0", 1)
    assert len(section) == 2, "helm/railtrain/README.md has no upgrade note for the chart that kept the CRD in crds/"
    commands = re.findall(r"^    (kubectl .+)$", section[1].split("\n## ", 1)[0], re.M)
    assert len(commands) == 1, commands
    return commands[0].replace("RELEASE", release).replace("NAMESPACE", namespace)


def test_helm_upgrade_from_the_chart_that_kept_the_crd_in_crds(own, tmp_path):
    helm = subprocess.run(["bash", str(REPO / "cli/controlplane/install-helm.sh")], capture_output=True, text=True, check=True).stdout.strip()
    # Chart 0.1.0: the same chart, its CRD (an older one) in crds/, which Helm installs once and never owns.
    old = tmp_path / "railtrain-0.1.0"
    shutil.copytree(REPO / "helm" / "railtrain", old)
    (old / "templates" / "crd.yaml").unlink()
    (old / "crds").mkdir()
    (old / "crds" / "trainingjob.yaml").write_text(yaml.safe_dump(stale_crd()))
    chart = yaml.safe_load((old / "Chart.yaml").read_text())
    (old / "Chart.yaml").write_text(yaml.safe_dump({**chart, "version": "0.1.0", "annotations": {}}))
    delete_crd(own)
    ns, env = "railtrain-system", {**os.environ, "KUBECONFIG": str(own.kubeconfig), "PATH": f"{own.bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def helm_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([helm, *args, "--namespace", ns], capture_output=True, text=True, env=env, timeout=300)

    installed = helm_run("install", "rt", str(old), "--create-namespace", "--set", "replicaCount=1")
    assert installed.returncode == 0, installed.stderr
    assert not {"admission", "hold"} & served_status_fields(own)

    refused = helm_run("upgrade", "rt", str(REPO / "helm" / "railtrain"), "--set", "replicaCount=1")
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr, refused.stderr  # Helm's own check, unchanged

    fix = subprocess.run(["bash", "-c", readme_fix("rt", ns)], capture_output=True, text=True, env=env)
    assert fix.returncode == 0, fix.stderr
    upgraded = helm_run("upgrade", "rt", str(REPO / "helm" / "railtrain"), "--set", "replicaCount=1")
    assert upgraded.returncode == 0, upgraded.stderr
    assert {"admission", "hold"} <= served_status_fields(own)  # the chart's CRD now applies on every upgrade
    crd = yaml.safe_load(own.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == "rt" and crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    helm_run("uninstall", "rt")
