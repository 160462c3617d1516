"""Finding 7 of the new-user trial: what validate used to accept silently, now refused (or documented) alike by validate and the API server.

- a YAML mapping with a key twice (``nodes: 1 ... nodes: 3`` meant 3 nodes);
- ``spec.topology.level`` that is not a Kubernetes label key;
- ``spec.checkpoint.location: ""`` (omit it to disable the persistent tier);
- ``spec.command: []`` stays allowed: it means the image's ENTRYPOINT, as for
  any Kubernetes container (the operator then sets no command), and
  ``run --local`` refuses it with its own sentence;
- omitted ``nodes``/``procsPerNode`` default to 1 (documented in the CRD, as
  Kubeflow's and JobSet's replicas default to 1).
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from railtrain.crds import contract
from railtrain.crds.validation import ManifestError, manifest_document, parse_manifest
from tests.crds.dryrun import dry_run

PREFIX_253 = "x." + "a" * 251
LEVELS_BAD = ["not a label!!", "a/b/c", "x/", "/x", "Upper.Case/x", "a" * 64, PREFIX_253 + "a/n", "-rack", "rack-"]
LEVELS_GOOD = ["railtrain.dev/rack", "rack", "kubernetes.io/hostname", "topology.kubernetes.io/zone", "a" * 63, PREFIX_253 + "/n", "A_b.c", ""]


def job(**spec) -> dict:
    return {"apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}", "kind": contract.KIND, "metadata": {"name": "rules"},
            "spec": {"image": "img:1", **spec}}


@pytest.mark.parametrize("level", LEVELS_BAD)
def test_validate_refuses_a_level_that_is_not_a_label_key(level):
    with pytest.raises(ManifestError) as err:
        parse_manifest(job(topology={"policy": "preferred", "level": level}))
    assert len(err.value.errors) == 1 and err.value.errors[0].startswith("spec.topology.level: "), err.value.errors


@pytest.mark.parametrize("level", LEVELS_GOOD)
def test_validate_accepts_label_keys(level):
    assert parse_manifest(job(topology={"policy": "preferred", "level": level})).spec.topology.level == level


def test_the_api_server_agrees_on_levels(kube):
    def refused(manifest: dict) -> str | None:
        return dry_run(kube, manifest)

    for level in LEVELS_BAD:
        message = refused(job(topology={"policy": "preferred", "level": level}))
        assert message is not None and "spec.topology.level" in message, (level, message)
    for level in LEVELS_GOOD:
        assert refused(job(topology={"policy": "preferred", "level": level})) is None, level
    assert refused(job(command=[])) is None  # the image's ENTRYPOINT, on both sides
    parse_manifest(job(command=[]))


DUPLICATES = [
    ("apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\nspec:\n  image: x\n  nodes: 1\n  procsPerNode: 1\n  nodes: 3\n",
     "line 8, column 3: key nodes appears twice in one mapping (first at line 6)"),
    ("apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nkind: TrainingJob\nmetadata: {name: t}\nspec: {image: x}\n",
     "line 3, column 1: key kind appears twice in one mapping (first at line 2)"),
    ("spec: {resources: {cpu: 1, cpu: 2}}\n", "line 1, column 28: key cpu appears twice in one mapping (first at column 20)"),
]


@pytest.mark.parametrize("text, sentence", DUPLICATES)
def test_a_key_twice_in_one_mapping_is_refused_naming_the_key_and_line(text, sentence):
    with pytest.raises(ManifestError) as err:
        manifest_document(text.encode())
    assert err.value.errors == [f"{sentence}; each key may appear once (YAML keeps only the last value)"]


def test_merge_keys_and_equal_keys_in_different_mappings_are_fine():
    assert manifest_document(b"base: &b {a: 1}\nx:\n  <<: *b\n  a: 2\ny: {a: 3}\n") == {"base": {"a": 1}, "x": {"a": 2}, "y": {"a": 3}}


def test_an_empty_checkpoint_location_is_refused_and_an_omitted_one_disables_the_tier(kube):
    with pytest.raises(ManifestError) as err:
        parse_manifest(job(checkpoint={"location": ""}))
    assert err.value.errors == ["spec.checkpoint.location: must not be empty"]
    assert parse_manifest(job()).spec.checkpoint.location is None
    try:
        kube.custom.create_namespaced_custom_object(contract.API_GROUP, contract.API_VERSION, "default", contract.PLURAL, job(checkpoint={"location": ""}),
                                                    dry_run="All", field_validation="Strict")
    except ApiException as server:
        assert server.status == 422 and "spec.checkpoint.location" in json.loads(server.body)["message"]
    else:
        raise AssertionError("the API server accepted checkpoint.location ''")


def test_nodes_and_procs_per_node_default_to_one():
    spec = parse_manifest(job()).spec
    assert (spec.nodes, spec.procs_per_node, spec.world_size) == (1, 1, 1)


ODD_YAML = [
    # YAML that has no JSON form: refused with the field path, never a traceback or a Python type name
    ("spec: {image: !!binary aGVsbG8=}", "spec.image: binary data (!!binary) has no JSON form"),
    ("spec: {image: x, args: !!set {a, b}}", "spec.args: a set (!!set) has no JSON form"),
    ("spec: &a {image: x, template: *a}", "spec.template: a YAML alias refers to a mapping or list that contains it; a manifest must be a tree"),
    ("spec: {image: x, args: &l [a, *l]}", "spec.args[1]: a YAML alias refers to a mapping or list that contains it"),
    ("spec: {image: x, resources: {cpu: 12345678901234567890123}}", "spec.resources.cpu: 12345678901234567890123 is out of range; Kubernetes integers are 64-bit"),
]


@pytest.mark.parametrize("body, sentence", ODD_YAML)
def test_yaml_without_a_json_form_is_refused_naming_the_field(body, sentence):
    text = f"apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {{name: t}}\n{body}\n"
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest_document(text.encode()))
    assert len(err.value.errors) == 1 and err.value.errors[0].startswith(sentence), err.value.errors


def test_shared_aliases_are_fine():
    text = "apiVersion: railtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\nspec: {image: x, command: &c [python], args: *c}\n"
    assert parse_manifest(manifest_document(text.encode())).spec.args == ["python"]


def _mounting(volumes, mount="data"):
    template = {"spec": {"containers": [{"name": "trainer", "volumeMounts": [{"name": mount, "mountPath": "/data"}]}], **({"volumes": volumes} if volumes else {})}}
    return job(template=template)


@pytest.mark.parametrize("volumes, mount, accepted", [
    ([], "data", False),
    ([{"name": "other", "emptyDir": {}}], "data", False),
    ([{"name": "data", "emptyDir": {}}], "data", True),
    ([], "railtrain-shm", True),  # the operator's own volume names may be mounted by name
])
def test_a_mount_naming_no_volume_is_refused_by_validate_and_the_api_server(kube, volumes, mount, accepted):
    """Found by a new user: validate passed a mount of a volume that does not exist; only the pods were refused, in the cluster."""
    manifest = _mounting(volumes, mount)
    server = dry_run(kube, manifest)
    try:
        parse_manifest(manifest)
        offline = None
    except ManifestError as err:
        offline = err.errors
    assert (offline is None, server is None) == (accepted, accepted), (offline, server)
    if not accepted:
        assert offline == [f"spec.template.spec.containers[trainer].volumeMounts[/data] names volume '{mount}', which spec.template.spec.volumes does not define"]
        assert "volumeMounts names a volume that spec.template.spec.volumes does not define" in server


def test_the_restart_counters_read_0_once_the_operator_wrote_any_status(kube, namespace):
    """`kubectl get tj` showed blank RESTARTS columns on a new job: the CRD defaults the counters, the printer columns read them."""
    g, v, p = contract.API_GROUP, contract.API_VERSION, contract.PLURAL
    kube.custom.create_namespaced_custom_object(g, v, namespace, p, job())
    kube.custom.patch_namespaced_custom_object_status(g, v, namespace, p, "rules", {"status": {"phase": "Pending"}})
    status = kube.custom.get_namespaced_custom_object(g, v, namespace, p, "rules")["status"]
    assert (status["restarts"], status["jobRestarts"], status["infrastructureRestarts"]) == (0, 0, 0)


CONTEXT_CASES = [
    # (nodes, procsPerNode, parallelism, the rule's message when refused, else None)
    (2, 4, {"data": 2, "context": 4}, None),  # one ring per node
    (1, 8, {"fsdp": 2, "context": 2, "tensor": 2}, None),
    (2, 4, {"context": 8}, "spec.parallelism.context × tensor must divide procsPerNode"),  # the ring would cross nodes
    (1, 8, {"context": 4, "tensor": 4}, "spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode"),
    (1, 6, {"context": 4, "tensor": 1, "data": 1, "fsdp": 1, "pipeline": 1}, "spec.parallelism"),
    (1, 4, {"context": 0, "data": 4}, "spec.parallelism.context"),
    (1, 4, {"context": 2, "pipeline": 2}, "spec.parallelism.context must be 1 when spec.parallelism.pipeline is above 1"),
]


@pytest.mark.parametrize("nodes, ppn, par, message", CONTEXT_CASES)
def test_validate_and_the_api_server_agree_on_context(kube, nodes, ppn, par, message):
    manifest = job(nodes=nodes, procsPerNode=ppn, parallelism=par)
    server = dry_run(kube, manifest)
    try:
        parse_manifest(manifest)
        local = None
    except ManifestError as err:
        local = str(err)
    if message is None:
        assert server is None and local is None, (server, local)
    else:
        assert server is not None and message in server, server
        assert local is not None and message in local, local
