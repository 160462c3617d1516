"""In-place restarts the pods report, counted into the job's status (pure): the operator's half of crds/inplace.py.

A gang whose job has ``spec.runPolicy.restartInPlace`` restarts its processes
inside the running pods (the pod-side supervisor, :mod:`railtrain.crds.supervisor`)
and the operator never saw a pod fail. Trainer pods hold no API token, so the
operator learns of those restarts from what the pods expose: node rank 0's
coordinator (``GET /ledger``, read with the progress endpoint by
:mod:`railtrain.operator.progress`) while the gang runs, and the termination
message of every rank when it ends (:data:`railtrain.crds.inplace.LEDGER_KEY`).
Either way the report is a claim, checked (:meth:`railtrain.crds.inplace.Ledger.from_json`)
and counted once: :func:`count` adds only what ``status.inPlace`` does not hold
yet, into the same job-wide ``jobRestarts``/``infrastructureRestarts`` that
gang restarts spend, so the one budget bounds both paths, and ends the running
goodput attempt with the in-place cause.

May import: ``railtrain.crds`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from railtrain.crds import inplace, recovery, supervisor
from railtrain.crds.podtemplate import TRAINER
from railtrain.crds.times import format_micro_time, format_time
from railtrain.operator.job import attempts as goodput_attempts
from railtrain.operator.job.pods import restart_of

IN_PLACE_RESTART = "InPlaceRestart"
"""Event reason (Normal): the gang's processes restarted inside their pods, counted in the job's budget."""


def pod_ledger(pod: Mapping[str, Any]) -> inplace.Ledger | None:
    """The in-place ledger a gang pod's trainer container left in its termination message, or None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and cs.get("name") == TRAINER:
            return inplace.ledger_in_message(term.get("message"))
    return None


def gang_ledger(pods: list[Mapping[str, Any]], restarts: int) -> inplace.Ledger | None:
    """The newest ledger among the gang's pods of restart count ``restarts`` (the highest attempt), or None."""
    found = [g for p in pods if restart_of(p) == restarts and (g := pod_ledger(p)) is not None and g.restarts == restarts]
    return max(found, key=lambda g: g.attempt, default=None)


def count(status: Mapping[str, Any], ledger: inplace.Ledger, run_policy: Any, now: datetime, created: str | None = None) -> tuple[dict[str, Any], str] | None:
    """The status fields after counting ``ledger``'s in-place restarts not yet counted, and the Event's sentence.

    Args:
        status: the job's status (camelCase), with ``restarts`` (the current gang) and ``inPlace`` (counted so far).
        ledger: what the gang's pods report; a ledger of another gang than the current one is ignored.
        run_policy: the job's ``RunPolicy`` (for the bounds in the sentence).
        now: when it was read (the running goodput attempt ends then); created: the job's creationTimestamp (for goodput).

    Returns:
        ``(patch, sentence)``, or None when nothing is new.
    """
    if ledger.restarts != int(status.get("restarts", 0)):
        return None
    delta = inplace.uncounted(ledger, status.get("inPlace"))
    if delta.attempt <= 0:
        return None
    before = recovery.Counters.from_status(status)
    after = inplace.spend(before, delta)
    patch: dict[str, Any] = {
        "jobRestarts": after.job_restarts, "infrastructureRestarts": after.infrastructure_restarts,
        "inPlaceRestarts": int(status.get("inPlaceRestarts", 0)) + delta.attempt, "inPlace": inplace.counted_record(ledger),
    }  # fmt: skip
    if delta.left:  # nodes the gang left for a verdict (a spare took their ranks): avoided by this job from now on
        patch["avoidNodes"] = sorted(set(status.get("avoidNodes") or ()) | {e["node"] for e in delta.left})
    causes = ", ".join(f"{k} {n}" for k, n in sorted(delta.causes.items())) or "unknown"
    left = "; ".join(f"node {e['node']} left for a {e['verdict']} verdict ({e['reason']}), its rank given to a hot spare" for e in delta.left)
    sentence = (f"the gang restarted in place {delta.attempt} time(s) ({causes}), now at attempt {ledger.attempt}: no pod recreated; "
                f"{left + '; ' if left else ''}{recovery.counters_text(after, run_policy.backoff_limit, run_policy.max_infrastructure_restarts)}")  # fmt: skip
    attempts = _attempts_after(status, delta, now)
    recorded = goodput_attempts.goodput(status, attempts, created, now) if attempts is not None else None
    if recorded is not None:
        patch["goodput"] = recorded
    return patch, sentence


def to_quarantine(status: Mapping[str, Any], ledger: inplace.Ledger, now: datetime, tainted: frozenset[str], cluster_quarantines: int,
                  cluster_limit: int | None) -> tuple[list[tuple[str, str, str]], list[dict[str, Any]], list[str]]:  # fmt: skip
    """The nodes to quarantine among those ``ledger`` says the gang left for a verdict and ``status`` has not counted
    (call it with the status :func:`count` read, before writing its patch): the pods decided the node must go and gave
    its rank to a spare, but only the operator may taint a node, within the platform's bound as for a gang restart.

    Args:
        status: the job's status as read; ledger: what the gang's pods report; now: when it was read.
        tainted: nodes that carry the quarantine taint now; cluster_quarantines, cluster_limit: nodes quarantined in
            the cluster within the last hour and the platform's bound on them (None: none).

    Returns:
        ``(quarantine, records, sentences)``: ``(node, verdict, evidence)`` to taint; the ``status.quarantines``
        records to append; a sentence for each node due for quarantine that the platform's bound kept untainted
        (it is still avoided by this job).
    """
    if ledger.restarts != int(status.get("restarts", 0)):
        return [], [], []
    due = [e for e in inplace.uncounted(ledger, status.get("inPlace")).left if e["quarantine"] and e["node"] not in tainted]
    out: list[tuple[str, str, str]] = []
    records: list[dict[str, Any]] = []
    kept: list[str] = []
    for e in due:
        if cluster_limit is not None and cluster_quarantines + len(out) >= cluster_limit:
            kept.append(f"node {e['node']} was not quarantined: the platform's bound of {cluster_limit} quarantine(s) per hour is reached; this job avoids it")
            continue
        out.append((e["node"], e["verdict"], e["evidence"]))
        records.append({"node": e["node"], "verdict": e["verdict"], "time": format_time(now)})
    return out, records, kept


def _attempts_after(status: Mapping[str, Any], delta: inplace.Ledger, now: datetime) -> list[dict[str, Any]] | None:
    """status.goodput.attempts with the running attempt ended by the in-place restart (its cause: the verdict) and a new
    one started now; None when no attempt is running."""
    attempts = [dict(a) for a in (status.get("goodput") or {}).get("attempts") or []]
    if not attempts or attempts[-1].get("ended"):
        return None
    at = format_micro_time(now)
    verdict = next(iter(sorted(delta.causes)), "retryable")
    attempts[-1].update(ended=at, endReason="Restarting", inPlace=verdict)
    return [*attempts, {"released": at}]


@dataclass(frozen=True)
class Spent:
    """What a job has spent, as its gang's pods are told: the ``RAILTRAIN_RESTARTS_SPENT`` value (compact JSON of
    :meth:`railtrain.crds.recovery.Counters.spent`) and the fault-injection variables an earlier gang met
    (``status.spentFaults``), left out of the pods. Built once per gang by :func:`spent_of`."""

    value: str
    met: frozenset[str]


def spent_of(status: Any) -> Spent:
    """:class:`Spent` of ``status``: the job's status being written (camelCase dict) or a
    :class:`~railtrain.crds.api.TrainingJobStatus` (pure)."""
    fields = status if isinstance(status, Mapping) else status.to_api()
    return Spent(json.dumps(recovery.Counters.from_status(fields).spent(), separators=(",", ":")), frozenset(fields.get("spentFaults") or ()))


def with_spent(pod: dict[str, Any], status: Any) -> dict[str, Any]:
    """A rendered gang pod as the job's status has it now: its supervisor (if any) told what the job has spent of its
    restart budget, and the fault-injection variables an earlier gang met (``status.spentFaults``) left out.

    Args:
        pod: from :func:`railtrain.operator.job.render.render_pod` (changed in place and returned).
        status: a :class:`Spent` (:func:`spent_of`, once for a whole gang), or the job's status being written
            (camelCase dict) or a :class:`~railtrain.crds.api.TrainingJobStatus`.
    """
    spent = status if isinstance(status, Spent) else spent_of(status)
    for c in pod["spec"]["containers"]:
        if spent.met and c.get("env"):
            c["env"] = [e for e in c["env"] if e.get("name") not in spent.met]
        for e in c.get("env") or []:
            if e.get("name") == supervisor.ENV_SPENT:
                e["value"] = spent.value
    return pod
