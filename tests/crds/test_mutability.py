"""Which spec fields may change after creation: one table, a CEL rule per field, the same rule in Python."""

from __future__ import annotations

import copy

import pytest

from railtrain.crds.api import TrainingJobSpec
from railtrain.crds.mutability import ALWAYS_MUTABLE, cel_rules, gang_fields
from railtrain.crds.schema import crd
from railtrain.crds.validation import ManifestError, check_update


def stored(phase="Running", suspend=False, **spec):
    return {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j"},
            "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8}, "runPolicy": {"suspend": suspend}} | spec,
            "status": {"phase": phase}}


def updated(old, **spec):
    new = copy.deepcopy(old)
    new.pop("status")
    new["spec"].update(spec)
    return new


def test_every_spec_field_is_gang_defining_unless_listed_as_always_or_never_mutable():
    from railtrain.crds.mutability import NEVER_MUTABLE

    fields = {f.alias for f in TrainingJobSpec.model_fields.values()}
    assert set(ALWAYS_MUTABLE) <= fields and set(NEVER_MUTABLE) <= fields
    assert set(gang_fields()) == fields - set(ALWAYS_MUTABLE) - set(NEVER_MUTABLE)
    root_rules = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert {r["fieldPath"] for r in cel_rules()} == {f".spec.{f}" for f in (*gang_fields(), *NEVER_MUTABLE)}
    assert all(r in root_rules for r in cel_rules())


@pytest.mark.parametrize(
    "old,change,refused",
    [
        (stored(), {"nodes": 3}, "spec.nodes"),
        (stored(), {"parallelism": {"data": 16}}, "spec.parallelism"),  # adding an optional field is a change
        (stored(suspend=True, phase="Running"), {"nodes": 3}, "spec.nodes"),  # not yet confirmed Suspended
        (stored(), {"priority": 9}, None),
        (stored(), {"runPolicy": {"suspend": True, "backoffLimit": 0}}, None),
        (stored(), {"topology": {"policy": "preferred"}}, None),  # the default the server filled in: no change
        (stored(phase="Suspended", suspend=True), {"nodes": 3, "procsPerNode": 4, "resources": {"gpus": 4}}, None),
        (stored(phase="Suspended", suspend=True), {"nodes": 3, "runPolicy": {"suspend": False}}, "spec.nodes"),  # resume separately
    ],
)
def test_check_update(old, change, refused):
    new = updated(old, **change)
    if refused is None:
        check_update(old, new)
    else:
        with pytest.raises(ManifestError) as err:
            check_update(old, new)
        assert err.value.errors[0].startswith(f"{refused} defines the gang")


@pytest.mark.parametrize("old,change", [
    (stored(), {"managedBy": "kueue.x-k8s.io/multikueue"}),  # added
    (stored(managedBy="kueue.x-k8s.io/multikueue"), {"managedBy": "railtrain.dev/trainingjob-controller"}),  # changed
    (stored(phase="Suspended", suspend=True, managedBy="kueue.x-k8s.io/multikueue"), {"managedBy": "railtrain.dev/trainingjob-controller"}),  # even suspended
])
def test_managed_by_never_changes_not_even_while_suspended(old, change):
    """``spec.managedBy`` (issue 28, MultiKueue) is immutable like batch/v1 Job's: handing a job from one controller to
    another would leave two, or none, acting on it; the suspend path that lets gang fields change does not open it."""
    with pytest.raises(ManifestError) as err:
        check_update(old, updated(old, **change))
    assert err.value.errors[-1].startswith("spec.managedBy cannot change after the job is created"), err.value.errors
