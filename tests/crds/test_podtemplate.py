"""spec.template in Python (``railtrain validate``): core/v1 types, unknown fields, and every conflict named with both fields."""

from __future__ import annotations

import pytest

from railtrain.crds import corev1, podtemplate
from railtrain.crds.validation import ManifestError, parse_manifest


def manifest(template=None, **spec):
    body = {"image": "img:1", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8}} | spec
    if template is not None:
        body["template"] = template
    return {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "llm"}, "spec": body}


def errors(**kw):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(**kw))
    return err.value.errors


def trainer(**fields):
    return {"spec": {"containers": [{"name": "trainer", **fields}]}}


def test_a_realistic_template_is_accepted_as_written():
    template = {
        "metadata": {"labels": {"team": "a"}, "annotations": {"x.io/y": "z"}},
        "spec": {
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "corpus", "readOnly": True}}],
            "containers": [
                {"name": "trainer", "env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "k"}}}], "envFrom": [{"secretRef": {"name": "more"}}],
                 "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}], "resources": {"limits": {"rdma/ib": 1}},
                 "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}},
                {"name": "log-shipper", "image": "fluent-bit:3"},
            ],
            "initContainers": [{"name": "warm", "image": "busybox", "restartPolicy": "Always"}],
            "nodeSelector": {"nvidia.com/gpu.product": "H100"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            "priorityClassName": "high", "serviceAccountName": "trainer", "automountServiceAccountToken": False,
            "imagePullSecrets": [{"name": "pull"}], "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
            "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", "runtimeClassName": "nvidia", "terminationGracePeriodSeconds": 120,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}],
        },
    }
    job = parse_manifest(manifest(template))
    assert job.spec.template.spec.volumes == template["spec"]["volumes"]
    assert job.to_api()["spec"]["template"] == template


@pytest.mark.parametrize(
    "template,expected",
    [
        ({"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": 5}}]}}, "spec.template.spec.volumes[0].persistentVolumeClaim.claimName: must be of type string, got integer"),
        ({"spec": {"volumes": [{"persistentVolumeClaim": {"claimName": "c"}}]}}, "spec.template.spec.volumes[0].name: required field is missing"),
        ({"spec": {"volumes": [{"name": "d", "gcePersistentDisk": {"pdName": "x"}}]}}, "spec.template.spec.volumes[0].gcePersistentDisk: unknown field"),
        ({"spec": {"tolerations": {"key": "a"}}}, "spec.template.spec.tolerations: must be of type array, got object"),
        ({"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"rdma/ib": "lots"}}}]}}, "spec.template.spec.containers[0].resources.limits.rdma/ib: 'lots' is not a Kubernetes quantity"),
        ({"spec": {"hostNetwork": "yes"}}, "spec.template.spec.hostNetwork: must be of type boolean, got string"),
        ({"spec": {"schedulerName": "volcano"}}, "spec.template.spec.schedulerName: unknown field"),
        ({"spec": {"volumes": [{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]}}, "spec.template.spec.volumes[1]: duplicate entry with name=d"),
    ],
)
def test_wrong_types_are_refused_with_the_field_path(template, expected):
    assert any(e.startswith(expected) for e in errors(template=template)), errors(template=template)


@pytest.mark.parametrize(
    "template,spec,expected",
    [
        ({"spec": {"restartPolicy": "OnFailure"}}, {}, "spec.template.spec.restartPolicy is set by the operator: pods run with restartPolicy Never and the operator restarts the whole gang (spec.runPolicy.backoffLimit)"),
        ({"spec": {"nodeName": "n1"}}, {}, "spec.template.spec.nodeName is set by the operator"),
        ({"spec": {"schedulingGates": [{"name": "x"}]}}, {}, "spec.template.spec.schedulingGates is set by the operator"),
        (trainer(image="other:2"), {}, "spec.template.spec.containers[trainer].image conflicts with spec.image"),
        (trainer(command=["python"]), {}, "spec.template.spec.containers[trainer].command conflicts with spec.command"),
        (trainer(args=["--x"]), {}, "spec.template.spec.containers[trainer].args conflicts with spec.args"),
        (trainer(terminationMessagePath="/tmp/x"), {}, "spec.template.spec.containers[trainer].terminationMessagePath conflicts with the trainer's verdict"),
        (trainer(env=[{"name": "PET_NNODES", "value": "9"}]), {}, "spec.template.spec.containers[trainer].env[PET_NNODES] is a pod-environment contract variable"),
        (trainer(env=[{"name": "HF_HOME", "value": "/b"}]), {"env": [{"name": "HF_HOME", "value": "/a"}]}, "spec.template.spec.containers[trainer].env[HF_HOME] conflicts with spec.env[HF_HOME]"),
        (trainer(resources={"requests": {"cpu": "4"}}), {"resources": {"gpus": 8, "cpu": "8"}}, "spec.template.spec.containers[trainer].resources.requests[cpu] conflicts with spec.resources.cpu"),
        (trainer(resources={"limits": {"nvidia.com/gpu": 8}}), {}, "spec.template.spec.containers[trainer].resources.limits[nvidia.com/gpu] conflicts with spec.resources.gpus"),
        (trainer(volumeMounts=[{"name": "x", "mountPath": "/dev/shm"}]), {"resources": {"gpus": 8, "shm": "8Gi"}}, "spec.template.spec.containers[trainer].volumeMounts[/dev/shm] conflicts with spec.resources.shm"),
        (trainer(volumeMounts=[{"name": "x", "mountPath": "/var/run/railtrain/checkpoint-memory"}]), {}, "spec.template.spec.containers[trainer].volumeMounts[/var/run/railtrain/checkpoint-memory] conflicts with spec.checkpoint.memory/local"),
        (trainer(volumeMounts=[{"name": "x", "mountPath": "/ckpt"}]), {"checkpoint": {"location": "/ckpt", "volumeClaim": "c"}}, "spec.template.spec.containers[trainer].volumeMounts[/ckpt] conflicts with spec.checkpoint.volumeClaim"),
        (trainer(ports=[{"containerPort": 29500}]), {}, "spec.template.spec.containers[trainer].ports: port 29500 (unnamed) conflicts with the operator's rendezvous port 29500"),
        ({"spec": {"volumes": [{"name": "railtrain-shm", "emptyDir": {}}]}}, {}, "spec.template.spec.volumes[railtrain-shm] conflicts with spec.checkpoint and spec.resources.shm"),
        ({"spec": {"initContainers": [{"name": "trainer", "image": "x"}]}}, {}, "spec.template.spec.initContainers[trainer] conflicts with spec.image"),
        (trainer(volumeMounts=[{"name": "data", "mountPath": "/data"}]), {}, "spec.template.spec.containers[trainer].volumeMounts[/data] names volume 'data', which spec.template.spec.volumes does not define"),
        ({"spec": {"initContainers": [{"name": "fetch", "image": "x", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}], "volumes": [{"name": "e", "emptyDir": {}}]}}, {},
         "spec.template.spec.initContainers[fetch].volumeMounts[/d] names volume 'd', which spec.template.spec.volumes does not define"),
        ({"spec": {"containers": [{"name": "sidecar"}]}}, {}, "spec.template.spec.containers[sidecar].image is required for a sidecar or init container"),
        ({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}}, {}, "spec.template.spec.nodeSelector[kubernetes.io/hostname] conflicts with the operator's placement (status.placement)"),
        ({"metadata": {"labels": {"railtrain.dev/job-name": "x"}}}, {}, "spec.template.metadata.labels[railtrain.dev/job-name] is the operator's"),
        ({"metadata": {"annotations": {"railtrain.dev/nnodes": "3"}}}, {}, "spec.template.metadata.annotations[railtrain.dev/nnodes] is the operator's"),
        # Hard scheduling rules kube-scheduler enforces against other pods, which placement does not model (issue 15, kind 8).
        ({"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "x"}}}]}}, {},
         "spec.template.spec.topologySpreadConstraints[0].whenUnsatisfiable DoNotSchedule is not supported: kube-scheduler enforces it"),
        ({"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}]}}}}, {},
         "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution is not supported"),
        ({"spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone", "labelSelector": {}}]}}}}, {},
         "spec.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution is not supported"),
        ({"spec": {"containers": [{"name": "exporter", "image": "e:1", "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}}, {},
         "spec.template.spec.containers[exporter].ports: hostPort 8080 is not supported"),
    ],
)
def test_conflicts_are_refused_naming_both_fields(template, spec, expected):
    found = errors(template=template, **spec)
    assert any(e.startswith(expected) for e in found), found


def test_every_rule_has_a_cel_twin_with_a_message_naming_the_template_field():
    for rule in podtemplate.TEMPLATE_RULES:
        assert rule.cel and rule.message.startswith("spec.template") and rule.field_path.startswith(".template")


def test_vendored_schema_is_the_release_and_lists_are_bounded_for_cel():
    assert corev1.KUBERNETES_VERSION == "v1.34.4"
    volumes = corev1.property_schema("volumes")
    assert volumes["maxItems"] == corev1.MAX_ITEMS["volumes"] and volumes["x-kubernetes-list-map-keys"] == ["name"]
    assert "persistentVolumeClaim" in volumes["items"]["properties"] and "gitRepo" not in volumes["items"]["properties"]
    limits = corev1.property_schema("containers")["items"]["properties"]["resources"]["properties"]["limits"]
    assert limits["additionalProperties"]["x-kubernetes-int-or-string"] is True


def test_crd_stays_under_the_client_side_apply_annotation_limit():
    """`kubectl apply` (client-side) stores the object as compact JSON in an annotation of at most 256 KiB."""
    import json

    from railtrain.crds import schema

    assert len(json.dumps(schema.crd(), separators=(",", ":"))) < 262144


def test_descriptions_keep_whole_first_sentences():
    text = "First sentence here. Second one is longer than the rest of it. Third.\n\nSecond paragraph."
    assert corev1.brief(text, limit=40) == "First sentence here."
    assert corev1.brief(text, limit=10) == "First sentence here."  # at least one sentence
    assert corev1.brief(text) == "First sentence here. Second one is longer than the rest of it. Third."
