"""The reconcile plan of one TrainingJob (pure): observed objects in, actions and status out.

The operator's loop is snapshot → plan → apply the difference → one status
write → Events (the controller pattern of the Kubernetes API conventions, as
JobSet and Kueue do it). Everything that decides lives here and is tested
without a cluster; :mod:`railtrain.operator.kube` performs the actions.

Lifecycle of the gang (one per restart count, pods named ``<job>-<rank>``):

1. create the headless Service and every pod, gated (``spec.nodes`` of them,
   the maximum for an elastic job);
2. when all pods exist and some are gated the job waits in the admission queue
   (:func:`gang_request`); the admission pass
   (:mod:`railtrain.operator.admission`) answers with a placement, applied here
   by pinning each pod with a nodeSelector, setting its admitted gang size and
   lifting every gate in the same patch (ranks above an elastic gang's admitted
   size are deleted), or with a refusal, kept as the Scheduled condition;
3. follow pod phases: all Running → Running; all Succeeded → Succeeded;
   a Failed pod → restart the whole gang (new restart count) while
   ``runPolicy.backoffLimit`` allows and the exit code is retryable, else Failed;
4. a released gang not fully Running within ``runPolicy.gangTimeoutSeconds``
   (measured from the Scheduled condition turning True) is deleted whole,
   its nodes freed, and the job re-queued after an exponential backoff
   (``status.requeues``, ``status.requeueAfter``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from railtrain.crds import contract
from railtrain.operator import conditions as cond
from railtrain.operator import render
from railtrain.operator.cluster import pod_node
from railtrain.operator.gang import (
    admission_request,
    admitted_nodes,
    current_gang,
    gang_request,
    is_gated,
    parse_job,
    parse_time,
    phase,
    rank_of,
    requeue_delay,
    restart_of,
)
from railtrain.operator.placement import PINNED_NODE_UNAVAILABLE, Placement, Refusal

__all__ = ["Plan", "plan", "parse_job", "admission_request", "gang_request", "current_gang"]


@dataclass
class Plan:
    """What to do for one job in this pass.

    Attributes:
        create_service: Service manifest to create, or None.
        create_pods: pod manifests to create (gated).
        delete_pods: names of pods to delete.
        pin: pod name → node name to pin with a nodeSelector (gated pods only).
        annotate: pod name → annotations to set in the same patch (the admitted gang size).
        ungate: names of pods whose scheduling gate to lift.
        status: the full new ``status`` object.
        status_changed: whether ``status`` differs from the observed one.
        events: ``(type, reason, message)`` to emit after the status write succeeds.
    """

    create_service: dict[str, Any] | None = None
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    pin: dict[str, str] = field(default_factory=dict)
    annotate: dict[str, dict[str, str]] = field(default_factory=dict)
    ungate: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    status_changed: bool = False
    events: list[tuple[str, str, str]] = field(default_factory=list)


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns status ``old`` into ``new``.

    A merge patch keeps keys it does not mention, so every key of ``old``
    (at any depth of nested objects) missing from ``new`` is sent as null,
    which deletes it. Lists are replaced whole, as merge patches do.
    """
    out: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        out[key] = status_patch(before, value) if isinstance(value, dict) and isinstance(before, dict) else value
    out.update({key: None for key in old if key not in new})
    return out


def _terminated(pod: dict[str, Any]) -> tuple[int, str, bool]:
    """Exit code, message and whether retrying can help, for the trainer container of a finished pod.

    The trainer's verdict comes from its termination message
    (:func:`railtrain.crds.contract.parse_termination_message`); torchrun turns a
    worker's exit code 2 into 1, so the message, not the code, carries "user
    error". Without a verdict, exit code 2 still means a user error and any
    other failure is retryable.
    """
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            code = int(term.get("exitCode", contract.EXIT_FAILED))
            raw = (term.get("message") or "").strip()
            verdict = contract.parse_termination_message(raw)
            if verdict:
                return code, f"{verdict['reason']}: {verdict['message']}", verdict["verdict"] != contract.VERDICT_USER_ERROR
            return code, raw or (term.get("reason") or ""), code != contract.EXIT_USER_ERROR
    return contract.EXIT_FAILED, (pod.get("status") or {}).get("message", ""), True


def _stop(plan: Plan, gang: list[dict[str, Any]]) -> None:
    plan.delete_pods.extend(p["metadata"]["name"] for p in gang if phase(p) not in ("Succeeded", "Failed"))


def _placement_entries(gang: list[dict[str, Any]], old: list[dict[str, Any]], placed: dict[int, dict[str, str]]) -> list[dict[str, Any]]:
    """``status.placement`` from the pinned pods, keeping the domains known for the same rank and node."""
    known = {(e.get("rank"), e.get("node")): e.get("domains") for e in old}
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


def _release(out: Plan, placement: Placement, gang: list[dict[str, Any]], job: Any) -> list[dict[str, Any]]:
    """Pin, annotate and ungate the gated pods of ranks below the admitted size; delete the ranks above it.

    Returns:
        The gang as it will look after the actions (pinned copies, ranks above removed).
    """
    size = len(placement.nodes)
    annotations = render.gang_annotations(job.spec, size)
    after = []
    for p in gang:
        name, rank = p["metadata"]["name"], rank_of(p)
        if rank >= size:
            out.delete_pods.append(name)
            continue
        if is_gated(p):
            if not pod_node(p):
                out.pin[name] = placement.nodes[rank]
            out.annotate[name] = annotations
            out.ungate.append(name)
        after.append(render.pin_to_node(p, out.pin[name]) if name in out.pin else p)
    return after


def plan(obj: dict[str, Any], pods: list[dict[str, Any]], service_exists: bool, now: datetime, placement: Placement | Refusal | None = None) -> Plan:
    """Compute the actions and the new status of one job.

    Args:
        obj: the TrainingJob as read from the API server (with metadata.uid,
            metadata.generation and status).
        pods: every pod labelled with this job's name, any restart count.
        service_exists: whether the rendezvous Service exists.
        now: current time (UTC, timezone-aware).
        placement: the admission pass's answer for this job, when it was asked
            (:func:`gang_request` returned a request).

    Returns:
        A :class:`Plan`. It never raises on bad stored specs: those become phase
        Failed with reason InvalidSpec.
    """
    meta = obj["metadata"]
    ns, uid, gen = meta.get("namespace", ""), meta.get("uid", ""), meta.get("generation")
    old = dict(obj.get("status") or {})
    st: dict[str, Any] = {"restarts": 0, **old}
    conds = list(st.get("conditions") or [])
    out = Plan()
    events: list[tuple[str, str, str]] = []
    placed: dict[int, dict[str, str]] = {}

    def set_c(type_: str, status: bool, reason: str, message: str, event: str | None = None) -> None:
        nonlocal conds
        conds, changed = cond.set_condition(conds, type_, status, reason, message, now, gen)
        if changed and event:
            events.append((event, reason, message))

    def finish(phase_: str, released: int | None = None) -> Plan:
        st["phase"] = phase_
        st["conditions"] = conds
        st["observedGeneration"] = gen
        st["placement"] = _placement_entries(current_gang(obj, pods), old.get("placement") or [], placed) or st.get("placement", [])
        st["admittedNodes"] = released
        if phase_ in cond.TERMINAL_PHASES and not st.get("completionTime"):
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
        return finish(old["phase"], old.get("admittedNodes"))

    spec = job.spec
    restarts = int(st["restarts"])
    gang = current_gang(obj, pods)
    stale = [p for p in pods if restart_of(p) != restarts]
    out.delete_pods.extend(p["metadata"]["name"] for p in stale if not p["metadata"].get("deletionTimestamp"))

    if spec.run_policy.suspend:
        _stop(out, gang)
        out.delete_pods = sorted(set(out.delete_pods) | {p["metadata"]["name"] for p in gang})
        set_c(cond.SUSPENDED, True, "Suspended", "runPolicy.suspend is true: the gang is stopped", "Normal")
        set_c(cond.RUNNING, False, "Suspended", "the job is suspended")
        set_c(cond.SCHEDULED, False, "Suspended", "the gang is stopped; its nodes are free")
        return finish("Suspended")
    if cond.find(conds, cond.SUSPENDED):
        set_c(cond.SUSPENDED, False, "Resumed", "runPolicy.suspend is false: the job is admitted again", "Normal")

    if not service_exists:
        out.create_service = render.render_service(job, ns, uid)

    deadline = spec.run_policy.active_deadline_seconds
    started = parse_time(st.get("startTime"))
    if deadline and started and now >= started + timedelta(seconds=deadline):
        _stop(out, gang)
        set_c(cond.RUNNING, False, "DeadlineExceeded", "the job stopped")
        set_c(cond.FAILED, True, "DeadlineExceeded", f"the job ran longer than runPolicy.activeDeadlineSeconds={deadline}", "Warning")
        return finish(cond.FAILED)

    n = admitted_nodes(spec, gang)
    extra = [p for p in gang if rank_of(p) >= n]  # an elastic gang's ranks above its admitted size
    out.delete_pods.extend(p["metadata"]["name"] for p in extra)
    gang = [p for p in gang if rank_of(p) < n]
    released = n if any(not is_gated(p) for p in gang) else None

    failed = [p for p in gang if phase(p) == "Failed"]
    if failed:
        # One rank's configuration error takes the others down with retryable
        # errors; the user-error verdict, from whichever rank, decides.
        verdicts = sorted(((_terminated(p), rank_of(p)) for p in failed), key=lambda v: (v[0][2], v[1]))
        (code, message, retryable), rank = verdicts[0]
        detail = f"rank {rank} exited with code {code}" + (f": {message}" if message else "")
        _stop(out, gang)
        set_c(cond.RUNNING, False, "PodFailed", detail)
        if not retryable:
            set_c(cond.FAILED, True, "UserError", detail + " (a configuration error: not retried)", "Warning")
            return finish(cond.FAILED, released)
        if restarts >= spec.run_policy.backoff_limit:
            set_c(cond.FAILED, True, "BackoffLimitExceeded", f"{detail}; runPolicy.backoffLimit={spec.run_policy.backoff_limit} restarts used", "Warning")
            return finish(cond.FAILED, released)
        st["restarts"] = restarts + 1
        out.delete_pods = sorted(set(out.delete_pods) | {p["metadata"]["name"] for p in gang})
        set_c(cond.SCHEDULED, False, "Restarting", f"{detail}; restarting the gang ({restarts + 1}/{spec.run_policy.backoff_limit})", "Warning")
        return finish(cond.RESTARTING)

    complete = len(gang) == n
    if gang and complete and all(phase(p) == "Succeeded" for p in gang):
        set_c(cond.RUNNING, False, "Completed", "every rank exited 0")
        set_c(cond.SUCCEEDED, True, "Completed", f"all {n} ranks exited 0", "Normal")
        return finish(cond.SUCCEEDED, released)

    scheduled = cond.find(conds, cond.SCHEDULED)
    released_at = parse_time(scheduled.get("lastTransitionTime")) if scheduled and scheduled.get("status") == "True" else None
    timeout = spec.run_policy.gang_timeout_seconds
    if released and released_at and not all(phase(p) == "Running" for p in gang) and now >= released_at + timedelta(seconds=timeout):
        running = sum(1 for p in gang if phase(p) == "Running")
        requeues = int(st.get("requeues", 0)) + 1
        after = now + requeue_delay(requeues)
        st["requeues"], st["requeueAfter"] = requeues, cond.rfc3339(after)
        out.delete_pods = sorted(set(out.delete_pods) | {p["metadata"]["name"] for p in gang})
        set_c(cond.RUNNING, False, "GangTimeout", f"{running} of {n} ranks were Running")
        set_c(
            cond.SCHEDULED, False, "GangTimeout",
            f"the gang was not fully Running within runPolicy.gangTimeoutSeconds={timeout} after release ({running} of {n} ranks Running); "
            f"released all {n} nodes and re-queued, next admission attempt after {st['requeueAfter']} (requeue {requeues})",
            "Warning",
        )
        return finish(cond.PENDING)

    present = {rank_of(p) for p in gang}
    blocked = {rank_of(p) for p in pods if p["metadata"].get("deletionTimestamp") or restart_of(p) != restarts}
    for rank in range(n):
        if rank not in present and rank not in blocked:
            out.create_pods.append(render.render_pod(job, ns, uid, rank, restarts))
    if out.create_pods and not gang:
        events.append(("Normal", "GangCreated", f"created {len(out.create_pods)} gated pods and the rendezvous Service"))

    if isinstance(placement, Refusal):
        set_c(cond.SCHEDULED, False, placement.reason, placement.message, "Warning" if placement.warning else "Normal")
        if placement.reason == PINNED_NODE_UNAVAILABLE:  # pinned pods cannot move: start the gang over
            out.delete_pods = sorted(set(out.delete_pods) | {p["metadata"]["name"] for p in gang})
    elif isinstance(placement, Placement):
        gang = _release(out, placement, gang, job)
        n = released = len(placement.nodes)
        placed.update(dict(enumerate(placement.domains)))
        set_c(cond.SCHEDULED, True, placement.reason, placement.message(), "Normal")
        st["topology"] = {**placement.summary, "reason": placement.explanation}
        st["requeueAfter"] = None
        pods = [p for p in pods if restart_of(p) != restarts or p["metadata"].get("deletionTimestamp")] + gang
    elif gang and complete and not any(is_gated(p) for p in gang) and not cond.is_true(conds, cond.SCHEDULED):
        set_c(cond.SCHEDULED, True, "GangPlaced", "every rank has a node")

    if gang and len(gang) == n and all(phase(p) == "Running" for p in gang):
        if not st.get("startTime"):
            st["startTime"] = cond.rfc3339(now)
        set_c(cond.RUNNING, True, "AllRanksRunning", f"all {n} ranks are Running", "Normal")
        return finish("Running", released)
    return finish(cond.RESTARTING if old.get("phase") == cond.RESTARTING and not gang else cond.PENDING, released)
