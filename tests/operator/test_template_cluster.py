"""The pod template on a real control plane with KWOK nodes: placement honours it, and the pods carry it.

The operator runs with a 1 s resync (see conftest). Node labels and taints are
set on real Node objects, so kube-scheduler enforces the same constraints the
operator placed by.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.polling import wait_for

from .clusterkit import all_running, condition, job_body, job_status, pods_of, refused

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
PRODUCT = "nvidia.com/gpu.product"
TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


def unpinned(pods) -> bool:
    """Nothing of a refused gang holds capacity: no pod bound or pinned to a node (its own nodeSelector aside).

    The operator admits before it creates (docs/scheduling.md), so a refused gang has no pods at
    all; a gated pod left by an older operator would also hold nothing.
    """
    return all(p.spec.scheduling_gates and not p.spec.node_name and "kubernetes.io/hostname" not in (p.spec.node_selector or {}) for p in pods)


def template(**spec):
    return {"spec": spec}


def test_node_selector_places_on_the_two_matching_nodes_and_refuses_three(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(4, labels={PRODUCT: "A100"})
    h100 = set(gpu_nodes(2, labels={PRODUCT: "H100"}))
    submit(job_body("three", nodes=3, template=template(nodeSelector={PRODUCT: "H100"})))
    c = wait_for(lambda: refused(custom, namespace, "three"), 60, "three refused")
    assert "4 not matching spec.template.spec.nodeSelector" in c["message"] and "It can never fit" in c["message"], c
    assert unpinned(pods_of(core, namespace, "three"))
    submit(job_body("two", nodes=2, template=template(nodeSelector={PRODUCT: "H100"})))
    pods = wait_for(lambda: all_running(core, namespace, "two", 2), 60, "two Running")
    assert {p.spec.node_name for p in pods} == h100


def test_a_toleration_lets_a_gang_use_tainted_nodes_and_its_absence_keeps_it_off(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    plain = set(gpu_nodes(2))
    # Created tainted: a taint patched on after the node exists raced the operator's node cache (a CI run placed
    # "wide" on a tainted node its cache still showed untainted, read a few milliseconds before the patch).
    tainted = set(gpu_nodes(2, taints=[TAINT]))
    submit(job_body("wide", nodes=3))  # needs one tainted node
    c = wait_for(lambda: refused(custom, namespace, "wide"), 60, "wide refused")
    assert "2 with the untolerated taint dedicated=training:NoSchedule" in c["message"], c
    # One job at a time: two jobs submitted together may be admitted by one pass or by two, and a tolerant gang
    # alone may take either pair (the tie between the two racks is broken by name), so the order is the test's.
    submit(job_body("plain", nodes=2))
    others = wait_for(lambda: all_running(core, namespace, "plain", 2), 60, "plain Running")
    assert {p.spec.node_name for p in others} == plain  # never on a taint it does not tolerate
    submit(job_body("tolerant", nodes=2, template=template(tolerations=[{**TAINT, "operator": "Equal"}], nodeSelector={})))
    tolerant = wait_for(lambda: all_running(core, namespace, "tolerant", 2), 60, "tolerant Running")
    assert {p.spec.node_name for p in tolerant} == tainted  # what was left: the tainted nodes, which its toleration allows


def test_more_cpu_than_any_node_has_is_refused_up_front_naming_cpu(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(2, cpu="4")
    submit(job_body("hungry", nodes=2, resources={"gpus": 8, "cpu": "8"}))
    c = wait_for(lambda: refused(custom, namespace, "hungry"), 60, "hungry refused")
    assert "with 8 free GPUs, 8 cpu each" in c["message"] and "2 with less than 8 cpu allocatable" in c["message"], c
    assert unpinned(pods_of(core, namespace, "hungry")) and job_status(custom, namespace, "hungry").get("requeues", 0) == 0


def test_the_production_example_runs_with_secret_env_and_pvc_volume_exactly_as_written(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    body = yaml.safe_load((REPO / "examples" / "production" / "trainingjob.yaml").read_text())
    written = copy.deepcopy(body["spec"]["template"]["spec"])
    names = gpu_nodes(4, labels={PRODUCT: "NVIDIA-H100-80GB-HBM3"})
    for name in names:  # one InfiniBand device per node, as an RDMA device plugin would advertise
        core.patch_node_status(name, {"status": {"capacity": {"rdma/ib": "1"}, "allocatable": {"rdma/ib": "1"}}})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "trainer"}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s3-credentials"}, "stringData": {"access-key-id": "a", "secret-access-key": "s"}})
    pv = f"corpus-{namespace}"[:63]
    core.create_persistent_volume({"metadata": {"name": pv}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                                                                      "hostPath": {"path": "/tmp/corpus"}, "claimRef": {"namespace": namespace, "name": "llm-corpus"}}})
    try:
        core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "llm-corpus"}, "spec": {
            "accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}})
        submit(body)
        pods = wait_for(lambda: all_running(core, namespace, body["metadata"]["name"], 4), 90, "the example's gang Running")
        status = job_status(custom, namespace, body["metadata"]["name"])
        assert condition(status, "Scheduled")["status"] == "True"
        for pod in pods:
            raw = core.api_client.sanitize_for_serialization(pod)["spec"]
            trainer = next(c for c in raw["containers"] if c["name"] == "trainer")
            assert [e for e in trainer["env"] if e["name"].startswith("AWS_")] == written["containers"][0]["env"]
            assert written["volumes"][0] in raw["volumes"]
            assert written["containers"][0]["volumeMounts"][0] in trainer["volumeMounts"]
            assert {"name": "railtrain-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in raw["volumes"]
            assert raw["serviceAccountName"] == "trainer" and raw["imagePullSecrets"] == written["imagePullSecrets"]
            assert raw["nodeSelector"][PRODUCT] == "NVIDIA-H100-80GB-HBM3" and trainer["resources"]["limits"]["rdma/ib"] == "1"
    finally:
        core.delete_persistent_volume(pv)
