"""A TrainingJob's ``status`` as stored, read back through the API models (pure), leniently.

The models of :mod:`railtrain.crds.api` are strict (``extra="forbid"``,
required fields) because they also generate the CRD schema. A stored status
need not match them: a partial one written by hand or by a test (a placement
summary without ``topology.policy``, a condition without a reason), one
written by an older operator, or a field or phase this version does not know.
A pass must never fail on that, so the read side here keeps the models' types
but not their strictness: :class:`ObservedStatus` is the API model whose
conditions (:class:`~railtrain.operator.job.conditions.ObservedCondition`) and
progress (:class:`ObservedProgress`) need only what the operator reads, and
:func:`read_status` leaves out, field by field, what even these refuse.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.job`` modules; never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from pydantic import Field, ValidationError

from railtrain.crds.api import Progress, TrainingJobStatus
from railtrain.operator.job.conditions import ObservedCondition


class ObservedProgress(Progress):
    """``status.progress`` as read back: every field optional (the operator reads only ``lastUpdateTime``, to pace its reads)."""

    step: int | None = Field(None, ge=0, description="Last finished optimizer step (None when absent).")
    last_update_time: datetime | None = Field(None, description="When these numbers were read (None when absent).")


class ObservedStatus(TrainingJobStatus):
    """A TrainingJob's ``status`` as read back (the read side of :class:`~railtrain.crds.api.TrainingJobStatus`):
    conditions need only a type, progress nothing; every other field is the API model's. :func:`read_status` builds it."""

    conditions: list[ObservedCondition] = Field(default_factory=list, description="Latest observations, one per type.")
    progress: ObservedProgress | None = Field(None, description="Step, loss, tokens/s and ETA as rank 0 last reported them.")


def read_status(raw: Mapping[str, Any] | TrainingJobStatus | None) -> TrainingJobStatus:
    """A TrainingJob's ``status`` read through the API model, leniently (pure; never raises).

    A pass must never fail on a partial, older or unknown status, so:

    * a condition needs only its type, and progress nothing (:class:`ObservedStatus`:
      the operator read partial ones before the models did);
    * a null or empty value is unset (a pass's own status under construction
      holds nulls for the keys its patch deletes);
    * a missing field, an unknown field, a value outside its field's enum or
      bounds, a record or summary the model refuses (``admission``, ``hold``,
      ``topology``...) is left out, as if never written (its default is read),
      and in a list field only the refused entries are. A record it cannot
      read is absent, as the operator read records before the models did.

    A top-level value that is not of its field's type at all (``requeueAfter:
    "not a time"``, ``restarts: "many"``) is left out too, but that is a corrupt
    status rather than a partial one: :func:`status_and_problem` names it.

    Args:
        raw: the ``status`` object as read (None or not a mapping: never written), or a model already read.

    Returns:
        An :class:`ObservedStatus` (a :class:`~railtrain.crds.api.TrainingJobStatus`), all defaults when nothing is readable.
    """
    return status_and_problem(raw)[0]


def status_and_problem(raw: Mapping[str, Any] | TrainingJobStatus | None) -> tuple[TrainingJobStatus, str]:
    """:func:`read_status`, with why the status is corrupt (pure; never raises).

    Returns:
        ``(status, problem)``: ``problem`` is one sentence per corrupt top-level value (a field holding a value not of
        its type, e.g. a time that is not a time), joined by "; ", or "" when there is none. The operator refused such a
        status before the models read it (its time and count parsers raised), and the admission pass still names the
        job and leaves it out rather than act on a guess.
    """
    if isinstance(raw, TrainingJobStatus):
        return raw, ""
    data = {k: v for k, v in raw.items() if v is not None and v != ""} if isinstance(raw, Mapping) else {}
    problems: list[str] = []
    while True:
        try:
            return ObservedStatus.model_validate(data), "; ".join(problems)
        except ValidationError as err:
            kept = _without_refused(data, err, problems)
        if kept == data:
            return ObservedStatus(), "; ".join(problems)
        data = kept


def _corrupt(error: Any) -> bool:
    """Whether a validation error is a top-level value that is not of its field's type (a parse or type failure,
    not an enum, a bound, a record, a missing or an unknown field)."""
    return len(error["loc"]) == 1 and str(error["type"]).endswith(("_parsing", "_type")) and error["type"] != "model_type"


def _without_refused(data: dict[str, Any], err: ValidationError, problems: list[str]) -> dict[str, Any]:
    """``data`` less what ``err`` refuses: the refused entries of a list field, else the whole top-level field; a corrupt
    top-level value (:func:`_corrupt`) is also said in ``problems``."""
    fields: set[str] = set()
    entries: dict[str, set[int]] = {}
    for e in err.errors():
        loc = e["loc"]
        if not loc:
            continue
        key = str(loc[0])
        if _corrupt(e):
            problems.append(f"status.{key}: {data.get(key)!r} cannot be read ({e['msg']})")
        if len(loc) > 1 and isinstance(loc[1], int) and isinstance(data.get(key), list):
            entries.setdefault(key, set()).add(loc[1])
        else:
            fields.add(key)
    out = {k: v for k, v in data.items() if k not in fields}
    for key, bad in entries.items():
        if key in out:
            out[key] = [v for i, v in enumerate(out[key]) if i not in bad]
    return out
