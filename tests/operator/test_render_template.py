"""spec.template rendered into the gang's pods (pure): what the user wrote arrives as written, next to what the operator owns."""

from __future__ import annotations

from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import binding, render

from .builders import job_obj

SECRET_ENV = {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s3-credentials", "key": "secret-access-key"}}}
PVC_VOLUME = {"name": "corpus", "persistentVolumeClaim": {"claimName": "llm-corpus", "readOnly": True}}
MOUNT = {"name": "corpus", "mountPath": "/data/corpus", "readOnly": True}


def pod_of(template=None, rank=0, **spec):
    obj = job_obj(**spec, **({"template": template} if template is not None else {}))
    job = TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": "llm"}})
    return render.render_pod(job, "team", "uid-1", rank)


def test_secret_env_and_pvc_volume_appear_exactly_as_written():
    pod = pod_of({"spec": {"volumes": [PVC_VOLUME], "containers": [{"name": "trainer", "env": [SECRET_ENV], "volumeMounts": [MOUNT]}]}})
    (trainer,) = pod["spec"]["containers"]
    assert trainer["env"][-1] == SECRET_ENV
    assert {e["name"] for e in trainer["env"]} >= {contract.ENV_NNODES, contract.ENV_PET_MASTER_ADDR}  # the contract is still there
    assert PVC_VOLUME in pod["spec"]["volumes"] and MOUNT in trainer["volumeMounts"]


def test_trainer_entry_is_merged_and_other_containers_are_sidecars():
    sidecar = {"name": "shipper", "image": "fluent-bit:3", "resources": {"requests": {"cpu": "100m"}}}
    native = {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"}
    pod = pod_of(
        {"spec": {"containers": [{"name": "trainer", "envFrom": [{"secretRef": {"name": "hf"}}], "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                                  "resources": {"requests": {"rdma/ib": "1"}, "limits": {"rdma/ib": "1"}}, "workingDir": "/work"}, sidecar],
                  "initContainers": [native]}},
        resources={"gpus": 8, "cpu": "16"},
    )
    trainer, shipper = pod["spec"]["containers"]
    assert trainer["image"] == "img:1" and trainer["terminationMessagePath"] == contract.TERMINATION_MESSAGE_PATH
    assert trainer["envFrom"] == [{"secretRef": {"name": "hf"}}] and trainer["workingDir"] == "/work"
    assert trainer["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert trainer["resources"]["requests"] == {"nvidia.com/gpu": "8", "cpu": "16", "rdma/ib": "1"}
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "8", "cpu": "16", "rdma/ib": "1"}
    assert shipper == sidecar and pod["spec"]["initContainers"] == [native]


def test_pod_fields_are_copied_and_the_operators_kept():
    template = {
        "metadata": {"labels": {"team": "fm"}, "annotations": {"x.io/cost": "1"}},
        "spec": {"nodeSelector": {"nvidia.com/gpu.product": "H100"}, "serviceAccountName": "trainer", "imagePullSecrets": [{"name": "pull"}],
                 "priorityClassName": "high", "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", "automountServiceAccountToken": False,
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
    }
    pod = pod_of(template, rank=1)
    spec, meta = pod["spec"], pod["metadata"]
    assert meta["labels"]["team"] == "fm" and meta["labels"][contract.LABEL_NODE_RANK] == "1" and meta["annotations"]["x.io/cost"] == "1"
    for key in ("nodeSelector", "serviceAccountName", "imagePullSecrets", "priorityClassName", "hostNetwork", "dnsPolicy", "automountServiceAccountToken"):
        assert spec[key] == template["spec"][key], key
    assert spec["tolerations"] == [*render.gang_tolerations(job_obj_spec()), template["spec"]["tolerations"][1]]  # the same toleration once
    assert spec["restartPolicy"] == "Never" and spec["schedulingGates"] == [{"name": contract.SCHEDULING_GATE}] and spec["hostname"] == "llm-1"
    pinned = binding.pin_to_node(pod, "node-7")
    assert pinned["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "H100", "kubernetes.io/hostname": "node-7"}


def job_obj_spec():
    return TrainingJob.model_validate({"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "llm"}, "spec": {"image": "i"}}).spec


def test_shm_mounts_a_memory_backed_dev_shm_of_that_size():
    pod = pod_of(resources={"gpus": 8, "shm": "32Gi"})
    assert {"name": "railtrain-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}} in pod["spec"]["volumes"]
    assert {"name": "railtrain-shm", "mountPath": "/dev/shm"} in pod["spec"]["containers"][0]["volumeMounts"]


def test_no_template_renders_the_pod_as_before():
    pod = pod_of()
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer"] and "initContainers" not in pod["spec"] and "volumes" not in pod["spec"]


def test_an_admitted_pod_is_bound_by_its_create_unless_kube_scheduler_has_binding_work():
    """Direct binding (docs/scheduling.md): nodeName at create, except where a scheduler plugin must act at binding time."""
    plain = binding.admitted_pod(pod_of(resources={"gpus": 8, "shm": "1Gi"}), "node-3", {"a": "1"})
    assert plain["spec"]["nodeName"] == "node-3" and plain["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-3"
    assert "schedulingGates" not in plain["spec"] and plain["metadata"]["annotations"]["a"] == "1"
    ephemeral = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}
    for volume in (PVC_VOLUME, ephemeral):
        pod = pod_of({"spec": {"volumes": [volume]}})
        assert not binding.binds_directly(pod)
        kept = binding.admitted_pod(pod, "node-3", {})
        assert "nodeName" not in kept["spec"] and kept["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-3", volume["name"]
    claimed = {**plain, "spec": {**plain["spec"], "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": "llm-imex"}]}}
    del claimed["spec"]["nodeName"]
    assert not binding.binds_directly(claimed) and "nodeName" not in binding.admitted_pod(claimed, "node-3", {})["spec"]


def test_the_rendezvous_service_selects_rank_0_only():
    obj = job_obj(nodes=3)
    job = TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": "llm"}})
    selector = render.render_service(job, "team", "uid-1")["spec"]["selector"]
    chosen = [rank for rank in range(3) if selector.items() <= render.render_pod(job, "team", "uid-1", rank)["metadata"]["labels"].items()]
    assert chosen == [0]
