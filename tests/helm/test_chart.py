"""The Helm chart with the real ``helm``: its values schema refuses bad values, the real API server accepts
every object it renders (also in a namespace enforcing pod security ``restricted``), and its RBAC grants what the
operator does and no more."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "railtrain"


@pytest.fixture(scope="module")
def helm() -> str:
    out = subprocess.run(["bash", str(REPO / "cli/controlplane/install-helm.sh")], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def render(helm: str, namespace: str, *sets: str) -> list[dict]:
    args = [helm, "template", "rt", str(CHART), "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_chart_renders_crd_operator_rbac_service_dashboard_and_test_hook(helm):
    docs = render(helm, "railtrain-system", "topology.preset=gke")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "Pod", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]
    deploy = of_kind(docs, "Deployment")[0]
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["railtrain-operator"]
    assert "--topology-preset=gke" in container["args"] and "--lease-namespace=$(POD_NAMESPACE)" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz" and container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    test_pod = of_kind(docs, "Pod")[0]
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["containers"][0]["image"] == container["image"]  # the operator image: nothing else to pull
    selector = deploy["spec"]["selector"]["matchLabels"]  # the Service's and the PDB's too: the test pod is no replica
    assert not selector.items() <= test_pod["metadata"]["labels"].items(), test_pod["metadata"]["labels"]
    levels = of_kind(render(helm, "x", "topology.levels={a,b}"), "Deployment")[0]
    assert "--topology-levels=a,b" in levels["spec"]["template"]["spec"]["containers"][0]["args"]
    assert deploy["spec"]["replicas"] == 2  # high availability by default: a leader and a standby
    single = render(helm, "railtrain-system", "replicaCount=1")
    assert of_kind(single, "Deployment")[0]["spec"]["replicas"] == 1
    assert "PodDisruptionBudget" not in [d["kind"] for d in single], "one replica: a PDB would block every node drain"
    assert "--fabric-profile=railtrain" in container["args"]
    aws = of_kind(render(helm, "x", "fabricProfile=aws"), "Deployment")[0]
    assert "--fabric-profile=aws" in aws["spec"]["template"]["spec"]["containers"][0]["args"]


def test_the_charts_operator_args_are_what_the_operators_one_parser_accepts(helm):
    from railtrain.operator import settings

    for sets, bound in (((), settings.DEFAULT_MAX_QUARANTINES_PER_HOUR), (("maxQuarantinesPerHour=2",), 2)):
        deploy = next(d for d in render(helm, "x", *sets) if d["kind"] == "Deployment")
        args = [a.replace("$(POD_NAMESPACE)", "x") for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"]]  # the kubelet expands it
        parsed = settings.parse(args, environ={})
        assert parsed.max_quarantines_per_hour == bound and parsed.resync_seconds == 2.0
        assert (parsed.lease_namespace, parsed.lease_seconds, parsed.log_format, parsed.stale_seconds) == ("x", 8, "text", 120)
    deploy = of_kind(render(helm, "x", "fabricProfile=gke"), "Deployment")[0]
    args = [a.replace("$(POD_NAMESPACE)", "x") for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert settings.parse(args, environ={}).fabric.name == "gke"
    deploy = of_kind(render(helm, "x", "kueue.enabled=true", "kueue.defaultQueue=team-a", "kueue.only=true"), "Deployment")[0]
    args = [a.replace("$(POD_NAMESPACE)", "x") for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert (settings.parse(args, environ={}).kueue_queue, settings.parse(args, environ={}).kueue_only) == ("team-a", True)
    deploy = of_kind(render(helm, "x", "kueue.defaultQueue=team-a", "kueue.only=true"), "Deployment")[0]  # Kueue off: no Kueue flags
    assert not [a for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--kueue")]


def test_two_replicas_get_a_disruption_budget_and_spread_over_nodes(helm):
    docs = render(helm, "railtrain-system", "replicaCount=2")
    assert of_kind(docs, "Deployment")[0]["spec"]["replicas"] == 2
    assert of_kind(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 1
    anti = of_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_the_crd_is_a_template_upgrades_apply_and_uninstall_keeps(helm):
    """Helm installs crds/ once and never upgrades it; the chart's CRD is a template instead (helm/railtrain/README.md)."""
    assert not (CHART / "crds").exists()
    crd = of_kind(render(helm, "railtrain-system"), "CustomResourceDefinition")[0]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    generated = yaml.safe_load((REPO / "crds" / "trainingjob.yaml").read_text())
    assert crd["spec"] == generated["spec"] and crd["metadata"]["name"] == generated["metadata"]["name"]
    assert of_kind(render(helm, "railtrain-system", "crds.install=false"), "CustomResourceDefinition") == []


def test_the_charts_version_moves_with_its_crd(tmp_path):
    """Chart.yaml records the SHA-256 of the CRD it ships; a changed CRD without a new chart version fails here (issue 26 item 4)."""
    from railtrain.crds.__main__ import CRD_SHA_ANNOTATION, crd_sha256, record_in_chart

    text = (CHART / "files" / "trainingjob.yaml").read_text()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"][CRD_SHA_ANNOTATION] == crd_sha256(text), "the chart's CRD changed but its version did not: run `python -m railtrain.crds`"
    # The generator moves the version with the CRD, and only then.
    copy = tmp_path / "Chart.yaml"
    copy.write_text((CHART / "Chart.yaml").read_text())
    assert record_in_chart(copy, text) is False and copy.read_text() == (CHART / "Chart.yaml").read_text()
    changed = text + "# one more field\n"
    assert record_in_chart(copy, changed) is True
    moved = yaml.safe_load(copy.read_text())
    version = [int(v) for v in chart["version"].split(".")]
    assert moved["version"] == f"{version[0]}.{version[1]}.{version[2] + 1}" and moved["appVersion"] == chart["appVersion"]
    assert moved["annotations"][CRD_SHA_ANNOTATION] == crd_sha256(changed)


def test_monitors_and_dashboard(helm):
    docs = render(helm, "mon", "metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kps",
                  "dashboard.folder=Training")  # fmt: skip
    sm, pm = of_kind(docs, "ServiceMonitor")[0], of_kind(docs, "PodMonitor")[0]
    assert sm["metadata"]["labels"]["release"] == "kps" and sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert pm["spec"]["selector"]["matchExpressions"] == [{"key": "railtrain.dev/job-name", "operator": "Exists"}]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"  # the trainer pods' container port (operator/job/render.py)
    cm = of_kind(docs, "ConfigMap")[0]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["annotations"] == {"grafana_folder": "Training"}
    dashboard = json.loads(cm["data"]["railtrain.json"])
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    for words in ("Jobs by phase", "Running", "restarts by reason", "Goodput", "Tokens per second", "MFU", "Straggler", "Quarantined nodes"):
        assert words.lower() in titles.lower(), words
    # Every metric a panel queries is one railtrain exports (operator or trainer), so no panel stays empty by a typo.
    exported = set()
    for source in [*(REPO / "operator").glob("*.py"), *(REPO / "trainer").rglob("*.py")]:
        exported |= set(re.findall(r'"(railtrain_[a-z_]+)"', source.read_text()))
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"railtrain_[a-z_]+", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert base in exported or base.removesuffix("_total") in exported, (panel["title"], name)


@pytest.mark.parametrize(
    "value,field",
    [
        ("resyncSeconds=abc", "resyncSeconds"),
        ("replicaCont=2", "replicaCont"),
        ("logFormat=xml", "logFormat"),
        ("leaderElection.leaseDurationSeconds=60", "leaseDurationSeconds"),
        ("topology.preset=azure", "preset"),
        ("metricsPort=80", "metricsPort"),
    ],
)  # fmt: skip
def test_the_values_schema_refuses_a_bad_value_naming_it(helm, value, field):
    for command in (["template", "rt"], ["lint"]):
        out = subprocess.run([helm, *command, str(CHART), "--set", value], capture_output=True, text=True)
        assert out.returncode != 0, (command, value)
        assert field in out.stderr + out.stdout and "schema" in (out.stderr + out.stdout).lower(), (command, out.stderr, out.stdout)
        assert "Traceback" not in out.stderr


def test_helm_install_with_a_bad_value_fails_before_creating_anything(helm, cluster, namespace):
    out = subprocess.run([helm, "install", "rt", str(CHART), "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace,
                          "--set", "resyncSeconds=abc"], capture_output=True, text=True)  # fmt: skip
    assert out.returncode != 0 and "resyncSeconds" in out.stderr and "schema" in out.stderr.lower(), out.stderr
    listed = subprocess.run([helm, "list", "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace, "-q"], capture_output=True, text=True, check=True)
    assert listed.stdout.strip() == ""
    assert cluster.kubectl("get", "all,serviceaccounts,roles", "-n", namespace, "-l", "app.kubernetes.io/instance=rt", "-o", "name").stdout.strip() == ""


def test_the_api_server_accepts_every_object_in_a_restricted_namespace(helm, cluster, kube):
    """Server-side dry-run of every rendered object (hooks included) in a namespace that enforces pod security
    ``restricted``; the Deployment's pods are dry-run as Pods too, since the namespace's admission checks
    only Pods (a Deployment is only warned about)."""
    ns = f"restricted-{uuid.uuid4().hex[:6]}"
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    kube.core.create_namespace({"metadata": {"name": ns, "labels": labels}})
    try:
        docs = render(helm, ns, "replicaCount=2")
        deploy = of_kind(docs, "Deployment")[0]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-as-pod", "namespace": ns, "labels": deploy["spec"]["template"]["metadata"]["labels"]},
               "spec": deploy["spec"]["template"]["spec"]}  # fmt: skip
        # A Pod needs its ServiceAccount: create the operator's for real (a dry-run persists nothing), wait for the default one.
        wait_for(lambda: kube.core.read_namespaced_service_account("default", ns), 30, f"ServiceAccount {ns}/default")
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(of_kind(docs, "ServiceAccount")[0]))
        out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs + [pod]), check=False)
        assert out.returncode == 0, out.stderr
        assert "PodSecurity" not in out.stderr and "violate" not in out.stderr, out.stderr
        assert out.stdout.count("(server dry run)") == len(docs) + 1, out.stdout
        # A template without the restricted fields is refused here: the check above is not vacuous.
        loose = json.loads(json.dumps(pod))
        loose["spec"]["securityContext"].pop("seccompProfile")
        loose["spec"]["containers"][0]["securityContext"].pop("seccompProfile")
        refused = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(loose), check=False)
        assert refused.returncode != 0 and "seccompProfile" in refused.stderr, refused.stderr
    finally:
        kube.core.delete_namespace(ns)


def test_rbac_covers_the_operator_and_the_lease_only_by_name(helm, cluster, namespace):
    docs = [d for d in render(helm, namespace) if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")]
    suffix = uuid.uuid4().hex[:6]
    for d in docs:  # cluster-scoped names must not collide across tests
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            d["metadata"]["name"] += f"-{suffix}"
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] += f"-{suffix}"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    sa = f"system:serviceaccount:{namespace}:rt-operator"

    def can(*args: str) -> bool:
        return cluster.kubectl("auth", "can-i", *args, f"--as={sa}", check=False).stdout.strip() == "yes"

    try:
        for verb, resource in [
            ("watch", "trainingjobs.railtrain.dev"), ("patch", "trainingjobs.railtrain.dev/status"),
            ("create", "pods"), ("delete", "pods"), ("patch", "pods"), ("list", "pods"),
            ("create", "services"), ("list", "nodes"), ("create", "events"),
            ("patch", "nodes"), ("delete", "trainingjobs.railtrain.dev"),
        ]:  # fmt: skip
            assert can(verb, resource, "--all-namespaces"), (verb, resource)
        for verb in ("delete", "update", "create"):  # least privilege: the quarantine taint needs patch on nodes, nothing more
            assert not can(verb, "nodes"), verb
        for verb in ("get", "update"):  # the Lease: its one name, in the release namespace only
            assert can(verb, "leases.coordination.k8s.io/railtrain-operator", "-n", namespace), verb
            assert not can(verb, "leases.coordination.k8s.io/kube-scheduler", "-n", namespace), verb
            assert not can(verb, "leases.coordination.k8s.io/kube-scheduler", "-n", "kube-system"), verb
        assert can("create", "leases.coordination.k8s.io", "-n", namespace)
        assert not can("create", "leases.coordination.k8s.io", "-n", "kube-system")
    finally:
        for d in docs:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], check=False)


def test_kueue_rbac_only_when_enabled(helm):
    def kueue_rules(*sets: str) -> dict[str, list[str]]:
        role = of_kind(render(helm, "railtrain-system", *sets), "ClusterRole")[0]
        return {r: rule["verbs"] for rule in role["rules"] if set(rule["apiGroups"]) & {"kueue.x-k8s.io", "scheduling.k8s.io"} for r in rule["resources"]}

    assert kueue_rules() == {}  # off by default: the operator may not touch Kueue's objects
    rules = kueue_rules("kueue.enabled=true")
    assert set(rules["workloads"]) >= {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert set(rules["workloads/status"]) >= {"update", "patch"} and rules["workloads/finalizers"] == ["update"]
    for read_only in ("resourceflavors", "workloadpriorityclasses", "priorityclasses"):
        assert rules[read_only] == ["get", "list", "watch"], read_only


def test_the_queue_label_cannot_change_while_the_job_is_admitted(helm, cluster, kube, namespace, operator_process):
    """Kueue's rule for the jobs it manages (the queue-name label is immutable while the job is not suspended), held
    for TrainingJobs by the chart's ValidatingAdmissionPolicy (``kueue.enabled``) on the real API server: while the
    Scheduled condition is True, adding, changing or removing ``kueue.x-k8s.io/queue-name`` is refused with one
    sentence naming the label and what to do; other labels still change; once Scheduled is False (suspended, or
    waiting for admission) the label changes. The worker's operator is paused (SIGSTOP) meanwhile: the test writes
    the jobs' Scheduled condition itself, which a running operator would overwrite (it failed so in a fresh-clone
    run, where another module had started the operator)."""
    from kubernetes.client.exceptions import ApiException
    from railtrain.crds import contract
    from railtrain.crds.kueue import QUEUE_LABEL

    assert not [d for d in render(helm, namespace) if d["kind"].startswith("ValidatingAdmissionPolicy")]  # only with Kueue
    docs = [d for d in render(helm, namespace, "kueue.enabled=true") if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    suffix = uuid.uuid4().hex[:6]
    policy, binding = docs
    policy["metadata"]["name"] += f"-{suffix}"  # cluster-scoped: unique per run, and bound to this test's namespace only
    binding["metadata"]["name"] += f"-{suffix}"
    binding["spec"]["policyName"] = policy["metadata"]["name"]
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    custom, group, version, plural = kube.custom, contract.API_GROUP, contract.API_VERSION, contract.PLURAL
    paused = operator_process.proc if operator_process.running() else None
    if paused is not None:
        os.kill(paused.pid, signal.SIGSTOP)

    def scheduled(name: str, status: str) -> None:
        custom.patch_namespaced_custom_object_status(group, version, namespace, plural, name, {"status": {"conditions": [
            {"type": "Scheduled", "status": status, "reason": "Test", "message": "set by the test", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})  # fmt: skip

    def relabel(name: str, value: str | None, dry_run: bool = False) -> str:
        """'' when the API server took the label change, else its message."""
        try:
            custom.patch_namespaced_custom_object(group, version, namespace, plural, name, {"metadata": {"labels": {QUEUE_LABEL: value}}},
                                                  **({"dry_run": "All"} if dry_run else {}))  # fmt: skip
            return ""
        except ApiException as err:
            assert err.status == 422, err
            return json.loads(err.body)["message"]

    try:
        body = {"apiVersion": f"{group}/{version}", "kind": "TrainingJob", "metadata": {"name": "queued", "labels": {QUEUE_LABEL: "team-a"}},
                "spec": {"image": "ghcr.io/railtrain/trainer:0.1.0", "command": ["torchrun", "-m", "railtrain.trainer"], "nodes": 2, "procsPerNode": 8,
                         "resources": {"gpus": 8}}}  # fmt: skip
        custom.create_namespaced_custom_object(group, version, namespace, plural, body)
        own = json.loads(json.dumps(body))
        own["metadata"] = {"name": "own-queue"}  # railtrain's own queue: no label
        custom.create_namespaced_custom_object(group, version, namespace, plural, own)
        scheduled("queued", "True")
        scheduled("own-queue", "True")
        wait_for(lambda: relabel("queued", "team-b", dry_run=True), 30, "the policy in force")  # the API server loads a new policy within seconds
        message = relabel("queued", "team-b")
        assert f"metadata.labels[{QUEUE_LABEL}] cannot change while the job is admitted (its Scheduled condition is True)" in message, message
        assert "spec.runPolicy.suspend" in message and 'from "team-a" to "team-b"' in message, message
        assert relabel("queued", None)  # removing it (to railtrain's own queue) is a change too
        assert relabel("own-queue", "team-a")  # and so is adding it to a job railtrain's queue admitted
        custom.patch_namespaced_custom_object(group, version, namespace, plural, "queued", {"metadata": {"labels": {"team": "vision"}}})  # other labels: free
        job = custom.get_namespaced_custom_object(group, version, namespace, plural, "queued")
        assert job["metadata"]["labels"] == {QUEUE_LABEL: "team-a", "team": "vision"}
        scheduled("queued", "False")  # suspended, or waiting for admission: the label may change
        assert relabel("queued", "team-b") == ""
        assert custom.get_namespaced_custom_object(group, version, namespace, plural, "queued")["metadata"]["labels"][QUEUE_LABEL] == "team-b"
    finally:
        if paused is not None:
            os.kill(paused.pid, signal.SIGCONT)
        cluster.kubectl("delete", "validatingadmissionpolicybinding", binding["metadata"]["name"], check=False)
        cluster.kubectl("delete", "validatingadmissionpolicy", policy["metadata"]["name"], check=False)
