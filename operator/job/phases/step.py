"""The state one pass of the phase machine reads and writes (pure).

A :class:`Step` holds what was observed (the job, its pods, the time, the
admission pass's answer) and what the pass has decided so far (actions in
:class:`Plan`, the new status, its conditions and Events). Transitions in
:mod:`railtrain.operator.job.phases` read and extend it; nothing here talks to
the API server.

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from railtrain.crds.api import Condition, RankPlacement, TrainingJob, TrainingJobStatus
from railtrain.crds.fabric import FabricProfile
from railtrain.operator.job import conditions as cond
from railtrain.operator.job.lighthouse import LighthouseSeen
from railtrain.operator.job.observed import Observed
from railtrain.operator.job.stored import read_status
from railtrain.operator.scheduling.snapshot import pod_node
from railtrain.operator.job.pods import phase, pod_phase, rank_of, restart_of
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal


class StatusPatch(dict):  # type: ignore[type-arg]
    """The status one pass builds (a plain ``dict`` of camelCase keys, the content of its status patch) that counts
    its changes in :attr:`version`, so :attr:`Step.state` reads it through the model again only after one.

    Rows replace values (``status[key] = ...``, ``update``, ``pop``), never change one in place.
    """

    version = 0

    def __setitem__(self, key: str, value: Any) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.version += 1
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)

    def pop(self, *args: Any) -> Any:
        self.version += 1
        return super().pop(*args)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.version += 1
        return super().setdefault(key, default)


@dataclass
class Plan:
    """What to do for one job in this pass.

    Attributes:
        create_service: Service manifest to create, or None.
        delete_service: the uid of the job's own rendezvous Service to delete (its gang is gone and it waits), or None.
        create_pods: pod manifests to create (gated).
        create_objects: other objects of the gang to create first (the job's ComputeDomain; one that exists is kept).
        delete_pods: names of pods to delete.
        pin: pod name → node name to pin with a nodeSelector (gated pods only).
        annotate: pod name → annotations to set in the same patch (the admitted gang size).
        ungate: names of pods whose scheduling gate to lift.
        uids: pod name → uid, the precondition of each delete (never delete a
            pod of the same name created by someone else meanwhile).
        status: the full new ``status`` object.
        status_changed: whether ``status`` differs from the observed one.
        events: ``(type, reason, message)`` to emit after the status write succeeds.
        force_delete_pods: names of pods to delete with grace period 0 (pods on a lost node).
        quarantine: ``(node, verdict, evidence)`` of nodes to taint (:mod:`railtrain.operator.scheduling.quarantine`).
        delete_job: delete the TrainingJob itself (``runPolicy.ttlSecondsAfterFinished`` passed).
        log: one operator log line per recovery decision (restart, quarantine, ignored claim, eviction, node loss).
        status_first: write ``status`` before creating ``create_pods`` and deleting ``delete_pods`` (an admitted placement is
            recorded before its pods exist; a restart's ``status.hold`` before its old pods start to leave).
    """

    create_service: dict[str, Any] | None = None
    delete_service: str | None = None
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    create_objects: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    pin: dict[str, str] = field(default_factory=dict)
    annotate: dict[str, dict[str, str]] = field(default_factory=dict)
    ungate: list[str] = field(default_factory=list)
    uids: dict[str, str] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    status_changed: bool = False
    events: list[tuple[str, str, str]] = field(default_factory=list)
    force_delete_pods: list[str] = field(default_factory=list)
    quarantine: list[tuple[str, str, str]] = field(default_factory=list)
    delete_job: bool = False
    log: list[str] = field(default_factory=list)
    status_first: bool = False


@dataclass
class Step:
    """One pass over one job: observations plus the decisions made so far.

    Attributes:
        obj: the TrainingJob as read (metadata, spec, status).
        job: the parsed job, None when the stored spec does not parse.
        pods: the job's pods (every restart count, terminating ones included).
        service_exists: whether the rendezvous Service exists.
        service_uid: its uid when it is the job's own and was read as an object ("" otherwise).
        now: the time of this observation (UTC, timezone-aware).
        placement: the admission pass's answer, when it was asked.
        old: the observed ``status`` as stored (the base of the status patch; read it through :attr:`observed`).
        status: the new status being built (``restarts`` always present; read it through :attr:`state`).
        conds: the new ``status.conditions`` (read one through :meth:`condition`).
        gang: the live pods of the current restart count, by rank (the
            transitions narrow it, e.g. to the admitted size).
        n: the gang size (admitted, else ``spec.nodes``).
        released: the admitted size once any rank is released, else None.
        placed: rank → topology domains of a placement made in this pass.
        out: the actions decided so far.
        spec_error: why the stored spec does not parse (when ``job`` is None).
        foreign: pods the job does not own that hold one of its ranks' names.
        settings: the operator's plan settings (:class:`~railtrain.operator.job.plansettings.PlanSettings`),
            given when the step is built; :attr:`fabric` and :attr:`quarantine_limit` read them.
        seen: the job as observed in this pass (its status read through the model once), when the step was built from one.
        lighthouse: the job's Lighthouse pod and Service as read in this pass (jobs with ``spec.faultTolerance``), None when not read.
        spares_waiting: see the attribute.
    """

    obj: dict[str, Any]
    job: TrainingJob | None
    pods: list[dict[str, Any]]
    service_exists: bool
    now: datetime
    placement: Placement | Refusal | None
    old: dict[str, Any]
    status: dict[str, Any]
    conds: list[dict[str, Any]]
    gang: list[dict[str, Any]] = field(default_factory=list)
    n: int = 0
    released: int | None = None
    placed: dict[int, dict[str, str]] = field(default_factory=dict)
    out: Plan = field(default_factory=Plan)
    spec_error: str = ""
    nodes: dict[str, dict[str, Any]] | None = None
    grow_to: int | None = None
    foreign: list[dict[str, Any]] = field(default_factory=list)
    settings: PlanSettings = field(default_factory=PlanSettings)
    service_uid: str = ""
    seen: Observed | None = None
    lighthouse: LighthouseSeen | None = None
    spares_waiting: int = 0
    """This gang's hot spare pods Running and not being deleted (they are not in :attr:`pods`: not the gang's yet)."""
    _state: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def fabric(self) -> FabricProfile | None:
        """The operator's fabric profile, rendered into new pods (:attr:`PlanSettings.fabric`)."""
        return self.settings.fabric

    @property
    def quarantine_limit(self) -> int | None:
        """The platform's bound on nodes quarantined per hour in the whole cluster (:attr:`PlanSettings.quarantine_limit`)."""
        return self.settings.quarantine_limit

    @property
    def meta(self) -> dict[str, Any]:
        """``metadata`` of the job."""
        return self.obj["metadata"]

    @property
    def observed_job(self) -> Observed:
        """The job as observed at the start of the pass (:attr:`seen`, else :attr:`obj` observed now)."""
        return self.seen if self.seen is not None else Observed(self.obj)

    @property
    def observed(self) -> TrainingJobStatus:
        """The status observed at the start of the pass, read through the model (once per pass, by :class:`Observed`)."""
        return self.observed_job.status

    @property
    def state(self) -> TrainingJobStatus:
        """The status as this pass has built it so far (:attr:`status`; its conditions are the observed ones until
        :func:`~railtrain.operator.job.planner.finish` writes :attr:`conds` into it), read through the model.

        Read again only after the pass changed it (:class:`StatusPatch` counts the changes), and then only what it
        changed: a key whose value is still the observed
        object is taken from :attr:`observed` (read once per pass), the others are read by
        :func:`~railtrain.operator.job.stored.read_status`. Rows ask per pod (:attr:`restarts`), so a 64-rank job's
        placement and goodput are not parsed again for each question.
        """
        version = getattr(self.status, "version", None)
        cached = self._state
        if cached is not None and version is not None and cached[0] == version:
            return cached[1]
        changed = {k: v for k, v in self.status.items() if k not in self.old or self.old[k] is not v}
        gone = set(self.old) - set(self.status)
        part = read_status(changed)
        update = {name: getattr(part, name) for name, f in type(part).model_fields.items() if (f.alias or name) in changed or (f.alias or name) in gone}
        state = self.observed.model_copy(update=update)
        self._state = (version, state)  # a plain dict (no version) is read every time
        return state

    def condition(self, type_: str) -> Condition | None:
        """The condition of ``type_`` as this pass has set it so far, read through the model (None: absent)."""
        return cond.read_condition(cond.find(self.conds, type_))

    @property
    def restarts(self) -> int:
        """The restart count of the current gang (``status.restarts``, raised by a restart in this pass)."""
        return self.state.restarts

    def spare_may_take(self, pod: dict[str, Any]) -> bool:
        """Whether ``pod``, a rank pod of the current gang being deleted, is one whose rank a waiting hot spare is about
        to take (``spec.spares`` with ``runPolicy.restartInPlace``, and a spare pod Running): its supervisor said it
        is leaving and stays until the spare took the rank (crds/supervisor.py), so the rank is neither vanished nor
        an old pod to wait for while the pod terminates."""
        spec = self.job.spec if self.job is not None else None
        if spec is None or not spec.spares or not spec.run_policy.restart_in_place or self.spares_waiting <= 0:
            return False
        return bool(pod["metadata"].get("deletionTimestamp")) and restart_of(pod) == self.restarts

    @property
    def old_phase(self) -> str:
        """The phase observed at the start of the pass (Pending when none)."""
        return self.observed.phase or cond.PENDING

    def set_condition(self, type_: str, status: bool, reason: str, message: str, event: str | None = None) -> None:
        """Set one condition (see :func:`railtrain.operator.job.conditions.set_condition`); queue an Event of type ``event`` if it changed."""
        self.conds, changed = cond.set_condition(self.conds, type_, status, reason, message, self.now, self.meta.get("generation"))
        if changed and event:
            self.out.events.append((event, reason, message))

    def is_true(self, type_: str) -> bool:
        """Whether condition ``type_`` is True in the new conditions."""
        return cond.is_true(self.conds, type_)

    def delete(self, pods: list[dict[str, Any]]) -> None:
        """Delete ``pods`` (by name, with their uid as precondition; duplicates are merged)."""
        self.out.uids.update({p["metadata"]["name"]: p["metadata"]["uid"] for p in pods if p["metadata"].get("uid")})
        self.out.delete_pods = sorted(set(self.out.delete_pods) | {p["metadata"]["name"] for p in pods})

    def stop(self, pods: list[dict[str, Any]]) -> None:
        """Delete the pods among ``pods`` that still run (Succeeded/Failed pods are kept as a record; a pod whose trainer ended while a sidecar runs is deleted)."""
        self.delete([p for p in pods if pod_phase(p) not in ("Succeeded", "Failed")])

    def phases(self) -> list[str]:
        """The phase of every rank of the gang, by rank: its trainer container's outcome (:func:`railtrain.operator.job.pods.phase`)."""
        return [phase(p) for p in self.gang]

    @property
    def done(self) -> set[int]:
        """Ranks of the current gang whose trainer exited 0 (``status.succeededRanks``): complete for this attempt even when their pods are gone."""
        return set(self.state.succeeded_ranks)

    def held(self) -> set[int]:
        """Ranks whose pod is being deleted while a waiting spare is about to take them (:meth:`spare_may_take`),
        its trainer container still running: still covered (the gang trains on, in place)."""
        return {rank_of(p) for p in self.pods if self.spare_may_take(p) and phase(p) == "Running"}

    def complete(self) -> bool:
        """Whether every rank below the gang size has a live pod (or one a spare is about to take: :meth:`held`), or
        exited 0 earlier in this attempt."""
        covered = {rank_of(p) for p in self.gang} | self.done | self.held()
        return bool(self.gang or self.done) and self.n > 0 and all(r in covered for r in range(self.n))


def finished_ranks(status: TrainingJobStatus, pods: list[dict[str, Any]], restarts: int) -> list[int] | None:
    """``status.succeededRanks`` after this observation: the recorded ranks plus those of the current gang seen Succeeded now.

    A rank that exited 0 stays complete for its attempt: its pod deleted afterwards (by a person, ``kubectl drain``,
    the pod garbage collector) is not a vanished rank (docs/operator.md, "Recovery").

    Args:
        status: the observed status (read through the model); pods: the job's pods (any restart count, terminating ones included);
        restarts: the current restart count.

    Returns:
        The sorted ranks, or None when there are none (the key is then left out).
    """
    done = set(status.succeeded_ranks)
    done |= {rank_of(p) for p in pods if restart_of(p) == restarts and phase(p) == "Succeeded"}
    return sorted(done) or None


HEALTHY_POD_PHASES = frozenset({"Running", "Succeeded"})
"""A rank is healthy while its pod runs or after it exited 0 (ranks may finish at different times)."""


def healthy(step: Step) -> bool:
    """Whether the gang is healthy: every rank below the gang size has a pod, each Running or Succeeded."""
    return step.complete() and all(p in HEALTHY_POD_PHASES for p in step.phases())


def placement_entries(gang: list[dict[str, Any]], old: list[RankPlacement], placed: dict[int, dict[str, str]]) -> list[dict[str, Any]]:
    """``status.placement`` (a patch's list of dicts) from the pinned pods, keeping the domains known (``old``: the observed
    placement, read through the model) for the same rank and node."""
    known = {(e.rank, e.node): e.domains for e in old}
    out = []
    for p in gang:
        node = pod_node(p)
        if node:
            entry: dict[str, Any] = {"rank": rank_of(p), "node": node}
            domains = placed.get(rank_of(p)) if rank_of(p) in placed else known.get((rank_of(p), node))
            if domains:
                entry["domains"] = dict(domains)
            out.append(entry)
    return out
