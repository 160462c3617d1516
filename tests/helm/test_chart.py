"""The Helm chart renders, the real API server accepts every object, and its RBAC grants what the operator does."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "railtrain"


@pytest.fixture(scope="module")
def helm() -> str:
    out = subprocess.run(["bash", str(REPO / "cli/controlplane/install-helm.sh")], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def render(helm: str, namespace: str, *sets: str) -> list[dict]:
    args = [helm, "template", "rt", str(CHART), "--namespace", namespace, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_chart_renders_crd_operator_and_rbac(helm):
    docs = render(helm, "railtrain-system", "topology.preset=gke")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment", "ServiceAccount"]
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["railtrain-operator"]
    assert "--topology-preset=gke" in container["args"]
    levels = next(d for d in render(helm, "x", "topology.levels={a,b}") if d["kind"] == "Deployment")
    assert "--topology-levels=a,b" in levels["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--fabric-profile=railtrain" in container["args"]
    aws = next(d for d in render(helm, "x", "fabricProfile=aws") if d["kind"] == "Deployment")
    assert "--fabric-profile=aws" in aws["spec"]["template"]["spec"]["containers"][0]["args"]


def test_the_charts_operator_args_are_what_the_operators_one_parser_accepts(helm):
    from railtrain.operator import settings

    for sets, bound in (((), settings.DEFAULT_MAX_QUARANTINES_PER_HOUR), (("maxQuarantinesPerHour=2",), 2)):
        deploy = next(d for d in render(helm, "x", *sets) if d["kind"] == "Deployment")
        parsed = settings.parse(deploy["spec"]["template"]["spec"]["containers"][0]["args"], environ={})
        assert parsed.max_quarantines_per_hour == bound and parsed.resync_seconds == 2.0
    deploy = next(d for d in render(helm, "x", "fabricProfile=gke") if d["kind"] == "Deployment")
    assert settings.parse(deploy["spec"]["template"]["spec"]["containers"][0]["args"], environ={}).fabric.name == "gke"


def test_api_server_accepts_the_chart_and_rbac_covers_the_operator(helm, cluster, namespace):
    docs = [d for d in render(helm, namespace) if d["kind"] != "CustomResourceDefinition"]  # the CRD is installed already
    suffix = uuid.uuid4().hex[:6]
    for d in docs:  # cluster-scoped names must not collide across tests
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["name"] += f"-{suffix}"
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] += f"-{suffix}"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    sa = f"system:serviceaccount:{namespace}:rt-operator"
    try:
        for verb, resource in [
            ("watch", "trainingjobs.railtrain.dev"), ("patch", "trainingjobs.railtrain.dev/status"),
            ("create", "pods"), ("delete", "pods"), ("patch", "pods"), ("list", "pods"),
            ("create", "services"), ("list", "nodes"), ("create", "events"),
            ("patch", "nodes"), ("delete", "trainingjobs.railtrain.dev"),
            ("get", "leases.coordination.k8s.io"), ("create", "leases.coordination.k8s.io"), ("update", "leases.coordination.k8s.io"),
        ]:  # fmt: skip
            out = cluster.kubectl("auth", "can-i", verb, resource, "--all-namespaces", f"--as={sa}", check=False)
            assert out.stdout.strip() == "yes", (verb, resource, out.stdout, out.stderr)
        for verb in ("delete", "update", "create"):  # least privilege: the quarantine taint needs patch on nodes, nothing more
            assert cluster.kubectl("auth", "can-i", verb, "nodes", f"--as={sa}", check=False).stdout.strip() == "no", verb
    finally:
        for d in docs:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], check=False)
