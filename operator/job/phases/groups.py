"""Replica groups (``spec.faultTolerance``): the Lighthouse lives with the gang, and a failed group is replaced alone.

Two rows (docs/operator.md, "Replica groups"):

* ``lighthouse`` (any phase, house-keeping): the job's Lighthouse pod and Service
  (:mod:`railtrain.operator.job.lighthouse`) exist while the job is active, not
  suspended, and its gang is admitted or running; an ended Lighthouse pod is deleted
  and created again on the next pass; a finished or suspended job's is deleted.
* ``replica-group-failed`` (active, before ``node-lost``): in a job that has run
  (phase Running), a node of group g lost, or a rank of g that fails or vanishes,
  is decided with the group's own budget (:func:`railtrain.crds.inplace.decide_group_path`).
  Path ``group``: g's pods alone are deleted and created again on the same nodes
  (status.admission), the others untouched, the job stays Running (reason
  ``ReplicaGroupReplaced``); when a node must be left g is ``Relocating`` first:
  the admission pass places its ranks beside the other groups' kept nodes
  (:func:`railtrain.operator.job.request.relocation_request`) and the new nodes go
  into status.admission. Path ``group-lost``: g is given up while the others keep
  ``minReplicas``. Path ``gang``: the row steps aside and the rows below restart
  the whole gang as without replica groups. Path ``none``: the job fails (the
  decision's reason: a user error, a rule's Fail, ``QuorumLost``).

May import: ``railtrain.crds``, ``operator/scheduling`` and ``operator/job`` (this table is part of it); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from railtrain.crds import inplace, reasons, recovery
from railtrain.crds import replica_groups as rg
from railtrain.crds.api import AdmissionRecord
from railtrain.crds.times import format_micro_time, format_time, parse_time_or_none
from railtrain.operator.job import binding, render, workload
from railtrain.operator.job import conditions as cond
from railtrain.operator.job import inplace as job_inplace
from railtrain.operator.job.lighthouse import lighthouse_actions, owned
from railtrain.operator.job.pods import phase, rank_of
from railtrain.operator.job.records import admission_record
from railtrain.operator.job.phases import node_loss, success
from railtrain.operator.job.phases.restart import apply, claims, counters, log_line, restart_infrastructure
from railtrain.operator.job.phases.step import HEALTHY_POD_PHASES, Step
from railtrain.operator.job.phases.transition import ACTIVE, ALL_PHASES, Transition
from railtrain.operator.job.phases.vanished import vanished
from railtrain.operator.job.phases.verdict import rank_failure
from railtrain.operator.scheduling.placement import node_annotations
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.snapshot import pod_node


def _ft(step: Step) -> rg.FaultTolerance | None:
    return step.job.spec.fault_tolerance if step.job is not None else None


# --- the Lighthouse ---------------------------------------------------------------------------------------------


def lighthouse_wanted(step: Step) -> bool:
    """Whether the job's Lighthouse should run in this pass (pure): replica groups, active, not suspended, and a gang
    admitted, running or restarting (a job waiting for its first admission holds nothing, the Lighthouse included)."""
    if _ft(step) is None or step.old_phase in cond.TERMINAL_PHASES or step.job.spec.run_policy.suspend:
        return False
    return bool(step.gang) or step.old_phase in (cond.RUNNING, cond.RESTARTING) or admission_record(step.state) is not None


def _has_lighthouse_work(step: Step) -> bool:
    return step.lighthouse is not None and (_ft(step) is not None or step.lighthouse.pod is not None)


def _lighthouse(step: Step) -> None:
    create, delete = lighthouse_actions(step.job, step.meta, step.lighthouse, lighthouse_wanted(step))
    step.out.create_objects.extend(create)
    for name, uid in delete.items():
        step.out.uids[name] = uid
        step.out.delete_pods = sorted(set(step.out.delete_pods) | {name})
    pod = step.lighthouse.pod if step.lighthouse is not None else None
    if owned(pod, step.meta.get("uid", "")) and (why := node_loss.pod_node_lost(step, pod)):
        # its node is gone or NotReady past the job's grace: the pod would read Running (or Terminating) until
        # Kubernetes evicts it, minutes later, with every group stalled on the quorum meanwhile; force-deleted, it is
        # created again on the next pass, wherever kube-scheduler puts it (found on kind, stop 45)
        name = pod["metadata"]["name"]
        step.out.uids[name] = pod["metadata"].get("uid", "")
        step.out.force_delete_pods = sorted(set(step.out.force_delete_pods) | {name})
        step.out.delete_pods = [n for n in step.out.delete_pods if n != name]
        log_line(step, f"lighthouse lost: pod {name}'s node {why}; force-deleted, created again on the next pass")
    if any(o["kind"] == "Pod" for o in create) and step.lighthouse is not None and step.lighthouse.pod is None and step.old_phase == cond.RUNNING:
        log_line(step, f"lighthouse recreated: pod {rg.lighthouse_name(step.meta['name'])} was gone; quorum requests wait until it serves again")


# --- a failed group replaced alone -------------------------------------------------------------------------------


def group_records(step: Step) -> dict[int, rg.ReplicaGroupStatus]:
    """Each group's record of the current gang (``status.replicaGroups``): a record of an earlier gang (before a
    whole-gang restart) keeps its counts and starts Running again; a group without one starts Running."""
    ft = _ft(step)
    groups = ft.replica_groups if ft is not None else 0
    known = {r.group: r for r in step.state.replica_groups}
    out = {}
    for g in range(groups):
        r = known.get(g) or rg.ReplicaGroupStatus(group=g, gang=step.restarts)
        if r.gang != step.restarts:  # a whole-gang restart: every group starts again; an absence ends with it (goodput counts the restart as lost)
            r = r.model_copy(update={"phase": rg.GROUP_RUNNING, "gang": step.restarts, "replace_after": None} | returned(r, step.now))
        out[g] = r
    return out


def returned(rec: rg.ReplicaGroupStatus, now: datetime) -> dict[str, Any]:
    """The record's update when a group trains again at ``now`` (pure): its current absence (``absentSince``) is added
    to ``absentSeconds`` and closed; ``{}`` when it was not absent. status.goodput.degradedSeconds reads both (crds/goodput.py)."""
    since = parse_time_or_none(rec.absent_since)
    if since is None:
        return {}
    return {"absent_seconds": round(rec.absent_seconds + max(0.0, (now - since).total_seconds()), 3), "absent_since": None}


def _group_of(step: Step, rank: int) -> int:
    return rg.group_of(rank, step.n, _ft(step).replica_groups) if 0 <= rank < step.n else -1


@dataclass
class Trouble:
    """What happened to one group in this pass: its Failed pods, sentences of its vanished ranks, and its lost nodes (node → sentence)."""

    failed: list[dict[str, Any]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)


def troubled(step: Step, records: dict[int, rg.ReplicaGroupStatus]) -> dict[int, Trouble]:
    """Groups that need a decision now, by group.

    A node lost under a rank (deleted, or NotReady past the grace: :func:`railtrain.operator.job.phases.node_loss.pod_node_lost`)
    or a Failed pod count in a group that runs or is being replaced (a replacement that failed); a vanished rank only in
    a group that runs (a group being replaced or relocated is missing its pods on purpose). A lost group is never decided again,
    nor a pod made before its group's last replacement (:func:`railtrain.crds.replica_groups.replacement_of`).
    """
    out: dict[int, Trouble] = {}
    for p in step.gang:
        g = _group_of(step, rank_of(p))
        if g not in records or records[g].phase not in (rg.GROUP_RUNNING, rg.GROUP_REPLACING) or rank_of(p) in step.done:
            continue
        if rg.replacement_of(p) < records[g].replacements:
            continue  # a pod of an earlier replacement, decided on already, still seen before its deletion is (found on kind: counted twice)
        why = node_loss.pod_node_lost(step, p)
        if why:
            node = (p.get("spec") or {}).get("nodeName") or ""
            out.setdefault(g, Trouble()).lost[node] = f"node {node}: {why}; pod {p['metadata']['name']} (rank {rank_of(p)})"
        elif phase(p) == "Failed":
            out.setdefault(g, Trouble()).failed.append(p)
    for rank, what in vanished(step):
        g = _group_of(step, rank)
        if g in records and records[g].phase == rg.GROUP_RUNNING:
            out.setdefault(g, Trouble()).gone.append(what)
    return out


def _applies(step: Step) -> bool:
    """A job with replica groups that has run, whose gang's placement is in force: every pass refreshes the records;
    the row decides only when a group is not Running or is in trouble (the act returns None otherwise)."""
    if _ft(step) is None or step.old_phase != cond.RUNNING or step.job.spec.run_policy.restart_in_place:
        return False
    return step.released is not None and step.is_true(cond.SCHEDULED) and admission_record(step.state) is not None


def _members(step: Step, records: dict[int, rg.ReplicaGroupStatus]) -> dict[int, rg.ReplicaGroupStatus]:
    per = step.n // max(1, len(records))
    by_rank = {rank_of(p): p for p in step.gang if p["metadata"]["name"] not in step.out.delete_pods}
    out = {}
    for g, r in records.items():
        ranks = range(g * per, (g + 1) * per)
        members = [by_rank[k]["metadata"]["name"] for k in ranks if k in by_rank]
        nodes = [pod_node(by_rank[k]) or "" if k in by_rank else "" for k in ranks]
        out[g] = r.model_copy(update={"members": members, "nodes": nodes})
    return out


def _write(step: Step, records: dict[int, rg.ReplicaGroupStatus]) -> None:
    step.status["replicaGroups"] = [r.to_api() for _, r in sorted(_members(step, records).items())]


def _decide(step: Step, records: dict[int, rg.ReplicaGroupStatus], trouble: dict[int, Trouble]) -> list[inplace.GroupDecision]:
    """One decision per troubled group, in group order, each seeing the job-wide counters the ones before it left."""
    ft = _ft(step)
    c = counters(step)
    down = set(trouble) | {g for g, r in records.items() if r.phase in (rg.GROUP_REPLACING, rg.GROUP_RELOCATING)}
    lost = {g for g, r in records.items() if r.phase == rg.GROUP_LOST}
    ran = {rank_of(p): node for p in step.gang if (node := (p.get("spec") or {}).get("nodeName"))}
    existing = frozenset(step.nodes) if step.nodes is not None else None
    out = []
    for g in sorted(trouble):
        t, rec = trouble[g], records[g]
        evidence = None
        if t.lost:  # a node lost: an infrastructure restart of the group that leaves the node (as the gang's NodeLost)
            what, reason, node = "; ".join(v for _, v in sorted(t.lost.items())) + "; the group moves to other nodes", reasons.NODE_LOST, min(t.lost)
        else:
            what, reason, node = "; ".join(t.gone) + " while the other replica groups ran", reasons.RANK_VANISHED, ""
            if t.failed:
                evidence = recovery.GangFailure(tuple(rank_failure(p) for p in t.failed), {r: n for r, n in ran.items() if _group_of(step, r) == g}, existing)
        gd = inplace.decide_group_path(
            evidence, what, step.job.spec.run_policy, c, step.now, group=g, spent=(rec.job_restarts, rec.infrastructure_restarts),
            groups=ft.replica_groups, down=down, lost=lost, min_replicas=ft.min_replicas, reason=reason, node=node,
        )  # fmt: skip
        out.append(gd)
        if gd.path == inplace.PATH_GROUP_LOST:
            lost.add(g)
        c = gd.decision.counters
    return out


def _replace(step: Step, records: dict[int, rg.ReplicaGroupStatus], gd: inplace.GroupDecision) -> None:
    """Write one group's decision: its record, the job-wide facts (suspects, avoided nodes), its pods deleted, an Event."""
    d, g = gd.decision, gd.group
    step.status.update({k: v for k, v in d.status().items() if k not in ("jobRestarts", "infrastructureRestarts")})
    claims(step, d)  # quarantines and ignored claims, as for a gang restart
    per = step.n // len(records)
    step.delete([p for p in step.gang if g * per <= rank_of(p) < (g + 1) * per])
    rec = records[g]
    update: dict[str, Any] = {"job_restarts": gd.job_restarts, "infrastructure_restarts": gd.infrastructure_restarts, "reason": d.reason, "message": d.message}
    update["absent_since"] = rec.absent_since or format_micro_time(step.now)  # out of training from now until its pods run again
    update |= {"step": None, "quorum": None, "heals": 0, "retried_steps": 0, "progress_time": None}  # its new pods' metrics, when read
    if gd.path == inplace.PATH_GROUP:
        after = step.now + timedelta(seconds=d.backoff_seconds)
        update |= {"phase": rg.GROUP_RELOCATING if gd.elsewhere else rg.GROUP_REPLACING, "replacements": rec.replacements + 1,
                   "last_replacement_time": format_time(step.now), "replace_after": format_time(after) if d.backoff_seconds else None}  # fmt: skip
    else:
        update |= {"phase": rg.GROUP_LOST, "replace_after": None}
    records[g] = rec.model_copy(update=update)
    step.out.status_first = True  # the group's record before its pods start to leave: an operator that dies between them does not count it twice
    step.out.events.append(("Warning", d.reason, d.message))
    log_line(step, f"{gd.path} reason={d.reason} group={g}: {d.message}")


def _relocate(step: Step, records: dict[int, rg.ReplicaGroupStatus]) -> None:
    """Apply the admission pass's answer to the relocating groups (the pass placed the gang with every live rank kept,
    :func:`railtrain.operator.job.request.relocation_request`): a placement moves their ranks to its nodes in
    ``status.admission`` and makes them Replacing (their pods are then created there); a refusal is kept in their message."""
    moving = [g for g, r in records.items() if r.phase == rg.GROUP_RELOCATING]
    if not moving or step.placement is None:
        return
    if isinstance(step.placement, Refusal):
        for g in moving:
            records[g] = records[g].model_copy(update={"message": f"waiting to be placed again: {step.placement.message}"})
        return
    record = admission_record(step.state)
    placement = step.placement
    per = step.n // len(records)
    if record is None or len(placement.nodes) != len(record.nodes):
        return
    nodes = list(record.nodes)
    for g in moving:
        for k in range(g * per, (g + 1) * per):
            nodes[k] = placement.nodes[k]
        placed = ", ".join(nodes[g * per:(g + 1) * per])
        records[g] = records[g].model_copy(update={"phase": rg.GROUP_REPLACING, "message": f"placed again on {placed}", "last_replacement_time": format_time(step.now)})
        log_line(step, f"group {g} placed again on {placed}")
    step.status["admission"] = AdmissionRecord(restarts=record.restarts, nodes=nodes, created=True).to_api()
    step.out.status_first = True  # the new nodes are recorded before the pods pinned to them exist


def _recreate(step: Step, records: dict[int, rg.ReplicaGroupStatus]) -> str | None:
    """Create the missing pods of groups being replaced, pinned to their admitted nodes, once their old pods are gone and
    the group's backoff has passed; a group whose pods all run again is Running. Returns a restart's phase when a
    replacement did not run within ``runPolicy.gangTimeoutSeconds`` (the whole gang restarts then), else None."""
    record = admission_record(step.state)
    per = step.n // len(records)
    live = {rank_of(p): p for p in step.gang if p["metadata"]["name"] not in step.out.delete_pods}
    terminating = {rank_of(p) for p in step.pods if p["metadata"].get("deletionTimestamp") or p["metadata"]["name"] in step.out.delete_pods}
    ns, uid = step.meta.get("namespace", ""), step.meta.get("uid", "")
    timeout = step.job.spec.run_policy.gang_timeout_seconds
    for g, rec in records.items():
        since = parse_time_or_none(rec.last_replacement_time or "")
        if rec.phase == rg.GROUP_RELOCATING and since is not None and (step.now - since).total_seconds() > timeout:
            what = f"replica group {g} was not placed again within runPolicy.gangTimeoutSeconds ({timeout} s): {rec.message or ''}"
            return restart_infrastructure(step, reasons.INFRASTRUCTURE_RESTART, what)
        if rec.phase != rg.GROUP_REPLACING:
            continue
        ranks = range(g * per, (g + 1) * per)
        if all(k in live and phase(live[k]) in HEALTHY_POD_PHASES for k in ranks):
            records[g] = rec.model_copy(update={"phase": rg.GROUP_RUNNING, "replace_after": None} | returned(rec, step.now))
            log_line(step, f"group {g} replaced: its {per} pod(s) run again")
            continue
        if since is not None and (step.now - since).total_seconds() > timeout:
            what = f"replica group {g}'s replacement pods did not all run within runPolicy.gangTimeoutSeconds ({timeout} s)"
            return restart_infrastructure(step, reasons.INFRASTRUCTURE_RESTART, what)
        after = parse_time_or_none(rec.replace_after or "")
        if after is not None and step.now < after:
            continue
        for k in ranks:
            if k in live or k in terminating or k >= len(record.nodes):
                continue
            node = record.nodes[k]
            pod = job_inplace.with_spent(render.render_pod(step.job, ns, uid, k, step.restarts, step.fabric), step.status)
            annotations = {**render.gang_annotations(step.job.spec, len(record.nodes)), **node_annotations(step.fabric, (step.nodes or {}).get(node)),
                           rg.ANNOTATION_GROUP_REPLACEMENT: str(rec.replacements)}  # fmt: skip
            step.out.create_pods.append(binding.admitted_pod(pod, node, annotations))
    return None


def _act(step: Step) -> str | None:
    ft = _ft(step)
    records = group_records(step)
    trouble = troubled(step, records)
    if trouble:
        decisions = _decide(step, records, trouble)
        fatal = next((gd for gd in decisions if gd.path == inplace.PATH_NONE), None)
        if fatal is not None:  # a user error, a rule's Fail, QuorumLost: whatever the other groups do
            _write(step, records)
            step.stop(step.gang)
            return apply(step, fatal.decision)
        kueue = workload.queue_name(step.obj) is not None  # Kueue admits whole Workloads: a group is never placed again alone
        if any(gd.path == inplace.PATH_GANG or (gd.elsewhere and kueue) for gd in decisions):
            why = next(gd.why for gd in decisions if gd.path == inplace.PATH_GANG or gd.elsewhere)
            log_line(step, f"gang reason=ReplicaGroups: a replica group cannot be replaced alone ({why}); the whole gang restarts")
            _write(step, records)
            return None  # the rows below restart the whole gang, with the job-wide budget
        for gd in decisions:
            _replace(step, records, gd)
    _relocate(step, records)
    restarted = _recreate(step, records)
    _write(step, records)
    if restarted is not None:
        return restarted
    replacing = sorted(g for g, r in records.items() if r.phase in (rg.GROUP_REPLACING, rg.GROUP_RELOCATING))
    lost = sorted(g for g, r in records.items() if r.phase == rg.GROUP_LOST)
    if not replacing and not lost:
        return None  # every group runs: the rows below (success, healthy) decide as without replica groups
    per = step.n // len(records)
    kept = [k for g in range(ft.replica_groups) if g not in lost for k in range(g * per, (g + 1) * per)]
    if not replacing and kept and all(k in step.done for k in kept):
        return success._succeed(step)  # every rank of the groups kept exited 0
    training = [g for g in range(ft.replica_groups) if g not in replacing and g not in lost]
    words = lambda gs: ", ".join(str(g) for g in gs) or "none"  # noqa: E731
    if replacing:
        reason, message = reasons.REPLICA_GROUP_REPLACED, f"replica group(s) {words(replacing)} being replaced alone"
    else:
        reason, message = reasons.REPLICA_GROUP_LOST, f"replica group(s) {words(lost)} lost (restart budget spent)"
    message += f"; group(s) {words(training)} train on (minReplicas {ft.min_replicas})" + (f"; lost: {words(lost)}" if lost and replacing else "")
    step.set_condition(cond.RUNNING, True, reason, message)
    return cond.RUNNING


LIGHTHOUSE = Transition(
    "lighthouse", ALL_PHASES, _has_lighthouse_work, _lighthouse,
    "A job with spec.faultTolerance: its Lighthouse pod and Service (<job>-lighthouse) exist while the job is active, not suspended and its gang "
    "admitted or running; an ended Lighthouse pod is deleted and created again; a finished or suspended job's Lighthouse pod is deleted.",
)
REPLICA_GROUP_FAILED = Transition(
    "replica-group-failed", ACTIVE, _applies, _act,
    "A job with spec.faultTolerance that has run: a node of g lost, or a rank of g that fails or vanishes: decided with g's own budget "
    "(railtrain.crds.inplace.decide_group_path): g's pods alone are replaced on their nodes, or, when a node must be left, placed again by the "
    "admission pass beside the other groups' kept nodes (ReplicaGroupReplaced, the job stays Running); g is given up while the others keep "
    "minReplicas (ReplicaGroupLost); the job fails (QuorumLost, a user error); or, every group down, the rows below restart the whole gang.",
)

__all__ = ["LIGHTHOUSE", "REPLICA_GROUP_FAILED", "group_records", "lighthouse_wanted", "returned", "troubled"]
