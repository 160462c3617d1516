"""Issue 26 item 4, the comparison itself: a served CRD without a field the operator writes is named, field by field.

The served schema is compared with the one generated from the models (operator/kube/crdcheck.py); the cluster side,
the operator refusing to start against a stale CRD, is tests/operator/test_stale_crd_cluster.py.
"""

from __future__ import annotations

import copy

import pytest

from railtrain.crds import schema
from railtrain.operator.kube import crdcheck


def root(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def wanted() -> dict:
    return schema.crd()


def without(crd: dict, *paths: str) -> dict:
    """A copy of ``crd`` whose schema lacks each dotted property path (``status.admission``)."""
    out = copy.deepcopy(crd)
    for path in paths:
        node = root(out)
        *parents, last = path.split(".")
        for part in parents:
            node = node["properties"][part]
            node = node.get("items", node)
        node["properties"].pop(last)
    return out


def test_the_generated_crd_has_everything(wanted):
    assert crdcheck.compare(copy.deepcopy(wanted), wanted) is None


def test_a_crd_without_the_admission_record_and_the_hold_is_named_in_one_sentence(wanted):
    sentence = crdcheck.compare(without(wanted, "status.admission", "status.hold"), wanted)
    assert sentence is not None and sentence.count(". ") == 0 and "\n" not in sentence
    assert "trainingjobs.railtrain.dev" in sentence and "lacks status.admission, status.hold," in sentence, sentence
    assert "prune" in sentence and "kubectl apply --server-side -f crds/trainingjob.yaml" in sentence and "crds.install=true" in sentence


def test_nested_fields_list_items_and_spec_fields_are_named_by_path(wanted):
    sentence = crdcheck.compare(without(wanted, "status.placement.domains", "status.admission.created", "spec.precision"), wanted)
    assert "spec.precision" in sentence and "status.placement[*].domains" in sentence and "status.admission.created" in sentence, sentence
    assert "status.admission," not in sentence  # the parent is there: only its missing child is named


def test_a_node_the_server_keeps_whole_lacks_nothing(wanted):
    loose = without(wanted, "status.admission", "status.hold")
    root(loose)["properties"]["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert crdcheck.compare(loose, wanted) is None


def test_no_status_subresource_or_no_served_version_is_refused(wanted):
    bare = copy.deepcopy(wanted)
    bare["spec"]["versions"][0].pop("subresources")
    assert "no status subresource" in crdcheck.compare(bare, wanted)
    off = copy.deepcopy(wanted)
    off["spec"]["versions"][0]["served"] = False
    assert "does not serve version v1alpha1" in crdcheck.compare(off, wanted)


def test_many_missing_fields_are_counted_not_all_listed(wanted):
    status = [f"status.{name}" for name in root(wanted)["properties"]["status"]["properties"]]
    sentence = crdcheck.compare(without(wanted, *status), wanted)
    assert f"and {len(status) - crdcheck.MAX_NAMED} more" in sentence
