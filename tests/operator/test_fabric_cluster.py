"""Fabric profiles on the real control plane with KWOK nodes: the pods carry each profile's NCCL/libfabric
variables, the node's HCA list reaches the rank placed there, the user's own values win, and a multi-node job
without the profile's RDMA device gets one Warning Event saying so."""

from __future__ import annotations

from pathlib import Path

import pytest

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import fabric
from tests.polling import wait_for

from .clusterkit import all_running, condition, events, job_body, job_status

pytestmark = pytest.mark.cluster

HCA_REF = "railtrain.dev/fabric-nccl-ib-hca"


def settings(core, ns, pods):
    """``rank_settings`` of each pod as the API server returns it, by node name."""
    api = core.api_client
    return {p.spec.node_name: fabric.rank_settings(api.sanitize_for_serialization(p)) for p in pods}


def test_default_profile_env_per_node_hcas_and_user_overrides(api, namespace, gpu_nodes, operator, submit):
    core, _ = api
    nodes = gpu_nodes(2)
    hcas = {nodes[0]: "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", nodes[1]: "mlx5_0,mlx5_1:1"}
    for name, value in hcas.items():
        core.patch_node(name, {"metadata": {"annotations": {fabric.NODE_HCAS: value}}})
    trainer_env = [{"name": "NCCL_SOCKET_IFNAME", "value": "=net1"}, {"name": "NCCL_DEBUG", "value": "WARN"}]
    submit(job_body("fab", nodes=2, env=[{"name": "NCCL_CROSS_NIC", "value": "1"}],
                    template={"spec": {"containers": [{"name": "trainer", "env": trainer_env}]}}))
    pods = wait_for(lambda: all_running(core, namespace, "fab", 2), 60, "fab Running")
    got = settings(core, namespace, pods)
    for node in nodes:  # each rank got its own node's list, exact-match; the user's two values, not the profile's
        assert got[node] == {"NCCL_CROSS_NIC": "1", "NCCL_IB_HCA": "=" + hcas[node], "NCCL_SOCKET_IFNAME": "=net1", "NCCL_DEBUG": "WARN"}, got
    for p in pods:
        env = {e.name: e for e in p.spec.containers[0].env}
        assert env["NCCL_IB_HCA"].value_from.field_ref.field_path == f"metadata.annotations['{HCA_REF}']"
        assert [e.name for e in p.spec.containers[0].env].count("NCCL_CROSS_NIC") == 1  # no duplicate entry for the kubelet to resolve
        assert p.metadata.annotations[fabric.ANNOTATION_PROFILE] == "railtrain"
    assert not [e for e in events(core, namespace, "fab") if e.reason == "FabricDeviceMissing"]


DEVICE = {
    "aws": {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"vpc.amazonaws.com/efa": "4"}}}]}},
    "gke": {"metadata": {"annotations": {"networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"}]'}}},
    "oci": {"spec": {"hostNetwork": True}},
    "infiniband": {"spec": {"containers": [{"name": "trainer", "resources": {"limits": {"rdma/ib": "1"}}}]}},
}


def test_each_platform_profile_in_the_pods_and_the_rdma_check(cluster, operator_process, api, namespace, gpu_nodes, submit, tmp_path):
    """One operator per profile in turn, in place of the session's (two operators would race for the same jobs);
    the ``operator`` fixture restarts the session's for later tests."""
    core, custom = api
    gpu_nodes(4)
    operator_process.stop()
    for profile, chosen in ((name, fabric.PROFILES[name]) for name in DEVICE):
        op = OperatorProcess(Path(cluster.kubeconfig), tmp_path / f"{profile}.log", resync_seconds=1,
                             extra_args=("--topology-preset", "railtrain", "--fabric-profile", profile))
        op.start()
        try:
            bare, equipped = f"{profile}-bare", f"{profile}-equipped"
            submit(job_body(bare, nodes=2, gpus=1, procs=1))
            submit(job_body(equipped, nodes=2, gpus=1, procs=1, template=DEVICE[profile]))
            pods = wait_for(lambda: all_running(core, namespace, bare, 2), 60, f"{bare} Running")
            expected = dict(chosen.env) | {v.env: "" for v in chosen.per_node}  # no node gives an HCA list: NCCL's default
            got = settings(core, namespace, pods)
            assert all(s == expected for s in got.values()), (profile, got)
            assert all(p.metadata.annotations[fabric.ANNOTATION_PROFILE] == profile for p in pods)
            # The Event is posted just after the pods are created (off the gang's critical path): wait for it.
            warned = wait_for(lambda: [e for e in events(core, namespace, bare) if e.reason == "FabricDeviceMissing"], 30, f"{bare}'s warning")
            assert len(warned) == 1 and warned[0].type == "Warning", warned
            assert warned[0].message == fabric.device_problem(chosen, _spec(job_body(bare, nodes=2, gpus=1, procs=1)))
            assert warned[0].message.startswith(f"spec.template: the operator's fabric profile {profile} expects ")
            # The job asking for the device is not warned about. Where KWOK nodes lack the device it is refused
            # (admit before creating: no pod exists), else its gang is created; the warning would come with that.
            wait_for(lambda: (c := condition(job_status(custom, namespace, equipped), "Scheduled")) and c["status"] in ("True", "False"),
                     60, f"{equipped} decided by an admission pass")
            wait_for(lambda: not (c := condition(job_status(custom, namespace, equipped), "Scheduled"))["status"] == "True"
                     or [e for e in events(core, namespace, equipped) if e.reason == "GangCreated"], 30, f"{equipped}'s gang created")
            assert not [e for e in events(core, namespace, equipped) if e.reason == "FabricDeviceMissing"]
        except AssertionError:
            print(f"---- {profile} operator log tail ----\n{op.tail()}")
            raise
        finally:
            op.kill()  # SIGKILL: the next one starts at once (it may warn once about this one's Lease)


def _spec(body):
    from railtrain.crds.api import TrainingJob

    return TrainingJob.model_validate(body).spec
