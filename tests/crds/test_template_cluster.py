"""spec.template at the real kube-apiserver: the generated CRD type-checks the template with core/v1's schema and enforces the merge rule through CEL."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from railtrain.cli.controlplane import wait_until
from railtrain.crds import contract
from railtrain.crds.validation import parse_manifest

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples" / "production" / "trainingjob.yaml").read_text())
DELETE = object()
G, V, P = contract.API_GROUP, contract.API_VERSION, contract.PLURAL


def create(kube, namespace, body, dry_run=True):
    return kube.custom.create_namespaced_custom_object(G, V, namespace, P, body, dry_run="All" if dry_run else None)


def refusal(kube, namespace, body) -> str:
    with pytest.raises(ApiException) as err:
        create(kube, namespace, body)
    assert err.value.status == 422
    return err.value.body


def with_template(**changes):
    body = copy.deepcopy(EXAMPLE)
    for path, value in changes.items():
        node = body["spec"]
        *head, last = path.split(".")
        for key in head:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return body


def test_the_production_example_is_admitted_and_stored_as_written(kube, namespace):
    created = create(kube, namespace, EXAMPLE, dry_run=False)
    assert created["spec"]["template"] == EXAMPLE["spec"]["template"]
    parse_manifest({k: created[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": created["metadata"]["name"]}})


@pytest.mark.parametrize(
    "change,field,kind",
    [
        ({"template.spec.volumes.0.persistentVolumeClaim.claimName": 5}, "spec.template.spec.volumes[0].persistentVolumeClaim.claimName", "must be of type string"),
        ({"template.spec.tolerations": {"key": "a"}}, "spec.template.spec.tolerations", "must be of type array"),
        ({"template.spec.hostNetwork": "yes"}, "spec.template.spec.hostNetwork", "must be of type boolean"),
        ({"template.spec.containers.0.resources.limits": {"rdma/ib": "lots"}}, "spec.template.spec.containers[0].resources.limits.rdma/ib", "should match"),
        ({"template.spec.volumes.0.name": DELETE}, "spec.template.spec.volumes[0].name", "Required value"),
    ],
)
def test_wrong_types_are_refused_with_the_field_path(kube, namespace, change, field, kind):
    body = refusal(kube, namespace, with_template(**change))
    assert field in body and kind in body, body


@pytest.mark.parametrize(
    "change,message",
    [
        ({"template.spec.restartPolicy": "Always"}, "spec.template.spec.restartPolicy is set by the operator: pods run with restartPolicy Never and the operator restarts the whole gang (spec.runPolicy.backoffLimit)"),
        ({"template.spec.containers.0.image": "other:1"}, "spec.template.spec.containers[trainer].image conflicts with spec.image"),
        ({"template.spec.containers.0.command": ["python"]}, "spec.template.spec.containers[trainer].command conflicts with spec.command"),
        ({"template.spec.containers.0.env.0.name": "PET_NNODES"}, "spec.template.spec.containers[trainer].env conflicts with the pod-environment contract"),
        ({"template.spec.containers.0.resources.requests": {"cpu": "4"}}, "spec.template.spec.containers[trainer].resources conflicts with spec.resources"),
        ({"template.spec.containers.0.volumeMounts.0.mountPath": "/dev/shm"}, "spec.template.spec.containers[trainer].volumeMounts conflicts with spec.checkpoint or spec.resources.shm"),
        ({"template.spec.volumes.0.name": "railtrain-shm", "template.spec.containers.0.volumeMounts.0.name": "railtrain-shm"}, "spec.template.spec.volumes conflicts with spec.checkpoint and spec.resources.shm"),
        ({"template.spec.nodeSelector": {"kubernetes.io/hostname": "n1"}}, "spec.template.spec.nodeSelector[kubernetes.io/hostname] conflicts with the operator's placement (status.placement)"),
        ({"template.metadata.labels": {"railtrain.dev/node-rank": "0"}}, "spec.template.metadata conflicts with the operator's labels and annotations"),
        ({"template.spec.containers.0.ports": [{"containerPort": 29500}]}, "spec.template.spec.containers[].ports conflicts with the operator's rendezvous port 29500"),
        # Hard scheduling rules placement does not model (issue 15, kind 8); without strict field validation too (a field the schema lacked was pruned silently).
        ({"template.spec.topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "shared"}}}]},
         "spec.template.spec.topologySpreadConstraints[].whenUnsatisfiable DoNotSchedule is not supported"),
        ({"template.spec.affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "shared"}}}]}}},
         "spec.template.spec.affinity.podAffinity/podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution is not supported"),
        ({"template.spec.containers.0.ports": [{"containerPort": 8080, "hostPort": 8080}]}, "spec.template.spec.containers[].ports[].hostPort is not supported"),
    ],
)
def test_conflicts_are_refused_by_cel_naming_both_fields(kube, namespace, change, message):
    body = refusal(kube, namespace, with_template(**change))
    assert message in body, body
    with pytest.raises(ValueError):  # railtrain validate refuses the same manifest
        parse_manifest(with_template(**change))


def test_kubectl_explain_shows_the_template_fields(cluster):
    # kubectl reads resource types from its discovery cache, which may predate the CRD: poll.
    out = wait_until(lambda: (p := cluster.kubectl("explain", "tj.spec.template.spec.volumes", check=False)).returncode == 0 and p.stdout, 30, "kubectl explain")
    assert "persistentVolumeClaim" in out and "List of volumes that can be mounted by containers" in out
    out = cluster.kubectl("explain", "tj.spec.template.spec.containers.env.valueFrom.secretKeyRef").stdout
    assert "Selects a key of a secret in the pod's namespace" in out
    out = cluster.kubectl("explain", "tj.spec.template.spec.restartPolicy").stdout
    assert "Owned by the operator; setting it is refused" in out
