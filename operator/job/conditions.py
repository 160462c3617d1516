"""Pure condition setters and phase rules for TrainingJob status.

Conditions follow the metav1.Condition convention (Kubernetes API conventions,
"Typical status properties"): one entry per type, ``lastTransitionTime`` moves
only when ``status`` changes, ``observedGeneration`` records the spec
generation the observation was made from. Setters take ``now`` and return
whether anything changed, so a reconcile writes status only when needed.

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError

from railtrain.crds.api import Condition, ConditionStatus, TrainingJobStatus
from railtrain.crds.times import format_time

# Condition types
SCHEDULED = "Scheduled"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"

# Phases (status.phase)
PENDING = "Pending"
RESTARTING = "Restarting"
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})


class ObservedCondition(Condition):
    """A condition as read back (the read side of :class:`~railtrain.crds.api.Condition`): only ``type`` is required.

    The API model requires ``status``, ``reason`` and ``lastTransitionTime``
    (the CRD schema is generated from it), but a condition read back may lack
    them (written by hand, by a test, or by another writer); a missing status
    reads as Unknown (neither True nor False), a missing reason as "", a
    missing time as None, which is how the operator read such a condition
    before the models did.
    """

    status: ConditionStatus = Field("Unknown", description="True, False or Unknown (Unknown when absent).")
    reason: str = Field("", description="One CamelCase word explaining the last transition (\"\" when absent).")
    last_transition_time: datetime | None = Field(None, description="When status last changed (None when absent).")


def find(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """Return the condition of ``type_`` from a status ``conditions`` list, or None."""
    for c in conditions:
        if c.get("type") == type_:
            return c
    return None


def is_true(conditions: list[dict[str, Any]], type_: str) -> bool:
    """Whether the condition of ``type_`` exists with status ``"True"``."""
    c = find(conditions, type_)
    return bool(c and c.get("status") == "True")


def condition_of(status: TrainingJobStatus, type_: str) -> Condition | None:
    """The condition of ``type_`` of a status read through the model, or None."""
    return next((c for c in status.conditions if c.type == type_), None)


def read_condition(raw: dict[str, Any] | None) -> ObservedCondition | None:
    """One condition as stored or being set (a :func:`set_condition` entry) read through the model, None when absent or
    unreadable (as :func:`~railtrain.operator.job.stored.read_status` leaves out an entry it cannot read)."""
    if raw is None:
        return None
    try:
        return ObservedCondition.model_validate(raw)
    except ValidationError:
        return None


def true_of(status: TrainingJobStatus, type_: str) -> bool:
    """Whether a status read through the model has the condition of ``type_`` with status ``"True"``."""
    c = condition_of(status, type_)
    return c is not None and c.status == "True"


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Set one condition, keeping ``lastTransitionTime`` unless ``status`` flips.

    Args:
        conditions: the current list (not modified).
        type_: condition type, CamelCase.
        status: True/False or ``"True"``/``"False"``/``"Unknown"``.
        reason: one CamelCase word; message: human-readable detail.
        now: the time of this observation (UTC).
        generation: ``metadata.generation`` observed.

    Returns:
        ``(new_list, changed)``; ``changed`` is False when nothing differs.
    """
    status_s = status if isinstance(status, str) else ("True" if status else "False")
    old = find(conditions, type_)
    new = {
        "type": type_,
        "status": status_s,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == status_s else format_time(now),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    if old == new:
        return conditions, False
    out = [c for c in conditions if c.get("type") != type_] + [new]
    order = {t: i for i, t in enumerate((SCHEDULED, RUNNING, SUSPENDED, SUCCEEDED, FAILED))}
    out.sort(key=lambda c: order.get(c["type"], len(order)))
    return out, True
