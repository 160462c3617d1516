"""The reconcile plan of one TrainingJob (pure): observed objects in, actions and status out.

The operator's loop is snapshot → plan → apply the difference → one status
write → Events (the controller pattern of the Kubernetes API conventions, as
JobSet and Kueue do it). Everything that decides lives here and is tested
without a cluster; :mod:`railtrain.operator.kube` performs the actions.

Lifecycle of the gang (one per restart count, pods named ``<job>-<rank>``):

1. create the headless Service and every pod, gated;
2. when all pods exist and some are gated, ask placement for a node per rank
   (:func:`gang_request`); on success pin each pod with a nodeSelector and lift
   every gate in the same pass, on refusal stay Pending with the reason;
3. follow pod phases: all Running → Running; all Succeeded → Succeeded;
   a Failed pod → restart the whole gang (new restart count) while
   ``runPolicy.backoffLimit`` allows and the exit code is retryable, else Failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator import conditions as cond
from railtrain.operator import render
from railtrain.operator.cluster import pod_node
from railtrain.operator.placement import GangRequest, Placement, Refusal


@dataclass
class Plan:
    """What to do for one job in this pass.

    Attributes:
        create_service: Service manifest to create, or None.
        create_pods: pod manifests to create (gated).
        delete_pods: names of pods to delete.
        pin: pod name → node name to pin with a nodeSelector (gated pods only).
        ungate: names of pods whose scheduling gate to lift.
        status: the full new ``status`` object.
        status_changed: whether ``status`` differs from the observed one.
        events: ``(type, reason, message)`` to emit after the status write succeeds.
    """

    create_service: dict[str, Any] | None = None
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    pin: dict[str, str] = field(default_factory=dict)
    ungate: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    status_changed: bool = False
    events: list[tuple[str, str, str]] = field(default_factory=list)


def parse_job(obj: dict[str, Any]) -> TrainingJob:
    """Validate a TrainingJob object read from the API server (status ignored).

    Raises:
        pydantic.ValidationError: the stored spec does not match the models.
    """
    return TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": obj["metadata"]["name"]}})


def _restart_of(pod: dict[str, Any]) -> int:
    try:
        return int((pod["metadata"].get("annotations") or {}).get(contract.ANNOTATION_RESTART, "0"))
    except ValueError:
        return -1


def _rank_of(pod: dict[str, Any]) -> int:
    try:
        return int((pod["metadata"].get("labels") or {}).get(contract.LABEL_NODE_RANK, "-1"))
    except ValueError:
        return -1


def _phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def _is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == contract.SCHEDULING_GATE for g in (pod["spec"].get("schedulingGates") or []))


def _terminated(pod: dict[str, Any]) -> tuple[int, str]:
    """Exit code and termination message of the trainer container of a finished pod."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return int(term.get("exitCode", contract.EXIT_FAILED)), (term.get("message") or term.get("reason") or "").strip()
    return contract.EXIT_FAILED, (pod.get("status") or {}).get("message", "")


def current_gang(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods of the job's current restart count, not being deleted, ordered by rank."""
    restarts = int((obj.get("status") or {}).get("restarts", 0))
    live = [p for p in pods if _restart_of(p) == restarts and not p["metadata"].get("deletionTimestamp")]
    return sorted(live, key=_rank_of)


def gang_request(obj: dict[str, Any], pods: list[dict[str, Any]]) -> GangRequest | None:
    """The placement request of a job whose whole gang exists and is still gated, else None.

    Args:
        obj: the TrainingJob as read from the API server.
        pods: every pod labelled with the job's name.

    Returns:
        A :class:`GangRequest` with already pinned ranks in ``fixed``, or None when
        the job needs no placement now (pods missing, none gated, or terminal).
    """
    if (obj.get("status") or {}).get("phase") in cond.TERMINAL_PHASES or obj["spec"].get("runPolicy", {}).get("suspend"):
        return None
    try:
        job = parse_job(obj)
    except ValidationError:
        return None
    gang = current_gang(obj, pods)
    if len(gang) != job.spec.nodes or not any(_is_gated(p) for p in gang):
        return None
    fixed = {_rank_of(p): pod_node(p) for p in gang if pod_node(p)}
    ns = obj["metadata"].get("namespace", "")
    return GangRequest(job=f"{ns}/{job.metadata.name}", nodes=job.spec.nodes, gpus_per_node=job.spec.resources.gpus, fixed=fixed)


def _stop(plan: Plan, gang: list[dict[str, Any]]) -> None:
    plan.delete_pods.extend(p["metadata"]["name"] for p in gang if _phase(p) not in ("Succeeded", "Failed"))


def plan(obj: dict[str, Any], pods: list[dict[str, Any]], service_exists: bool, now: datetime, placement: Placement | Refusal | None = None) -> Plan:
    """Compute the actions and the new status of one job.

    Args:
        obj: the TrainingJob as read from the API server (with metadata.uid,
            metadata.generation and status).
        pods: every pod labelled with this job's name, any restart count.
        service_exists: whether the rendezvous Service exists.
        now: current time (UTC, timezone-aware).
        placement: the answer to :func:`gang_request`, when one was asked.

    Returns:
        A :class:`Plan`. It never raises on bad stored specs: those become phase
        Failed with reason InvalidSpec.
    """
    meta = obj["metadata"]
    name, ns, uid, gen = meta["name"], meta.get("namespace", ""), meta.get("uid", ""), meta.get("generation")
    old = dict(obj.get("status") or {})
    st: dict[str, Any] = {"restarts": 0, **old}
    conds = list(st.get("conditions") or [])
    out = Plan()
    events: list[tuple[str, str, str]] = []

    def set_c(type_: str, status: bool, reason: str, message: str, event: str | None = None) -> None:
        nonlocal conds
        conds, changed = cond.set_condition(conds, type_, status, reason, message, now, gen)
        if changed and event:
            events.append((event, reason, message))

    def finish(phase: str) -> Plan:
        st["phase"] = phase
        st["conditions"] = conds
        st["observedGeneration"] = gen
        st["placement"] = [{"rank": _rank_of(p), "node": pod_node(p)} for p in current_gang(obj, pods) if pod_node(p)] or st.get("placement", [])
        if phase in cond.TERMINAL_PHASES and not st.get("completionTime"):
            st["completionTime"] = cond.rfc3339(now)
        out.status = {k: v for k, v in st.items() if v is not None}
        out.status_changed = out.status != old
        out.events = events
        return out

    try:
        job = parse_job(obj)
    except ValidationError as err:
        set_c(cond.FAILED, True, "InvalidSpec", f"spec does not match the TrainingJob API: {err.errors()[0].get('msg')}", "Warning")
        return finish(cond.FAILED)

    if old.get("phase") in cond.TERMINAL_PHASES:
        if old["phase"] == cond.FAILED:
            _stop(out, current_gang(obj, pods))
        return finish(old["phase"])

    spec = job.spec
    restarts = int(st["restarts"])
    gang = current_gang(obj, pods)
    stale = [p for p in pods if _restart_of(p) != restarts]
    out.delete_pods.extend(p["metadata"]["name"] for p in stale if not p["metadata"].get("deletionTimestamp"))

    if spec.run_policy.suspend:
        _stop(out, gang)
        out.delete_pods = sorted(set(out.delete_pods) | {p["metadata"]["name"] for p in gang})
        set_c(cond.SUSPENDED, True, "Suspended", "runPolicy.suspend is true: the gang is stopped", "Normal")
        set_c(cond.RUNNING, False, "Suspended", "the job is suspended")
        return finish("Suspended")
    if cond.find(conds, cond.SUSPENDED):
        set_c(cond.SUSPENDED, False, "Resumed", "runPolicy.suspend is false: the job is admitted again", "Normal")

    if not service_exists:
        out.create_service = render.render_service(job, ns, uid)

    deadline = spec.run_policy.active_deadline_seconds
    started = st.get("startTime")
    if deadline and started and now >= datetime.fromisoformat(started.replace("Z", "+00:00")) + timedelta(seconds=deadline):
        _stop(out, gang)
        set_c(cond.RUNNING, False, "DeadlineExceeded", "the job stopped")
        set_c(cond.FAILED, True, "DeadlineExceeded", f"the job ran longer than runPolicy.activeDeadlineSeconds={deadline}", "Warning")
        return finish(cond.FAILED)

    failed = [p for p in gang if _phase(p) == "Failed"]
    if failed:
        rank, (code, message) = _rank_of(failed[0]), _terminated(failed[0])
        detail = f"rank {rank} exited with code {code}" + (f": {message}" if message else "")
        _stop(out, gang)
        set_c(cond.RUNNING, False, "PodFailed", detail)
        if code == contract.EXIT_USER_ERROR:
            set_c(cond.FAILED, True, "UserError", detail + " (a configuration error: not retried)", "Warning")
            return finish(cond.FAILED)
        if restarts >= spec.run_policy.backoff_limit:
            set_c(cond.FAILED, True, "BackoffLimitExceeded", f"{detail}; runPolicy.backoffLimit={spec.run_policy.backoff_limit} restarts used", "Warning")
            return finish(cond.FAILED)
        st["restarts"] = restarts + 1
        out.delete_pods = sorted(set(out.delete_pods) | {p["metadata"]["name"] for p in gang})
        set_c(cond.SCHEDULED, False, "Restarting", f"{detail}; restarting the gang ({restarts + 1}/{spec.run_policy.backoff_limit})", "Warning")
        return finish(cond.RESTARTING)

    if gang and len(gang) == spec.nodes and all(_phase(p) == "Succeeded" for p in gang):
        set_c(cond.RUNNING, False, "Completed", "every rank exited 0")
        set_c(cond.SUCCEEDED, True, "Completed", f"all {spec.nodes} ranks exited 0", "Normal")
        return finish(cond.SUCCEEDED)

    present = {_rank_of(p) for p in gang}
    blocked = {_rank_of(p) for p in pods if p["metadata"].get("deletionTimestamp") or _restart_of(p) != restarts}
    for rank in range(spec.nodes):
        if rank not in present and rank not in blocked:
            out.create_pods.append(render.render_pod(job, ns, uid, rank, restarts))
    if out.create_pods and not gang:
        events.append(("Normal", "GangCreated", f"created {len(out.create_pods)} gated pods and the rendezvous Service"))

    if isinstance(placement, Refusal):
        set_c(cond.SCHEDULED, False, placement.reason, placement.message, "Warning")
    elif isinstance(placement, Placement):
        for p in gang:
            if _is_gated(p):
                if not pod_node(p):
                    out.pin[p["metadata"]["name"]] = placement.nodes[_rank_of(p)]
                out.ungate.append(p["metadata"]["name"])
        set_c(cond.SCHEDULED, True, placement.reason, placement.message(), "Normal")
        gang = [_with_node(p, out.pin.get(p["metadata"]["name"])) for p in gang]
        in_gang = {id(p) for p in current_gang(obj, pods)}
        pods = [p for p in pods if id(p) not in in_gang] + gang
    elif gang and len(gang) == spec.nodes and not any(_is_gated(p) for p in gang):
        set_c(cond.SCHEDULED, True, "GangPlaced", "every rank has a node")

    if gang and len(gang) == spec.nodes and all(_phase(p) == "Running" for p in gang):
        if not st.get("startTime"):
            st["startTime"] = cond.rfc3339(now)
        set_c(cond.RUNNING, True, "AllRanksRunning", f"all {spec.nodes} ranks are Running", "Normal")
        return finish("Running")
    return finish(cond.RESTARTING if old.get("phase") == cond.RESTARTING and not gang else cond.PENDING)


def _with_node(pod: dict[str, Any], node: str | None) -> dict[str, Any]:
    if not node:
        return pod
    return render.pin_to_node(pod, node)

