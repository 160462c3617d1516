"""Which spec fields may change after a TrainingJob is created, written once and enforced in two places.

A running gang was started with one shape: its world size, parallel layout,
image, environment and placement are baked into pods whose processes cannot
change them. Changing such a field under a running gang would apply halfway
(ranks added or removed under processes that expect the old world size) or
not at all (until the next restart). So every spec field *defines the gang*
unless :data:`ALWAYS_MUTABLE` says otherwise, and a gang-defining field may
change only through the explicit path:

1. set ``spec.runPolicy.suspend: true`` and wait for ``status.phase: Suspended``
   (every pod deleted);
2. change the fields, keeping ``suspend: true`` in the same update;
3. set ``suspend: false``: the whole gang starts again at the new shape.

The rule is a CEL transition rule per field (:func:`cel_rules`, emitted on the
CRD's root by :func:`railtrain.crds.schema.crd`, so kube-apiserver refuses the
update naming the field) and the same rule in Python (:func:`update_errors`,
used by ``railtrain validate --old``). A field added to
:class:`~railtrain.crds.api.TrainingJobSpec` later is gang-defining unless it is
listed here, which is the safe default.
"""

from __future__ import annotations

from typing import Any

from railtrain.crds.api import TrainingJobSpec

ALWAYS_MUTABLE: dict[str, str] = {
    "priority": "admission order only; it matters while the job waits and changes nothing in a running gang",
    "runPolicy": "read by the operator on every pass (suspend, backoffLimit, activeDeadlineSeconds, gangTimeoutSeconds, failure policy, cleanup), never by the pods",
}
"""Spec fields (JSON names) that may change at any time, and why that is safe."""

NEVER_MUTABLE: dict[str, str] = {
    "managedBy": "names the controller that runs the job (this operator, or Kueue's MultiKueue on a manager cluster); "
                 "handing a job from one to the other would leave two controllers, or none, acting on it (batch/v1 Job's own rule)",
}
"""Spec fields (JSON names) that may never change after creation, not even while suspended, and why."""

SUSPENDED_PHASE = "Suspended"


def gang_fields() -> list[str]:
    """JSON names of the spec fields that define the gang (every field not in :data:`ALWAYS_MUTABLE`), in model order."""
    names = [f.alias or n for n, f in TrainingJobSpec.model_fields.items()]
    return [n for n in names if n not in ALWAYS_MUTABLE and n not in NEVER_MUTABLE]


def message(field: str) -> str:
    """The refusal sentence for a change of ``spec.<field>``."""
    if field in NEVER_MUTABLE:
        return f"spec.{field} cannot change after the job is created: it {NEVER_MUTABLE[field]}; delete the job and create it again"
    return (
        f"spec.{field} defines the gang and cannot change while the job may be running: set spec.runPolicy.suspend to true, "
        f"wait for status.phase Suspended, change spec.{field} keeping suspend true, then resume (the whole gang restarts at the new shape)"
    )


ALLOWED_CEL = "(has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase == 'Suspended' && self.spec.runPolicy.suspend)"
"""The CEL condition under which gang-defining fields may change: suspended, confirmed by the operator, and staying suspended."""


def cel_rules() -> list[dict[str, Any]]:
    """The ``x-kubernetes-validations`` transition rules for the CRD's root schema, one per gang-defining field.

    A transition rule runs only on updates (``oldSelf`` exists); ``has()`` on
    both sides makes adding or removing an optional field a change too.
    """
    rules = []
    for f in gang_fields():
        same = f"has(self.spec.{f}) == has(oldSelf.spec.{f}) && (!has(self.spec.{f}) || self.spec.{f} == oldSelf.spec.{f})"
        rules.append({"rule": f"{ALLOWED_CEL} || ({same})", "message": message(f), "fieldPath": f".spec.{f}", "reason": "FieldValueForbidden"})
    for f in NEVER_MUTABLE:
        same = f"has(self.spec.{f}) == has(oldSelf.spec.{f}) && (!has(self.spec.{f}) || self.spec.{f} == oldSelf.spec.{f})"
        rules.append({"rule": same, "message": message(f), "fieldPath": f".spec.{f}", "reason": "FieldValueForbidden"})
    return rules


def update_allowed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether gang-defining fields may change from ``old`` to ``new`` (objects as the server stores them)."""
    phase = (old.get("status") or {}).get("phase")
    suspend = ((new.get("spec") or {}).get("runPolicy") or {}).get("suspend", False)
    return phase == SUSPENDED_PHASE and suspend is True


def update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The refusals of updating ``old`` to ``new``, as kube-apiserver gives them.

    Args:
        old, new: whole TrainingJob objects as the server sees them: nulls
            pruned and defaults applied
            (:func:`railtrain.crds.validation.server_view`); ``old`` with its status.

    Returns:
        One sentence per gang-defining field that changed when changes are not
        allowed; empty when the update is allowed.
    """
    o, n = old.get("spec") or {}, new.get("spec") or {}
    never = [message(f) for f in NEVER_MUTABLE if (f in o) != (f in n) or o.get(f) != n.get(f)]
    if update_allowed(old, new):
        return never
    return [message(f) for f in gang_fields() if (f in o) != (f in n) or o.get(f) != n.get(f)] + never
