"""spec.checkpoint: the three tiers, their defaults and validation, and their contract variables."""

import pytest

from railtrain.crds import contract, schema
from railtrain.crds.api import TrainingJob
from railtrain.crds.validation import ManifestError, parse_manifest


def manifest(**checkpoint):
    return {
        "apiVersion": "railtrain.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm"},
        "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 4, "checkpoint": checkpoint},
    }


def test_defaults_keep_the_single_persistent_tier():
    ck = TrainingJob.model_validate(manifest(location="s3://b/x")).spec.checkpoint
    assert (ck.interval, ck.keep, ck.memory, ck.local, ck.volume_claim) == (100, 2, None, None, None)


def test_tiers_with_their_defaults():
    ck = TrainingJob.model_validate(manifest(location="/ckpt", volumeClaim="shared", memory={}, local={"interval": 20, "volume": "pod"})).spec.checkpoint
    assert (ck.memory.interval, ck.memory.keep, ck.memory.volume, ck.memory.host_path) == (10, 1, "node", "/dev/shm/railtrain")
    assert (ck.local.interval, ck.local.keep, ck.local.volume) == (20, 2, "pod")


@pytest.mark.parametrize(
    "checkpoint, expected",
    [
        ({"location": "s3://b/x", "volumeClaim": "shared"}, "spec.checkpoint.location must be an absolute path when spec.checkpoint.volumeClaim is set"),
        ({"memory": {"keep": 0}}, "spec.checkpoint.memory.keep"),
        ({"memory": {"hostPath": "relative/dir"}}, "spec.checkpoint.memory.hostPath"),
        ({"local": {"volume": "nfs"}}, "spec.checkpoint.local.volume"),
        ({"keep": -1}, "spec.checkpoint.keep"),
        ({"volumeClaim": "Bad_Name", "location": "/x"}, "spec.checkpoint.volumeClaim"),
        ({"tiers": ["memory"]}, "spec.checkpoint.tiers: unknown field"),
        ({"runId": "../other-job"}, "spec.checkpoint.runId"),
        ({"runId": "a/b"}, "spec.checkpoint.runId"),
        ({"runId": "x" * 64}, "spec.checkpoint.runId"),
    ],
)
def test_invalid_tiers_name_the_field(checkpoint, expected):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(**checkpoint))
    assert expected in str(err.value)


def test_crd_carries_the_tiers_and_the_claim_rule():
    spec = schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    tiers = spec["properties"]["checkpoint"]["properties"]
    assert tiers["runId"]["pattern"] == "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" and tiers["runId"]["maxLength"] == 63
    assert {"memory", "local", "keep", "volumeClaim"} <= set(tiers) and tiers["memory"]["properties"]["volume"]["enum"] == ["node", "pod"]
    assert any("self.checkpoint.volumeClaim" in r["rule"] for r in spec["x-kubernetes-validations"])


def test_tier_variables_round_trip():
    env = contract.PodEnvironment(
        job_name="llm", namespace="ns", nnodes=2, node_rank=1, procs_per_node=4, rdzv_addr="a", checkpoint_dir="s3://b/x", checkpoint_keep=0,
        checkpoint_memory_dir=contract.MEMORY_TIER_MOUNT, checkpoint_memory_interval=5, checkpoint_memory_keep=2,
        checkpoint_local_dir=contract.LOCAL_TIER_MOUNT, checkpoint_local_interval=25, checkpoint_local_keep=3, run_id="3f2a-uid",
    )  # fmt: skip
    assert contract.read_env(contract.pod_env(env)) == env
