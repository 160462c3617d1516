"""``spec.precision``: the model, its two cross-field rules, and what reaches the pod (the trainer side is tests/trainer/test_float8.py)."""

from __future__ import annotations

import pytest

from railtrain.crds import contract, schema
from railtrain.crds.validation import ManifestError, parse_manifest
from railtrain.operator.job import render


def manifest(**spec):
    return {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "llm"},
            "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8}} | spec}  # fmt: skip


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"precision": {"compute": "fp16"}}, "spec.precision.compute: must be 'bf16', 'fp8' or 'fp32'"),
        ({"precision": {}}, "spec.precision.compute"),
        ({"precision": "fp8"}, 'spec.precision: must be a mapping such as {compute: bf16|fp8|fp32}, not the string "fp8"'),
        ({"precision": {"compute": "fp8", "float8": {"recipe": "blockwise"}}}, "spec.precision.float8.recipe: must be 'tensorwise' or 'rowwise'"),
        ({"precision": {"compute": "bf16", "float8": {"recipe": "rowwise"}}}, "spec.precision.float8 applies only when spec.precision.compute is fp8"),
        ({"precision": {"compute": "fp8"}, "resources": {}, "procsPerNode": 1},
         "spec.precision.compute fp8 needs GPUs (spec.resources.gpus > 0, compute capability 8.9 or newer) unless spec.precision.float8.emulate is true"),
    ],
)
def test_bad_precision_is_one_sentence_naming_the_field(spec, expected):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(**spec))
    assert expected in str(err.value)


@pytest.mark.parametrize(
    "spec, env",
    [
        ({}, ("", "", "")),
        ({"precision": {"compute": "bf16"}}, ("bf16", "", "")),
        ({"precision": {"compute": "fp32"}}, ("fp32", "", "")),
        ({"precision": {"compute": "fp8"}}, ("fp8", "tensorwise", "0")),
        ({"precision": {"compute": "fp8", "float8": {"recipe": "rowwise", "emulate": True}}, "resources": {}, "procsPerNode": 1}, ("fp8", "rowwise", "1")),
    ],
)
def test_precision_reaches_every_pod_through_the_contract(spec, env):
    job = parse_manifest(manifest(**spec))
    pod = render.pod_environment(job.spec, "llm", "ns", 1)
    assert (pod.precision, pod.float8_recipe, pod.float8_emulate) == env
    variables = contract.pod_env(pod)
    assert (variables[contract.ENV_PRECISION], variables[contract.ENV_FLOAT8_RECIPE], variables[contract.ENV_FLOAT8_EMULATE]) == env
    assert contract.read_env(variables) == pod


def test_the_crd_carries_both_rules_and_precision_defines_the_gang():
    crd = schema.crd()
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = {r["fieldPath"]: r for r in spec_schema["x-kubernetes-validations"]}
    assert rules[".precision.float8"]["message"] == "spec.precision.float8 applies only when spec.precision.compute is fp8"
    assert rules[".precision.compute"]["message"].startswith("spec.precision.compute fp8 needs GPUs")
    assert spec_schema["properties"]["precision"]["required"] == ["compute"]
    top = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert any(r["fieldPath"] == ".spec.precision" and r["reason"] == "FieldValueForbidden" for r in top)
