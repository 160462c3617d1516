"""The TrainingJob models, manifest loading and the generated CRD."""

import pytest
import yaml

from railtrain.crds import schema
from railtrain.crds.api import TrainingJob
from railtrain.crds.validation import ManifestError, load_manifest, parse_manifest


def manifest(**spec):
    return {
        "apiVersion": "railtrain.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm"},
        "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 4} | spec,
    }


def test_crd_files_are_up_to_date():
    """Fails when crds/trainingjob.yaml or the Helm chart's copy was not regenerated after a model change."""
    assert schema.CRD_PATH.read_text() == schema.render(), "run `python -m railtrain.crds`"
    assert schema.HELM_CRD_PATH.read_text() == schema.render(), "run `python -m railtrain.crds`"


def test_crd_schema_is_structural():
    def walk(node, path):
        if isinstance(node, dict):
            assert "$ref" not in node and "title" not in node, path
            assert "anyOf" not in node or node.get("x-kubernetes-int-or-string"), path  # int-or-string is the one allowed union
            if "properties" in node:
                assert node.get("type") == "object", path
                for k, v in node["properties"].items():
                    assert "type" in v or v.get("x-kubernetes-int-or-string"), f"{path}.{k} has no type"
                    walk(v, f"{path}.{k}")
            if "items" in node:
                walk(node["items"], path + "[]")

    walk(schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "")


def test_defaults_and_world_size():
    job = TrainingJob.model_validate(manifest())
    assert job.spec.world_size == 8
    assert job.spec.effective_parallelism().data == 8
    assert job.spec.checkpoint.interval == 100 and job.spec.run_policy.backoff_limit == 3


@pytest.mark.parametrize(
    "spec,expected",
    [
        ({"nodes": 0}, "spec.nodes: must be at least 1, not 0"),
        ({"procPerNode": 2}, "spec.procPerNode: unknown field"),
        ({"parallelism": {"data": 3}}, "spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode"),
        ({"parallelism": {"data": 1, "tensor": 8}, "nodes": 1, "procsPerNode": 4}, "spec.parallelism"),
        ({"parallelism": {"data": 4, "tensor": 3}, "nodes": 3, "procsPerNode": 4}, "spec.parallelism.tensor must divide procsPerNode"),
        ({"parallelism": {"context": 8}}, "spec.parallelism.context × tensor must divide procsPerNode: a context-parallel group and its tensor-parallel ranks must fit inside one node, unless spec.topology.nvlinkDomain is true and context × tensor is a multiple of procsPerNode (the group then spans whole nodes of one NVLink domain): context 8 × tensor 1 = 8, procsPerNode 4"),
        ({"parallelism": {"context": 0}}, "spec.parallelism.context: must be at least 1, not 0"),
        ({"parallelism": {"context": 2, "pipeline": 2, "data": 2}}, "spec.parallelism.context must be 1 when spec.parallelism.pipeline is above 1"),
        ({"parallelism": {"context": 2, "tensor": 4, "data": 2}, "nodes": 1, "procsPerNode": 8}, "spec.parallelism: data × fsdp × tensor × pipeline × context must equal nodes × procsPerNode"),
        ({"resources": {"gpus": 2}}, "spec.procsPerNode must not exceed spec.resources.gpus"),
        ({"topology": {"policy": "strict"}}, "spec.topology.policy"),
        ({"elastic": {"minNodes": 3}}, "spec.elastic.minNodes must not exceed spec.nodes"),
        ({"elastic": {"minNodes": 0}}, "spec.elastic.minNodes: must be at least 1, not 0"),
        ({"nodes": 4, "elastic": {"minNodes": 1}, "parallelism": {"data": 1, "fsdp": 8, "tensor": 2}}, "spec.elastic.minNodes × procsPerNode must be a multiple of fsdp × tensor × pipeline × context"),
        ({"runPolicy": {"gangTimeoutSeconds": 0}}, "spec.runPolicy.gangTimeoutSeconds"),
        ({"topology": {"policy": "required"}}, "spec.topology.level is required when spec.topology.policy is required"),
        ({"faultTolerance": {"replicaGroups": 1}}, "spec.faultTolerance.replicaGroups: must be at least 2, not 1"),
        ({"faultTolerance": {"replicaGroups": 2, "minReplicas": 3}}, "spec.faultTolerance.minReplicas must not exceed spec.faultTolerance.replicaGroups (the quorum cannot need more groups than exist): minReplicas 3, replicaGroups 2"),
        ({"nodes": 3, "faultTolerance": {"replicaGroups": 2}}, "spec.faultTolerance.replicaGroups must divide spec.nodes: each replica group is a gang of nodes / replicaGroups whole nodes: replicaGroups 2, nodes 3"),
        ({"nodes": 2, "parallelism": {"data": 1, "fsdp": 8}, "faultTolerance": {"replicaGroups": 2}}, "spec.faultTolerance.replicaGroups must divide spec.parallelism.data: replica groups split the data-parallel (replicated) dimension only"),
        ({"nodes": 2, "elastic": {"minNodes": 1}, "faultTolerance": {"replicaGroups": 2}}, "spec.faultTolerance and spec.elastic cannot be combined"),
        ({"spares": 1}, "spec.spares needs spec.runPolicy.restartInPlace: true"),
        ({"spares": -1}, "spec.spares: must be at least 0, not -1"),
        ({"spares": 1, "command": ["torchrun"], "runPolicy": {"restartInPlace": True}, "nodes": 2, "faultTolerance": {"replicaGroups": 2}},
         "spec.spares and spec.faultTolerance cannot be combined"),
    ],
)
def test_invalid_specs_name_the_field(spec, expected):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(**spec))
    assert expected in str(err.value)


def test_missing_image_and_bad_name():
    data = manifest()
    del data["spec"]["image"]
    data["metadata"]["name"] = "Bad_Name"
    with pytest.raises(ManifestError) as err:
        parse_manifest(data)
    assert len(err.value.errors) == 2
    assert "spec.image: required field is missing" in err.value.errors
    assert any(e.startswith("metadata.name") for e in err.value.errors)


def test_load_manifest_file_errors(tmp_path):
    with pytest.raises(ManifestError, match="no such file"):
        load_manifest(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    with pytest.raises(ManifestError, match="not valid YAML at line"):
        load_manifest(bad)
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump(manifest()) + "---\n" + yaml.safe_dump(manifest()))
    with pytest.raises(ManifestError, match="exactly one"):
        load_manifest(two)
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(manifest()))
    assert load_manifest(ok).metadata.name == "llm"


def test_to_api_is_camel_case():
    api = TrainingJob.model_validate(manifest()).to_api()
    assert api["spec"]["procsPerNode"] == 4 and "procs_per_node" not in api["spec"]


def test_scheduling_defaults():
    spec = TrainingJob.model_validate(manifest()).spec
    assert spec.priority == 0 and spec.elastic is None and spec.run_policy.gang_timeout_seconds == 300
    assert spec.node_counts() == [2]


@pytest.mark.parametrize(
    "spec,counts,data_at_min",
    [
        ({"nodes": 4, "elastic": {"minNodes": 2}}, [2, 3, 4], 8),
        # fsdp × tensor = 8 = two nodes' worth of processes: only even counts keep it.
        ({"nodes": 6, "elastic": {"minNodes": 2}, "parallelism": {"data": 3, "fsdp": 4, "tensor": 2}}, [2, 4, 6], 1),
    ],
)
def test_elastic_counts_scale_only_data_parallel(spec, counts, data_at_min):
    s = TrainingJob.model_validate(manifest(**spec)).spec
    assert s.node_counts() == counts
    par = s.effective_parallelism(counts[0])
    assert par.data == data_at_min and par.product == counts[0] * s.procs_per_node
    with pytest.raises(ValueError):
        s.effective_parallelism(counts[0] + 1 if counts[0] + 1 not in counts else 99)


def test_crd_carries_the_elastic_rules():
    rules = schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    assert any("self.elastic.minNodes <= self.nodes" in r["rule"] for r in rules)


@pytest.mark.parametrize("spec,said", [
    ({"nodse": 2}, "spec.nodse: unknown field; did you mean spec.nodes?"),
    ({"procPerNode": 2}, "spec.procPerNode: unknown field; did you mean spec.procsPerNode?"),
    ({"runPolicy": {"backofLimit": 1}}, "spec.runPolicy.backofLimit: unknown field; did you mean spec.runPolicy.backoffLimit?"),
    ({"checkpoint": {"tiers": ["memory"]}}, "spec.checkpoint.tiers: unknown field"),  # not a typo of any field: no guess
])
def test_an_unknown_field_that_is_a_typo_names_the_field_meant(spec, said):
    """A new user's trial (stop 44): ``nodse`` was named as unknown but the field meant was not; a misspelled flag or
    command already got a "did you mean". Now an unknown field close to one of its object's fields (difflib, ratio ≥
    0.75) names it, with its whole path (nested objects too); one close to none is named alone."""
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(**spec))
    assert said in err.value.errors, err.value.errors
