"""Kubernetes quantities in a TrainingJob: one parser (railtrain.crds.quantity), refused alike by validate and the API server.

Finding 1 of the new-user trial: ``cpu: lots``, ``memory: 2GB``, ``shm: lots``
and ``memory: -5Gi`` passed both ``railtrain validate`` and the CRD, then
jammed the operator when it built the pods.
"""

from __future__ import annotations


import pytest

from railtrain.crds import contract
from railtrain.crds.quantity import is_quantity, parse_quantity
from railtrain.crds.validation import ManifestError, parse_manifest
from tests.crds.dryrun import dry_run


@pytest.mark.parametrize("text, value", [("8", 8.0), ("500m", 0.5), ("64Gi", 64 * 2**30), ("2G", 2e9), ("1e3", 1000.0), (4, 4.0), (".5", 0.5), ("+1Ki", 1024.0)])
def test_parse_quantity_reads_the_kubernetes_grammar(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["lots", "2GB", "1 Gi", "", "Gi", "1.2.3", "inf", "nan", "0x10", "5gi"])
def test_parse_quantity_refuses_what_kubernetes_refuses(text):
    assert not is_quantity(text)
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_the_operator_uses_the_same_parser():
    from railtrain.operator.scheduling import snapshot as cluster

    assert cluster.parse_quantity is parse_quantity


def job(**resources) -> dict:
    spec: dict = {"image": "img:1", "resources": resources}
    return {"apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}", "kind": contract.KIND, "metadata": {"name": "q"}, "spec": spec}


def tiers(**tier) -> dict:
    m = job()
    m["spec"]["checkpoint"] = tier
    return m


BAD = [
    # (case, manifest, field, the sentence validate prints after "<field>: ")
    ("cpu lots", job(cpu="lots"), "spec.resources.cpu", '"lots" is not a Kubernetes quantity; use e.g. 4, 500m or 1.5'),
    ("memory 2GB", job(memory="2GB"), "spec.resources.memory", '"2GB" is not a Kubernetes quantity; use e.g. 2Gi, 2G or 2000M'),
    ("shm lots", job(shm="lots"), "spec.resources.shm", '"lots" is not a Kubernetes quantity; use e.g. 2Gi, 2G or 2000M'),
    ("memory negative", job(memory="-5Gi"), "spec.resources.memory", "-5Gi is negative; use a quantity of at least 0"),
    ("cpu negative integer", job(cpu=-1), "spec.resources.cpu", "-1 is negative"),
    ("cpu float", job(cpu=1.5), "spec.resources.cpu", "1.5 is not a Kubernetes quantity"),
    ("cpu boolean", job(cpu=True), "spec.resources.cpu", "true is not a Kubernetes quantity"),
    ("memory too long", job(memory="1" * 65), "spec.resources.memory", "may not be longer than 64 characters"),
    ("memory tier sizeLimit", tiers(memory={"volume": "pod", "sizeLimit": "big"}), "spec.checkpoint.memory.sizeLimit", '"big" is not a Kubernetes quantity'),
    ("local tier sizeLimit", tiers(local={"volume": "pod", "sizeLimit": "-1Gi"}), "spec.checkpoint.local.sizeLimit", "-1Gi is negative"),
]
def templated(resources: dict, volumes: list | None = None) -> dict:
    m = job()
    m["spec"]["template"] = {"spec": {"containers": [{"name": "side", "image": "i", "resources": resources}], **({"volumes": volumes} if volumes else {})}}
    return m


BAD += [
    # the pod template's quantities (core/v1 schema): never negative either, so a pod is never refused at creation for it
    ("template request negative", templated({"requests": {"cpu": "-1"}}), "spec.template.spec.containers[0].resources.requests.cpu", "'-1' is negative"),
    ("template request negative integer", templated({"requests": {"cpu": -1}}), "spec.template.spec.containers[0].resources.requests.cpu", "must be at least 0, not -1"),
    ("template limit 2GB", templated({"limits": {"memory": "2GB"}}), "spec.template.spec.containers[0].resources.limits.memory", "'2GB' is not a Kubernetes quantity"),
    ("template emptyDir negative", templated({}, [{"name": "v", "emptyDir": {"sizeLimit": "-1Gi"}}]), "spec.template.spec.volumes[0].emptyDir.sizeLimit", "'-1Gi' is negative"),
]
GOOD = [
    ("template quantities", templated({"requests": {"cpu": "500m", "example.com/x": 0}, "limits": {"memory": "+1Gi"}}, [{"name": "v", "emptyDir": {"sizeLimit": 0}}])),
    ("integer cpu", job(cpu=4)),
    ("string quantities", job(cpu="500m", memory="64Gi", shm="2G")),
    ("zero", job(cpu="0", memory=0)),
    ("exponent", job(memory="1e9")),
    ("tier sizeLimit", tiers(memory={"volume": "pod", "sizeLimit": "32Gi"}, local={"volume": "pod", "sizeLimit": 1000})),
]


@pytest.mark.parametrize("case, manifest, field, sentence", BAD, ids=[b[0] for b in BAD])
def test_validate_refuses_a_bad_quantity_with_one_sentence_naming_the_field(case, manifest, field, sentence):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest)
    assert len(err.value.errors) == 1, err.value.errors
    assert err.value.errors[0].startswith(f"{field}: {sentence}")


@pytest.mark.parametrize("case, manifest", GOOD, ids=[g[0] for g in GOOD])
def test_validate_accepts_quantities(case, manifest):
    parse_manifest(manifest)


def test_a_zero_quantity_is_set_like_any_other(kube):
    """cpu: 0 is a request (CEL has() is true), so the template may not request cpu too; validate agrees with the server."""
    manifest = job(cpu=0)
    manifest["spec"]["template"] = {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"cpu": "1"}}}]}}
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest)
    assert "conflicts with spec.resources.cpu" in str(err.value)
    assert "spec.template" in (dry_run(kube, manifest) or "accepted")


def test_the_api_server_refuses_every_bad_quantity_naming_the_field(kube):
    for case, manifest, field, _ in BAD:
        message = dry_run(kube, manifest)
        assert message is not None, f"{case}: the API server accepted it"
        assert field in message, f"{case}: {message}"
    for case, manifest in GOOD:
        assert dry_run(kube, manifest) is None, case
