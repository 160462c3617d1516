"""One TrainingJob as a pass observes it (pure): read once, its spec parsed and checked once, its status read
as the API model, its rank-0 pod rendered once.

A pass reads a job's spec in several places (the admission queue's request, a
restarting gang's hold, the pods promised to an admitted gang, the phase
machine). :func:`observe_job` does the reading once per job per pass, and
those places take the resulting :class:`Observed` (they still accept the raw
object, which they observe themselves, for callers that hold only that).

The status is read through :class:`~railtrain.crds.api.TrainingJobStatus`
leniently (:func:`railtrain.operator.job.stored.read_status`): a stored status
may be partial, older or carry fields this version does not know, and a pass
must never fail on it; what the model cannot read is left out field by field.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.scheduling`` and
``railtrain.operator.job`` modules; never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from railtrain.crds.api import TrainingJob, TrainingJobStatus
from railtrain.crds.validation import format_validation_error
from railtrain.operator.job import render
from railtrain.operator.job.stored import status_and_problem
from railtrain.operator.scheduling.snapshot import parse_quantity


@dataclass(frozen=True)
class Observed:
    """A TrainingJob read from the API server, with what a pass derives from its spec and status (each derived once,
    when first read: the spec model or its error, the status model, rank 0's pod).

    Attributes:
        obj: the object as read (metadata, spec, status); never modified.
    """

    obj: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        """``metadata`` of the job."""
        return self.obj["metadata"]

    @cached_property
    def _status(self) -> tuple[TrainingJobStatus, str]:
        return status_and_problem(self.obj.get("status"))

    @property
    def status(self) -> TrainingJobStatus:
        """``status`` read through the model, once (:func:`~railtrain.operator.job.stored.read_status`: what it cannot
        read is left out; all defaults when never written)."""
        return self._status[0]

    @property
    def status_error(self) -> str:
        """Why the stored status is corrupt (a top-level value not of its type, left out of :attr:`status`), "" when
        it is not; the admission pass names such a job and leaves it out (:func:`~railtrain.operator.job.request.admission_request`)."""
        return self._status[1]

    def with_status(self, status: TrainingJobStatus) -> "Observed":
        """The same job with ``status`` in place of the stored one, sharing what was derived from the spec (parsed,
        checked and rendered at most once for both)."""
        other = Observed(self.obj | {"status": status.to_api()})
        other.__dict__.update(_read=self._read, _status=(status, ""))  # the cached_property slots: nothing read twice
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
