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
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from railtrain.cli.main import app
from railtrain.crds.validation import ManifestError, check_update
from tests.conftest import fixed_namespace
from tests.polling import wait_for

from .clusterkit import G, P, V, all_running, job_body, job_obj, phase_is, pods_of

pytestmark = pytest.mark.cluster
runner = CliRunner()


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
    # not railtrain's trainer: `validate --old` would also check trainer flags offline, which this test is not about
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("shape", nodes=2, command=["python", "train.py"]))
    wait_for(lambda: phase_is(custom, namespace, "shape", "Running"), 90, "Running")
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
    wait_for(lambda: phase_is(custom, namespace, "shape", "Suspended"), 60, "Suspended")
    old = job_obj(custom, namespace, "shape")
    new = copy.deepcopy(old)
    new["spec"]["nodes"] = 3
    assert validate_old(tmp_path, old, new).exit_code == 0
    custom.patch_namespaced_custom_object(G, V, namespace, P, "shape", {"spec": {"nodes": 3}})
    wait_for(lambda: not pods_of(core, namespace, "shape"), 60, "the old gang gone")
    custom.patch_namespaced_custom_object(G, V, namespace, P, "shape", {"spec": {"runPolicy": {"suspend": False}}})
    pods = wait_for(lambda: all_running(core, namespace, "shape", 3), 90, "3 ranks Running")
    for p in pods:
        env = {e.name: e.value for e in p.spec.containers[0].env}
        assert env["PET_NNODES"] == "3"
    wait_for(lambda: phase_is(custom, namespace, "shape", "Running"), 30, "phase Running")


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
    with fixed_namespace(kube, "update-differential") as ns:
        for name, suspend, phase in (("asleep", True, "Suspended"), ("awake", False, "Running")):
            body = job_body(name, nodes=2, gpus=64, procs=8, runPolicy={"suspend": suspend})
            try:
                kube.custom.create_namespaced_custom_object(G, V, ns, P, body)
            except ApiException as err:
                if err.status != 409:
                    raise
            kube.custom.patch_namespaced_custom_object_status(G, V, ns, P, name, {"status": {"phase": phase}})
        yield kube.custom, ns


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

