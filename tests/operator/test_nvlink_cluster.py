"""NVLink domains across nodes on the real control plane with KWOK nodes and a ComputeDomain CRD of the NVIDIA DRA
driver's group, version and kind (tests/operator/data/computedomain-crd.yaml; no driver runs here): a tensor-parallel
group larger than a node is refused without spec.topology.nvlinkDomain; with it the gang is placed inside one clique
or waits, its ComputeDomain is created owned by the job, every pod claims the IMEX channel, and deleting the job
deletes the ComputeDomain."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.operator.job import nvlink
from tests.polling import wait_for

from .clusterkit import G, P, V, condition, job_body, job_status, pods_of, refused

pytestmark = pytest.mark.cluster

CRD = Path(__file__).parent / "data" / "computedomain-crd.yaml"
CLIQUE = "nvidia.com/gpu.clique"


def compute_domain(custom, ns, name):
    try:
        return custom.get_namespaced_custom_object(nvlink.GROUP, nvlink.VERSION, ns, nvlink.PLURAL, nvlink.domain_name(name))
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def tp_job(name, nodes):
    return job_body(name, nodes=nodes, gpus=4, procs=4, parallelism={"tensor": 4 * nodes}, topology={"nvlinkDomain": True})


def test_tensor_across_nodes_inside_one_clique_with_its_compute_domain(cluster, operator_process, api, namespace, gpu_nodes, submit, tmp_path):
    core, custom = api
    cluster.install_crds([CRD])
    wide = job_body("wide", nodes=2, gpus=4, procs=4, parallelism={"tensor": 8})
    with pytest.raises(ApiException) as refusal:  # the API server's CEL rule, the sentence validate prints
        custom.create_namespaced_custom_object(G, V, namespace, P, wide)
    assert refusal.value.status == 422 and "unless spec.topology.nvlinkDomain is true" in refusal.value.body

    a = set(gpu_nodes(3, 4, labels={CLIQUE: f"{namespace}-a"}))
    b = set(gpu_nodes(2, 4, labels={CLIQUE: f"{namespace}-b"}))
    operator_process.stop()  # one operator at a time; this one knows the NVLink-domain level
    op = OperatorProcess(Path(cluster.kubeconfig), tmp_path / "operator.log", resync_seconds=1,
                         extra_args=("--topology-levels", f"{CLIQUE},kubernetes.io/hostname"))
    op.start()
    try:
        submit(tp_job("big", 4))  # 5 nodes are free, but no clique has 4
        c = wait_for(lambda: refused(custom, namespace, "big", "TopologyUnsatisfiable"), 60, "big refused")
        assert f"inside one {CLIQUE} (spec.topology.nvlinkDomain)" in c["message"] and "It can never fit: the largest gpu.clique has 3" in c["message"], c
        assert "policy preferred" not in c["message"] and not any(p.spec.node_selector for p in pods_of(core, namespace, "big"))

        submit(tp_job("tp", 3))
        placed = wait_for(lambda: (c := condition(job_status(custom, namespace, "tp"), "Scheduled")) and c["status"] == "True" and c, 60, "tp placed")
        # status.admission (and with it Scheduled True) is written before the pods are created (docs/scheduling.md)
        pods = wait_for(lambda: (ps := pods_of(core, namespace, "tp")) and len(ps) == 3 and ps, 30, "tp's 3 pods created")
        assert {p.spec.node_selector["kubernetes.io/hostname"] for p in pods} == a, placed
        assert not b & {p.spec.node_selector["kubernetes.io/hostname"] for p in pods}
        for p in pods:
            assert [(c.name, c.resource_claim_template_name) for c in p.spec.resource_claims] == [("imex-channel", "tp-imex-channel")]
            assert [c.name for c in p.spec.containers[0].resources.claims] == ["imex-channel"]
        cd = wait_for(lambda: compute_domain(custom, namespace, "tp"), 30, "tp's ComputeDomain")
        assert cd["spec"] == {"numNodes": 3, "channel": {"resourceClaimTemplate": {"name": "tp-imex-channel"}}}
        job_uid = custom.get_namespaced_custom_object(G, V, namespace, P, "tp")["metadata"]["uid"]
        assert [(o["kind"], o["uid"], o["controller"]) for o in cd["metadata"]["ownerReferences"]] == [("TrainingJob", job_uid, True)]

        custom.delete_namespaced_custom_object(G, V, namespace, P, "tp")
        wait_for(lambda: compute_domain(custom, namespace, "tp") is None, 120, "tp's ComputeDomain deleted with the job (garbage collector)")
        assert compute_domain(custom, namespace, "big") is None  # a waiting job has none: it is created with the admitted gang's pods
    except AssertionError:
        print("---- operator log tail ----\n" + op.tail())
        raise
    finally:
        op.kill()
