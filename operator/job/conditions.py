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
