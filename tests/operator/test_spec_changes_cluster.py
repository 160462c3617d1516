"""Spec changes after creation on a real control plane (issue 11): gang-defining fields are refused
by the API server naming the field, the same rule runs in `railtrain validate --old`, and the
suspend → change → resume path restarts the whole gang at the new shape."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from railtrain.cli.main import app
from railtrain.crds.validation import ManifestError, check_update

from .clusterkit import G, P, V, job_body, job_obj, job_status, pods_of
from .conftest import wait_for

pytestmark = pytest.mark.cluster
runner = CliRunner()


@pytest.fixture
def api(cluster):
    c = cluster.api_client()
    return client.CoreV1Api(c), client.CustomObjectsApi(c)


def refused(custom, ns, name, patch):
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(G, V, ns, P, name, patch)
    assert err.value.status == 422
    return json.loads(err.value.body)["message"]


def validate_old(tmp_path, old, new):
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new))
    return runner.invoke(app, ["validate", str(tmp_path / "new.yaml"), "--old", str(tmp_path / "old.yaml")])


def test_gang_fields_are_immutable_while_running_and_change_through_suspend(api, namespace, gpu_nodes, operator, tmp_path):
    core, custom = api
    gpu_nodes(3)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("shape", nodes=2))
    wait_for(lambda: job_status(custom, namespace, "shape").get("phase") == "Running", 90, "Running")
    for patch, field in [({"nodes": 3}, "spec.nodes"), ({"procsPerNode": 4}, "spec.procsPerNode"),
                         ({"parallelism": {"data": 2, "fsdp": 8}}, "spec.parallelism"), ({"image": "other:2"}, "spec.image"),
                         ({"nodes": 3, "runPolicy": {"suspend": True}}, "spec.nodes")]:  # suspending in the same update is not enough
        msg = refused(custom, namespace, "shape", {"spec": patch})
        assert f"{field} defines the gang" in msg, msg
        old = job_obj(custom, namespace, "shape")
        new = copy.deepcopy(old)
        new["spec"].update(patch)
        result = validate_old(tmp_path, old, new)
        assert result.exit_code == 1 and f"{field} defines the gang" in result.output, result.output
    # Fields read only by the operator change at any time.
    custom.patch_namespaced_custom_object(G, V, namespace, P, "shape", {"spec": {"priority": 5, "runPolicy": {"backoffLimit": 1}}})
    # The explicit path: suspend, wait for Suspended, change, resume.
    custom.patch_namespaced_custom_object(G, V, namespace, P, "shape", {"spec": {"runPolicy": {"suspend": True}}})
    wait_for(lambda: job_status(custom, namespace, "shape").get("phase") == "Suspended", 60, "Suspended")
    old = job_obj(custom, namespace, "shape")
    new = copy.deepcopy(old)
    new["spec"]["nodes"] = 3
    assert validate_old(tmp_path, old, new).exit_code == 0
    custom.patch_namespaced_custom_object(G, V, namespace, P, "shape", {"spec": {"nodes": 3}})
    wait_for(lambda: not pods_of(core, namespace, "shape"), 60, "the old gang gone")
    custom.patch_namespaced_custom_object(G, V, namespace, P, "shape", {"spec": {"runPolicy": {"suspend": False}}})

    def new_shape_running():
        pods = pods_of(core, namespace, "shape")
        return len(pods) == 3 and all(p.status.phase == "Running" for p in pods) and pods

    pods = wait_for(new_shape_running, 90, "3 ranks Running")
    for p in pods:
        env = {e.name: e.value for e in p.spec.containers[0].env}
        assert env["PET_NNODES"] == "3"
    wait_for(lambda: job_status(custom, namespace, "shape").get("phase") == "Running", 30, "phase Running")


CHANGES = [
    ("nodes", 3), ("nodes", 1), ("procsPerNode", 4), ("image", "other:2"), ("command", ["python"]), ("args", ["--x"]),
    ("env", [{"name": "A", "value": "1"}]), ("resources", {"gpus": 8, "cpu": "4"}), ("parallelism", {"data": 16}),
    ("parallelism", {"data": 8, "tensor": 2}), ("topology", {"policy": "none"}), ("priority", 7), ("elastic", {"minNodes": 1}),
    ("checkpoint", {"interval": 5}), ("runPolicy", {"backoffLimit": 9, "suspend": True}), ("runPolicy", {"suspend": False}),
    ("runPolicy", {"suspend": True}), ("nodes", 0),
]


@pytest.fixture(scope="module")
def stored(kube):
    """Two stored jobs: one confirmed Suspended, one not suspended (status written here, as the operator would)."""
    ns = "update-differential"
    try:
        kube.core.create_namespace({"metadata": {"name": ns}})
    except ApiException as err:
        if err.status != 409:
            raise
    for name, suspend, phase in (("asleep", True, "Suspended"), ("awake", False, "Running")):
        body = job_body(name, nodes=2, gpus=64, procs=8, runPolicy={"suspend": suspend})
        try:
            kube.custom.create_namespaced_custom_object(G, V, ns, P, body)
        except ApiException as err:
            if err.status != 409:
                raise
        kube.custom.patch_namespaced_custom_object_status(G, V, ns, P, name, {"status": {"phase": phase}})
    yield kube.custom, ns
    kube.core.delete_namespace(ns)


def test_validate_old_and_the_api_server_agree_on_generated_updates(stored):
    custom, ns = stored
    seen = {"count": 0}

    @settings(max_examples=150, deadline=None, phases=(Phase.explicit, Phase.generate), database=None)
    @given(st.sampled_from(["asleep", "awake"]), st.lists(st.sampled_from(CHANGES), min_size=1, max_size=3))
    def update(name, changes):
        old = custom.get_namespaced_custom_object(G, V, ns, P, name)
        new = copy.deepcopy(old)
        new.pop("status", None)
        for field, value in changes:
            new["spec"][field] = value if field != "runPolicy" else {**new["spec"]["runPolicy"], **value}
        try:
            custom.replace_namespaced_custom_object(G, V, ns, P, name, new, dry_run="All")
            server = (True, "accepted (dry run)")
        except ApiException as err:
            if err.status == 409:  # the stored object moved on between read and write: not a verdict
                return
            assert err.status == 422, err.body
            server = (False, json.loads(err.body)["message"])
        try:
            check_update(old, new)
            local = (True, "valid")
        except ManifestError as err:
            local = (False, str(err))
        seen["count"] += 1
        assert local[0] == server[0], f"first disagreement:\n  old: {json.dumps(old)}\n  new: {json.dumps(new)}\n  railtrain validate --old: {local[1]}\n  API server: {server[1]}"

    update()
    assert seen["count"] >= 100

