"""One TrainingJob as a pass observes it (pure): read once, its spec parsed and checked once, its status read
as the API model, its rank-0 pod rendered once.

A pass reads a job's spec in several places (the admission queue's request, a
restarting gang's hold, the pods promised to an admitted gang, the phase
machine). :func:`observe_job` does the reading once per job per pass, and
those places take the resulting :class:`Observed` (they still accept the raw
object, which they observe themselves, for callers that hold only that).

The status is read through :class:`~railtrain.crds.api.TrainingJobStatus` by
:func:`read_status`, leniently: a stored status may be partial (written by
hand, by a test, or by an older operator) or carry fields this version does
not know, and a pass must never fail on it, so what the model cannot read is
left out field by field (as if never written) rather than refusing the whole.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.scheduling`` and
``railtrain.operator.job`` modules; never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from pydantic import Field, ValidationError

from railtrain.crds.api import TrainingJob, TrainingJobStatus
from railtrain.operator.job.conditions import ObservedCondition
from railtrain.crds.validation import format_validation_error
from railtrain.operator.job import render
from railtrain.operator.scheduling.snapshot import parse_quantity


class ObservedStatus(TrainingJobStatus):
    """A TrainingJob's ``status`` as read back (the read side of :class:`~railtrain.crds.api.TrainingJobStatus`): its
    conditions are :class:`~railtrain.operator.job.conditions.ObservedCondition` (only ``type`` required); every other
    field is the API model's. :func:`read_status` builds it."""

    conditions: list[ObservedCondition] = Field(default_factory=list, description="Latest observations, one per type.")


@dataclass(frozen=True)
class Observed:
    """A TrainingJob read from the API server, with what a pass derives from its spec (each derived once, when first read).

    Attributes:
        obj: the object as read (metadata, spec, status); never modified.
    """

    obj: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        """``metadata`` of the job."""
        return self.obj["metadata"]

    @cached_property
    def status(self) -> TrainingJobStatus:
        """``status`` read through the model (:func:`read_status`: what it cannot read is left out; all defaults when never written).

        Raises:
            ValueError: a corrupt status (:func:`read_status`); the reader names the job and leaves it out.
        """
        return read_status(self.obj.get("status"))

    def with_status(self, status: TrainingJobStatus) -> "Observed":
        """The same job with ``status`` in place of the stored one, sharing what was derived from the spec (parsed,
        checked and rendered at most once for both)."""
        other = Observed(self.obj | {"status": status.to_api()})
        other.__dict__.update(_read=self._read, status=status)  # the cached_property slots: nothing read twice
        return other

    @cached_property
    def _read(self) -> tuple[TrainingJob | None, str, dict[str, Any] | None]:
        try:
            job = parse_job(self.obj)
        except ValidationError as err:
            return None, "; ".join(format_validation_error(err)[:3]), None
        problem = _resources_problem(job)
        try:
            pod0 = render.render_pod(job, self.meta.get("namespace", ""), self.meta.get("uid", ""), 0)
        except ValueError as err:
            return job, problem or str(err), None
        return job, problem or _pod_problem(pod0) or "", pod0

    @property
    def job(self) -> TrainingJob | None:
        """The parsed spec (:class:`~railtrain.crds.api.TrainingJob`, status left out), None when the models refuse it."""
        return self._read[0]

    @property
    def spec_error(self) -> str:
        """Why the job cannot become pods: the models' refusal (its first three errors), or
        :func:`spec_problem`'s sentence; "" for a usable spec."""
        return self._read[1]

    @property
    def pod0(self) -> dict[str, Any] | None:
        """Rank 0's pod as rendered from the spec (restart count 0, no fabric), None when :attr:`job` is None or
        rendering refused it; :func:`spec_problem` checks it and the admission pass reads a rank's needs from it."""
        return self._read[2]

    @property
    def usable(self) -> TrainingJob | None:
        """The parsed spec when it can become pods (no :attr:`spec_error`), else None."""
        return None if self.spec_error else self.job


def parse_job(obj: dict[str, Any]) -> TrainingJob:
    """Validate a TrainingJob object read from the API server (status ignored).

    Raises:
        pydantic.ValidationError: the stored spec does not match the models.
    """
    return TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": obj["metadata"]["name"]}})


def read_status(raw: Mapping[str, Any] | TrainingJobStatus | None) -> TrainingJobStatus:
    """A TrainingJob's ``status`` read through the API model, leniently (pure).

    The models are strict (``extra="forbid"``, required fields) because they
    also generate the CRD schema, but a stored status need not match them: a
    partial status written by hand or by a test (a placement summary without
    ``topology.policy``, a condition without a reason), one written by an older
    operator, or a field or phase this version does not know. A pass must never
    fail on that, so:

    * a condition needs only its type (:class:`ObservedCondition`: the operator
      decides on conditions, and read partial ones before the models did);
    * a null or empty value is unset (a pass's own status under construction
      holds nulls for the keys its patch deletes);
    * a missing field, an unknown field, a value outside its field's enum or
      bounds, a record or summary the model refuses (``admission``, ``hold``,
      ``topology``...) is left out, as if never written (its default is read),
      and in a list field only the refused entries are. A record it cannot
      read is absent, as the operator read records before the models did.

    What is left is a top-level value that is not of its field's type at all
    (``requeueAfter: "not a time"``, ``restarts: "many"``): not a partial or
    older status but a corrupt one, which the operator refused before the
    models read it (a time or a count it could not parse) and still refuses,
    so the pass names the job and leaves it out rather than acting on a guess.

    Args:
        raw: the ``status`` object as read (None or not a mapping: never written), or a model already read.

    Returns:
        An :class:`ObservedStatus` (a :class:`~railtrain.crds.api.TrainingJobStatus` whose conditions need only a
        type), all defaults when nothing is readable.

    Raises:
        ValueError: a top-level field holds a value not of its type (one sentence naming the field).
    """
    if isinstance(raw, TrainingJobStatus):
        return raw
    data = {k: v for k, v in raw.items() if v is not None and v != ""} if isinstance(raw, Mapping) else {}
    while True:
        try:
            return ObservedStatus.model_validate(data)
        except ValidationError as err:
            kept = _without_refused(data, err)
        if kept == data:
            return ObservedStatus()
        data = kept


def _corrupt(error: Any) -> bool:
    """Whether a validation error is a top-level value that is not of its field's type (a parse or type failure,
    not an enum, a bound, a missing or an unknown field)."""
    return len(error["loc"]) == 1 and str(error["type"]).endswith(("_parsing", "_type")) and error["type"] != "model_type"


def _without_refused(data: dict[str, Any], err: ValidationError) -> dict[str, Any]:
    """``data`` less what ``err`` refuses: the refused entries of a list field, else the whole top-level field.

    Raises:
        ValueError: a top-level value is corrupt (:func:`_corrupt`).
    """
    fields: set[str] = set()
    entries: dict[str, set[int]] = {}
    for e in err.errors():
        loc = e["loc"]
        if not loc:
            continue
        key = str(loc[0])
        if _corrupt(e):
            raise ValueError(f"status.{key}: {data.get(key)!r} cannot be read ({e['msg']})") from None
        if len(loc) > 1 and isinstance(loc[1], int) and isinstance(data.get(key), list):
            entries.setdefault(key, set()).add(loc[1])
        else:
            fields.add(key)
    out = {k: v for k, v in data.items() if k not in fields}
    for key, bad in entries.items():
        if key in out:
            out[key] = [v for i, v in enumerate(out[key]) if i not in bad]
    return out


def observe_job(obj: dict[str, Any]) -> Observed:
    """``obj`` as one pass observes it (pure; never raises on a bad spec).

    The spec is parsed and checked, and rank 0's pod rendered, once, when a reader first asks
    (a finished job that nobody asks about costs nothing).

    Args:
        obj: the TrainingJob as read from the API server.
    """
    return Observed(obj)


def observed(job: Observed | dict[str, Any]) -> Observed:
    """``job`` itself when already observed, else :func:`observe_job` of the raw object."""
    return job if isinstance(job, Observed) else observe_job(job)


def _quantity_problem(field: str, value: Any) -> str | None:
    try:
        amount = parse_quantity(value)
    except ValueError:
        return f"{field}: {value!r} is not a Kubernetes quantity (e.g. 500m, 4, 64Gi)"
    return f"{field}: {value!r} must not be negative" if amount < 0 else None


def _resources_problem(job: TrainingJob) -> str | None:
    """``spec.resources.cpu``, ``.memory`` and ``.shm`` that are not non-negative quantities, named as the user wrote them."""
    res = job.spec.resources
    for name in ("cpu", "memory", "shm"):
        value = getattr(res, name)
        if value is not None and (problem := _quantity_problem(f"spec.resources.{name}", value)):
            return problem
    return None


def _pod_problem(pod: dict[str, Any]) -> str | None:
    """The first amount of a rendered pod that is not a non-negative quantity (containers, emptyDir sizes, overhead)."""
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            for kind in ("requests", "limits"):
                for key, value in ((c.get("resources") or {}).get(kind) or {}).items():
                    if problem := _quantity_problem(f"container {c.get('name')} resources.{kind}.{key}", value):
                        return problem
    for v in spec.get("volumes") or []:
        size = (v.get("emptyDir") or {}).get("sizeLimit")
        if size is not None and (problem := _quantity_problem(f"volume {v.get('name')} emptyDir.sizeLimit", size)):
            return problem
    for key, value in (spec.get("overhead") or {}).items():
        if problem := _quantity_problem(f"overhead.{key}", value):
            return problem
    return None


def spec_problem(job: TrainingJob, namespace: str = "", uid: str = "") -> str | None:
    """Why a job whose spec parses still cannot become pods: a resource amount the API server refuses in a Pod.

    The CRD schema and the models may let such a value through (an object
    stored before a stricter schema, or a field the schema types only as a
    string), so the operator checks before it places or creates anything.
    ``spec.resources.cpu``, ``.memory`` and ``.shm`` are named as the user
    wrote them; then every amount of the rendered rank-0 pod (containers'
    requests and limits, ``emptyDir.sizeLimit``, ``overhead``) is checked,
    which covers the pod template. (A pass gets the same answer from
    :func:`observe_job`, which renders the pod once for every use.)

    Args:
        job: the parsed TrainingJob; namespace, uid: as rendered into the pod.

    Returns:
        One sentence naming the field and its value, or None when every
        amount is a non-negative quantity (:data:`~railtrain.operator.scheduling.snapshot.QUANTITY`).
    """
    if problem := _resources_problem(job):
        return problem
    try:
        pod = render.render_pod(job, namespace, uid, 0)
    except ValueError as err:
        return str(err)
    return _pod_problem(pod)
