"""Placement and kube-scheduler on a real control plane (issue 15, kind 8): what the scheduler would refuse is refused
up front, and a released gang the scheduler will not bind is re-placed at once with its words, not after gangTimeoutSeconds."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, events, job_body, phase_is, pods_of

pytestmark = pytest.mark.cluster
SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "shared"}}}


def test_a_hard_spread_over_other_jobs_pods_is_refused_by_the_api_server_naming_the_field(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    gpu_nodes(3)
    submit(job_body("first", nodes=2, template={"metadata": {"labels": {"app": "shared"}}}))
    wait_for(lambda: phase_is(custom, namespace, "first", "Running"), 90, "another job whose pods carry app=shared Running")
    spread = job_body("spread", nodes=2, template={"metadata": {"labels": {"app": "shared"}}, "spec": {"topologySpreadConstraints": [SPREAD]}})
    with pytest.raises(ApiException) as err:  # no strict field validation: a field the schema lacked used to be dropped silently
        custom.create_namespaced_custom_object(G, V, namespace, P, spread)
    assert err.value.status == 422
    assert "spec.template.spec.topologySpreadConstraints[].whenUnsatisfiable DoNotSchedule is not supported" in err.value.body


def test_a_rank_the_scheduler_refuses_is_re_placed_at_once_with_the_schedulers_words(api, namespace, gpu_nodes, operator, kube):
    core, custom = api
    first, second = gpu_nodes(2)
    # A local PersistentVolume only `second` can mount: placement does not model a volume's node affinity, kube-scheduler does.
    pv = f"data-{namespace}"[:63]
    core.create_persistent_volume({
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "local": {"path": "/data"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [second]}]}]}}},
    })
    try:
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}},
        })
        wait_for(lambda: core.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound", 60, "the claim bound to the local volume")
        template = {"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}
        custom.create_namespaced_custom_object(G, V, namespace, P, job_body("local", nodes=1, template=template, runPolicy={"gangTimeoutSeconds": 600}))
        pods = wait_for(lambda: all_running(core, namespace, "local", 1), 60, "the job Running on the node its volume allows (long before its 600 s gang timeout)")
        assert pods[0].spec.node_name == second
        refused = [e for e in events(core, namespace, "local") if e.reason == "FailedScheduling" and e.source.component == "railtrain-operator"]
        assert refused, "placement did not try the other node first: the test shows nothing"
        assert f"on node {first}" in refused[0].message and "didn't match PersistentVolume's node affinity" in refused[0].message
    finally:
        core.delete_persistent_volume(pv)


def test_a_pinned_node_cordoned_and_tainted_between_release_and_binding_re_places_the_gang_at_once(api, namespace, gpu_nodes, operator, submit):
    core, custom = api
    first, second = gpu_nodes(2)
    # The claim's volume does not exist yet, so kube-scheduler holds the released pod unbound (a refusal of the pod
    # itself, which no node would cure): the window between release and binding, kept open for the test.
    pv = f"late-{namespace}"[:63]
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "late"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}},
    })
    template = {"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "late"}}]}}
    submit(job_body("pinned", nodes=1, template=template, runPolicy={"gangTimeoutSeconds": 600}))

    def pinned_to():
        pods = [p for p in pods_of(core, namespace, "pinned") if not p.metadata.deletion_timestamp and not p.spec.scheduling_gates]
        return pods and (pods[0].spec.node_selector or {}).get("kubernetes.io/hostname")

    node = wait_for(pinned_to, 60, "the gang released and pinned")
    assert not pods_of(core, namespace, "pinned")[0].spec.node_name
    core.patch_node(node, {"spec": {"unschedulable": True, "taints": [{"key": "example.com/maintenance", "effect": "NoExecute"}]}})
    other = second if node == first else first
    wait_for(lambda: pinned_to() == other, 30, "the gang re-placed on the other node at once (its gang timeout is 600 s)")
    refused = [e for e in events(core, namespace, "pinned") if e.reason == "FailedScheduling" and e.source.component == "railtrain-operator"]
    assert refused and f"on node {node}: the Node was cordoned" in refused[0].message
    core.create_persistent_volume({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "", "hostPath": {"path": "/tmp/late"},
        "claimRef": {"namespace": namespace, "name": "late"}}})
    try:
        pods = wait_for(lambda: all_running(core, namespace, "pinned", 1), 90, "the job Running once its volume exists")
        assert pods[0].spec.node_name == other
    finally:
        core.delete_persistent_volume(pv)
