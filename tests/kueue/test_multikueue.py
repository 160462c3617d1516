"""MultiKueue end to end on two local control planes (issue 28): a TrainingJob submitted to the manager runs on the worker.

The session's control plane is the manager: its stock Kueue (``local_kueue``) is restarted with
``multiKueue.externalFrameworks: [TrainingJob.v1alpha1.railtrain.dev]``, and gets a MultiKueueCluster (the worker's
kubeconfig, read from a file), a MultiKueueConfig, an AdmissionCheck of MultiKueue's controller, and a ClusterQueue
using it; the session's railtrain operator runs there. The worker is a second control plane started here with KWOK GPU
nodes, its own stock Kueue, a ClusterQueue and LocalQueue of the same names, and its own railtrain operator.

The job carries ``spec.managedBy: kueue.x-k8s.io/multikueue``: on the manager railtrain keeps its Workload only (no
pod, no status of its own); MultiKueue copies the job to the worker with the label
``kueue.x-k8s.io/prebuilt-workload-name``, where railtrain adopts the Workload MultiKueue built instead of making one,
and places and runs the gang; MultiKueue copies the worker job's status back to the manager.
"""

from __future__ import annotations

import os
import uuid

import pytest

from railtrain.cli.controlplane import LocalCluster, wait_until
from railtrain.cli.controlplane import kueue as kq
from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import kueue as names
from railtrain.crds import reasons
from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK
from railtrain.operator.job.workload import workload_name
from tests.conftest import REPO, KubeClients
from tests.kueue.conftest import TOPOLOGY
from tests.kueue.test_kueue_cluster import describe, kueue_job, workload_of
from tests.operator.clusterkit import G, P, V, all_running, condition, finish, job_status, observe, pods_of
from tests.polling import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def worker(tmp_path):
    """The worker cluster: a second control plane with the CRDs, 2 KWOK nodes of 8 GPUs in one rack, stock Kueue
    (TrainingJob as an external framework, the Topology) and a railtrain operator; yields ``(cluster, clients, kueue)``."""
    root, reason = kq.ensure_kueue()
    if root is None:
        pytest.skip(reason)
    local = LocalCluster(f"pytest-worker-{os.getpid()}-{uuid.uuid4().hex[:4]}")
    local.start(owner_pid=os.getpid())
    kueue = op = None
    try:
        local.install_crds(sorted((REPO / "crds").glob("*.yaml")))
        local.add_gpu_nodes(2, 8, name_prefix="worker", nodes_per_rack=2)
        kueue = kq.LocalKueue(local, root, tmp_path / "worker-kueue.log", frameworks=("batch/job",), external_frameworks=(kq.TRAININGJOB_FRAMEWORK,))
        kueue.start()
        kueue.apply([kq.topology(TOPOLOGY, (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME))])
        op = OperatorProcess(local.kubeconfig, tmp_path / "worker-operator.log", resync_seconds=1, extra_args=("--topology-preset", "railtrain"))
        op.start()
        api = local.api_client()
        try:
            yield local, KubeClients(api), kueue
        finally:
            api.close()
    finally:
        if op is not None:
            print("---- worker operator log tail ----\n" + op.tail())
            op.stop()
        if kueue is not None:
            print("---- worker Kueue log tail ----\n" + kueue.tail())
            kueue.stop()
        local.stop()


def test_a_job_submitted_to_the_manager_runs_on_the_worker_and_its_status_comes_back(operator, local_kueue, namespace, kube, worker, tmp_path):
    """Issue 28, MultiKueue end to end: the job submitted to the manager (``spec.managedBy: kueue.x-k8s.io/multikueue``)
    gets its Workload there and no pod; Kueue's MultiKueue dispatches it to the worker, whose railtrain adopts the
    prebuilt Workload and runs the 2-node gang there, rail-aware inside the worker Kueue's topology assignment; the
    worker job's status (phase, placement) is visible on the manager; deleting the job on the manager deletes its copy
    and pods on the worker."""
    wcluster, wkube, wkueue = worker
    name = f"mk-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path / "worker.kubeconfig"
    kubeconfig.write_text(kq.inline_kubeconfig(wcluster.kubeconfig))
    local_kueue.multikueue_frameworks = [kq.TRAININGJOB_FRAMEWORK]
    local_kueue.restart()
    try:
        # the worker: the same namespace and queue names, quota over its nodes (a TAS flavor)
        wkube.core.create_namespace({"metadata": {"name": namespace}})
        wait_until(lambda: wkube.core.read_namespaced_service_account("default", namespace), 30, "the worker namespace's ServiceAccount")
        wkueue.apply([kq.resource_flavor(name, {"railtrain.dev/rack": "worker-rack-0"}, TOPOLOGY), kq.cluster_queue(name, name, {"nvidia.com/gpu": 16}),
                      kq.local_queue(name, namespace, name)])  # fmt: skip
        # the manager: MultiKueue for that worker, a ClusterQueue whose admission check it is; its flavor is a TAS one
        # like the worker's (Kueue delays the topology to the worker when the check is MultiKueue's), no nodes here
        cq = kq.cluster_queue(name, name, {"nvidia.com/gpu": 16})
        cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": name}]}
        local_kueue.apply([*kq.multikueue_objects(name, kubeconfig), kq.resource_flavor(name, {"railtrain.dev/rack": "worker-rack-0"}, TOPOLOGY), cq,
                           kq.local_queue(name, namespace, name)])
        wait_for(lambda: (c := condition((kube.custom.get_cluster_custom_object(names.GROUP, names.VERSION, "multikueueclusters", name).get("status") or {}), "Active"))
                 and c["status"] == "True", 60, "the MultiKueueCluster Active (the manager's Kueue reaches the worker)")  # fmt: skip

        body = kueue_job("mk", name)
        body["metadata"]["name"] = "mk"
        body["spec"]["managedBy"] = names.MULTIKUEUE_CONTROLLER
        kube.custom.create_namespaced_custom_object(G, V, namespace, P, body)
        running = wait_for(lambda: all_running(wkube.core, namespace, "mk", 2), 120, "the gang Running on the worker")
        assert {p.spec.node_name for p in running} <= {"worker-0", "worker-1"}
        manager_wl = workload_name(kube.custom.get_namespaced_custom_object(G, V, namespace, P, "mk")["metadata"])
        copy = wkube.custom.get_namespaced_custom_object(G, V, namespace, P, "mk")
        assert copy["metadata"]["labels"][names.PREBUILT_WORKLOAD_LABEL] == manager_wl and "managedBy" not in copy["spec"]
        assert workload_of(wkube.custom, namespace, manager_wl) is not None  # adopted: no Workload of the worker's own making
        assert [w["metadata"]["name"] for w in wkube.custom.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.WORKLOADS)["items"]] == [manager_wl]
        assert pods_of(kube.core, namespace, "mk") == []  # nothing runs on the manager
        status = wait_for(lambda: (s := job_status(kube.custom, namespace, "mk")).get("phase") == "Running" and s, 60,
                          "the worker's status copied back to the manager")  # fmt: skip
        assert sorted(e["node"] for e in status.get("placement") or []) == sorted(p.spec.node_name for p in running), status
        said = describe(local_kueue.cluster.kubeconfig, namespace, "mk")  # railtrain describe on the manager, as a user runs it
        assert f"runs on worker cluster {name}" in said, said

        finish(wkube.core, namespace, "mk")
        wait_for(lambda: job_status(kube.custom, namespace, "mk").get("phase") == "Succeeded", 60, "Succeeded on the manager too")
        wait_for(lambda: condition((workload_of(kube.custom, namespace, manager_wl) or {}).get("status") or {}, "Finished"), 60, "the manager's Workload Finished")
        kube.custom.delete_namespaced_custom_object(G, V, namespace, P, "mk")
        wait_for(lambda: not [j for j in wkube.custom.list_namespaced_custom_object(G, V, namespace, P)["items"] if j["metadata"]["name"] == "mk"], 90,
                 "the job's copy on the worker deleted with it")  # fmt: skip
    finally:
        local_kueue.multikueue_frameworks = []
        local_kueue.restart()
