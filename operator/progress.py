"""``status.progress`` from rank 0's own Prometheus endpoint: read (I/O, one GET), parse and rate-limit (pure).

Why this channel: local rank 0 of every trainer pod already serves
``railtrain_step``, ``railtrain_loss``, ``railtrain_tokens_per_second``,
``railtrain_step_seconds`` and ``railtrain_total_steps`` (trainer/metrics.py)
for Prometheus. The operator reading that endpoint keeps the trainer pods free
of API credentials (a pod that could write its job's status could write any
status the ServiceAccount reaches), and what it reads is evidence: numbers
put into a bounded, typed field, never an instruction. The operator needs
network access to pod IPs, as Prometheus does.

Bounded writes: a job's progress is read and written at most every
:func:`interval` seconds: :data:`MIN_SECONDS` for a few jobs, and for many jobs
slow enough that all of them together cost at most :data:`MAX_WRITES_PER_SECOND`
status writes (500 Running jobs: one write per job every 50 s).

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any, Callable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from railtrain.crds import contract, inplace, launcher, replica_groups, supervisor, times
from railtrain.crds.api import RunPolicy, TrainingJobStatus
from railtrain.crds.goodput import Progress
from railtrain.operator import metrics
from railtrain.operator.job import attempts, planner
from railtrain.operator.job import inplace as job_inplace
from railtrain.operator.job.observed import observe_job
from railtrain.operator.job.stored import read_status

log = logging.getLogger("railtrain.operator")

MIN_SECONDS = 5.0
"""Shortest time between two progress writes of one job."""
MAX_WRITES_PER_SECOND = 10.0
"""Most progress writes per second across all jobs."""
READ_TIMEOUT_SECONDS = 2.0
"""How long one read of rank 0's endpoint may take."""


def interval(running_jobs: int) -> float:
    """Seconds between two progress writes of one job when ``running_jobs`` jobs are Running (module docstring)."""
    return max(MIN_SECONDS, running_jobs / MAX_WRITES_PER_SECOND)


def due(status: TrainingJobStatus | Mapping[str, Any], now: datetime, running_jobs: int) -> bool:
    """Whether a Running job's progress should be read again at ``now`` (its status.progress.lastUpdateTime is old enough).

    ``status`` is read through the model (:func:`~railtrain.operator.job.stored.read_status` when given as stored).
    """
    s = read_status(status)
    if s.phase != "Running":
        return False
    last = s.progress.last_update_time if s.progress is not None else None
    return last is None or (now - last).total_seconds() >= interval(running_jobs)


def endpoint(pod: Mapping[str, Any]) -> str | None:
    """``http://IP:PORT/metrics`` of a rank pod (its container port named ``metrics``), or None before it has an IP."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    port = next((p.get("containerPort") for c in (pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or [] if p.get("name") == "metrics"), None)
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port or contract.DEFAULT_METRICS_PORT}/metrics"


def read(url: str, timeout: float = READ_TIMEOUT_SECONDS) -> str:
    """GET the Prometheus text at ``url``.

    Raises:
        OSError: no answer, refused, timed out or an HTTP error (``urllib.error.URLError`` is one).
    """
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read(1 << 20).decode("utf-8", errors="replace")


def samples(text: str) -> dict[str, float]:
    """The unlabelled samples of a Prometheus text exposition (``{}`` when it does not parse)."""
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.labels:
                    values[sample.name] = float(sample.value)
    except ValueError:
        return {}
    return values


def attempt_evidence(text: str) -> tuple[int | None, float | None]:
    """``(resumed step, checkpoint-blocked seconds)`` of rank 0's process, from its metrics text (None where absent)."""
    values = samples(text)
    resumed, blocked = values.get("railtrain_resumed_step"), values.get("railtrain_checkpoint_blocked_seconds_total")
    return (int(resumed) if resumed is not None and resumed == resumed and resumed >= 0 else None,
            blocked if blocked is not None and blocked == blocked and blocked >= 0 else None)  # fmt: skip


def first_step_seen(values: Mapping[str, float]) -> int | None:
    """``railtrain_step`` of a rank's samples (:func:`samples`) once it finished a step (≥ 1, finite), else None."""
    step = values.get("railtrain_step")
    return int(step) if step is not None and step == step and 1 <= step < float("inf") else None


def parse(text: str, now: datetime) -> dict[str, Any] | None:
    """status.progress (camelCase dict) from rank 0's metrics text, or None before its first step.

    ETA = (total steps − step) × the last step's seconds; absent without a total.
    Values that are not finite or are negative are left out (a trainer's claim, checked
    against the API's bounds by :class:`~railtrain.crds.goodput.Progress`).
    """
    values = samples(text)
    step = first_step_seen(values)
    if step is None:
        return None

    def ok(name: str) -> float | None:
        v = values.get(name)
        return v if v is not None and v == v and abs(v) != float("inf") and v >= 0 else None

    total, seconds = ok("railtrain_total_steps"), ok("railtrain_step_seconds")
    eta = max(0.0, (total - step) * seconds) if total and seconds is not None else None
    loss = values.get("railtrain_loss")
    p = Progress(
        step=int(step), total_steps=int(total) if total else None, loss=round(loss, 6) if loss is not None and loss == loss and abs(loss) != float("inf") else None,
        tokens_per_second=round(ok("railtrain_tokens_per_second"), 1) if ok("railtrain_tokens_per_second") is not None else None,
        eta_seconds=round(eta, 1) if eta is not None else None, last_update_time=now,
    )  # fmt: skip
    return p.to_api()


def rank_zero_pods(job: Mapping[str, Any]) -> list[tuple[int | None, str]]:
    """The pods whose metrics give a job's progress: ``[(None, <job>-0)]``, or with ``spec.faultTolerance`` each replica
    group's node-rank-0 pod, ``[(group, pod name), …]`` in group order (every group is a torchrun world with a rank 0 of
    its own, and any of them may be the one away)."""
    name, spec = job["metadata"]["name"], job.get("spec") or {}
    ft = spec.get("faultTolerance") or {}
    try:
        layouts = replica_groups.layout(int(spec.get("nodes") or 0), int(spec.get("procsPerNode") or 1), int(ft.get("replicaGroups") or 0)) if ft else []
    except (TypeError, ValueError):  # a spec the API refuses: read rank 0 as without groups
        layouts = []
    if not layouts:
        return [(None, contract.pod_name(name, 0))]
    return [(g.group, contract.pod_name(name, g.first_node)) for g in layouts]


def group_progress(text: str, now: datetime) -> dict[str, Any] | None:
    """One replica group's fields of ``status.replicaGroups[]`` (camelCase: ``step``, ``quorum``, ``heals``,
    ``retriedSteps``, ``progressTime``) from its rank 0's metrics text, or None before its first step."""
    values = samples(text)
    step = first_step_seen(values)
    if step is None:
        return None

    def count(name: str) -> int:
        v = values.get(name)
        return int(v) if v is not None and v == v and 0 <= v < float("inf") else 0

    return {"step": step, "quorum": count("railtrain_replica_group_quorum"), "heals": count("railtrain_replica_group_heals"),
            "retriedSteps": count("railtrain_replica_group_retried_steps"), "progressTime": times.format_time(now)}  # fmt: skip


def with_group_progress(stored_groups: Any, found: Mapping[int, Mapping[str, Any]]) -> list[Any] | None:
    """``status.replicaGroups`` as stored with each read group's progress fields replaced (:func:`group_progress`), or
    None when nothing changes (no record yet, or no group read). Records the operator has not written are not made."""
    if not isinstance(stored_groups, list) or not found:
        return None
    out, changed = [], False
    for record in stored_groups:
        g = record.get("group") if isinstance(record, dict) else None
        if isinstance(g, int) and g in found:
            record = {**record, **found[g]}
            changed = True
        out.append(record)
    return out if changed else None


class Reader:
    """Reads Running jobs' rank-0 endpoints in the background and writes status.progress (the I/O half).

    :meth:`poll` is called once per resync pass by the leader and never waits
    for a read: at most ``workers`` reads run at once, one per job, and a job
    whose read failed is tried again only after :func:`interval`. The write is
    a merge patch of ``status.progress`` alone, made under the job's lock after
    reading the job again, so it never races a reconcile's status write.

    Args:
        workers: concurrent reads.
        fetch: ``fetch(url)`` → metrics text (tests pass a fake; default :func:`read`).
        quarantine_limit: the platform's bound on nodes quarantined per hour in the cluster (``--max-quarantines-per-hour``;
            None: none), for nodes a gang left for a verdict while a hot spare took their ranks.
    """

    def __init__(self, workers: int = 4, fetch: Callable[[str], str] = read, quarantine_limit: int | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="railtrain-progress")
        self._fetch = fetch
        self._quarantine_limit = quarantine_limit
        self._busy: set[tuple[str, str]] = set()
        self._tried: dict[tuple[str, str], datetime] = {}
        self._guard = threading.Lock()

    def poll(self, kube: Any, jobs: list[dict[str, Any]], now: datetime, lock_for: Callable[[str, str], Any]) -> list[Future]:
        """Start a read for every Running job that is due (:func:`due`) and not being read; returns the started reads."""
        running = [seen for seen in map(observe_job, jobs) if seen.status.phase == "Running"]
        started = []
        with self._guard:
            for seen in running:
                meta = seen.meta
                key = (meta["namespace"], meta["name"])
                tried = self._tried.get(key)
                if key in self._busy or not due(seen.status, now, len(running)):
                    continue
                if tried is not None and (now - tried).total_seconds() < interval(len(running)):
                    continue
                self._busy.add(key)
                self._tried[key] = now
                started.append(self._pool.submit(self._one, kube, key, rank_zero_pods(seen.obj), now, lock_for, seen.obj))
            self._tried = {k: v for k, v in self._tried.items() if k in {(s.meta["namespace"], s.meta["name"]) for s in running}}
        return started

    def _text(self, kube: Any, key: tuple[str, str], pod_name: str) -> tuple[dict[str, Any] | None, str]:
        """``(pod, metrics text)`` of one rank-0 pod (``""``: no IP yet, or no answer)."""
        pod = kube.get_pod(key[0], pod_name)
        url = endpoint(pod) if pod else None
        if url is None:
            return pod, ""
        try:
            return pod, self._fetch(url)
        except OSError as err:
            log.debug("%s/%s: no progress from %s: %s", *key, url, err)
            return pod, ""

    def _one(self, kube: Any, key: tuple[str, str], targets: list[tuple[int | None, str]], now: datetime, lock_for: Callable[[str, str], Any],
             job: Mapping[str, Any] | None = None) -> bool:  # fmt: skip
        namespace, name = key
        try:
            read = [(group, *self._text(kube, key, pod_name)) for group, pod_name in targets]
            gang = self._spared_gang(kube, job, read)
            if gang and read[0][1] is None and (holder := gang[0])["metadata"]["name"] != targets[0][1]:  # a spare took node rank 0
                read[0] = (read[0][0], *self._text(kube, key, holder["metadata"]["name"]))
            first = next((pod for _, pod, _ in read if pod is not None and endpoint(pod) is not None), None)
            if first is None:
                return False
            ledger, holders = self._ledger(first, key)
            for other in gang if ledger is None else ():  # node rank 0's supervisor silent: any other serves its copy
                if other["metadata"]["name"] != first["metadata"]["name"] and (found_ledger := self._ledger(other, key))[0] is not None:
                    ledger, holders = found_ledger
                    break
            groups = {g: p for g, _, text in read if g is not None and (p := group_progress(text, now)) is not None}
            # the job's progress: the rank 0 furthest ahead (with replica groups, the quorum's step; any group may be away)
            text, found = max(((t, parse(t, now)) for _, _, t in read), key=lambda tf: (tf[1] or {}).get("step", 0))
            if found is None and ledger is None:
                return False
            with lock_for(namespace, name):
                job = kube.get_job(namespace, name)
                if job is None or observe_job(job).status.phase != "Running":
                    return False
                if holders:
                    self._take_over(kube, job, holders)
                stored = job.get("status") or {}  # as stored: the goodput patch extends its attempts
                taint, kept = self._left_nodes(kube, stored, ledger, now)
                patch, counted = self._in_place(job, stored, ledger, now)
                if taint:
                    patch["quarantines"] = [*(stored.get("quarantines") or ()), *(r for _, r in taint)]
                stored = {**stored, **patch}
                recorded = attempts.with_progress(stored, found, *attempt_evidence(text), job["metadata"].get("creationTimestamp"), now) if found else None
                patch |= {"progress": found} if found else {}
                if (replica_records := with_group_progress(stored.get("replicaGroups"), groups)) is not None:
                    patch["replicaGroups"] = replica_records
                if recorded is not None:
                    patch["goodput"] = recorded
                if not patch:
                    return False
                patch = planner.partial_status_patch(job.get("status") or {}, patch)  # each field whole: its dropped keys go as null
                written = bool(kube.patch_status(namespace, name, patch, resource_version=job["metadata"].get("resourceVersion")))  # 409: changed since read, next interval
                if written and counted:
                    log.info("%s/%s in-place reason=%s: %s", namespace, name, job_inplace.IN_PLACE_RESTART, counted)
                    kube.emit_event(job, "Normal", job_inplace.IN_PLACE_RESTART, counted)
                if written:
                    self._quarantine(kube, job, taint, kept, now)
            if written and recorded is not None:
                metrics.observe_goodput(namespace, name, recorded)
            return written
        except Exception as err:  # one job's trouble never stops the others' reads; the next interval retries
            log.info("%s/%s: progress not recorded: %s", namespace, name, err)
            return False
        finally:
            with self._guard:
                self._busy.discard(key)

    @staticmethod
    def _spared_gang(kube: Any, job: Mapping[str, Any] | None, read: list[tuple[int | None, Any, str]]) -> list[dict[str, Any]]:
        """A job with hot spares whose node rank 0 did not answer (its pod gone, or its metrics silent): the current
        gang's rank pods in rank order (:func:`railtrain.operator.job.spares.by_rank`), else ``[]`` (nothing listed)."""
        if job is None or not int((job.get("spec") or {}).get("spares") or 0) or len(read) != 1 or read[0][2]:
            return []
        from railtrain.operator import controller
        from railtrain.operator.job import spares

        return spares.by_rank(job, controller.job_pods(kube, dict(job)))

    def _ledger(self, pod: Mapping[str, Any], key: tuple[str, str]) -> tuple[inplace.Ledger | None, dict[int, str]]:
        """The in-place ledger ``pod``'s supervisor serves (a job with runPolicy.restartInPlace: the coordinator's, or
        a supervisor's copy of it), or None, and its ``holders`` (node rank → the hot spare pod the coordinator gave
        it; checked: ranks and names only)."""
        url = ledger_endpoint(pod)
        if url is None:
            return None, {}
        try:
            body = json.loads(self._fetch(url))
            raw = body.get("holders") or {}
            holders = {int(r): s for r, s in raw.items() if str(r).isdigit() and isinstance(s, str) and 0 < len(s) <= 253} if isinstance(raw, dict) else {}
            return inplace.Ledger.from_json(body.get("ledger")), holders
        except (OSError, ValueError, AttributeError) as err:
            log.debug("%s/%s: no in-place ledger from %s: %s", *key, url, err)
            return None, {}

    @staticmethod
    def _take_over(kube: Any, job: Mapping[str, Any], holders: Mapping[int, str]) -> None:
        """Make the pods say what the coordinator decided (:func:`railtrain.operator.job.spares.takeover`): each
        spare that took a rank is labelled with it, then the rank's old pod is deleted at once (its node is lost)."""
        from railtrain.operator import controller
        from railtrain.operator.job import spares

        meta = job["metadata"]
        pods = controller.job_pods(kube, dict(job))
        relabel, delete, sentences = spares.takeover(job, pods, holders)
        uids = {p["metadata"]["name"]: p["metadata"].get("uid") for p in pods}
        for name, labels in relabel.items():
            kube.label_pod(meta["namespace"], name, labels, uids.get(name))
        for name in delete:
            kube.force_delete_pod(meta["namespace"], name)
        for sentence in sentences:
            log.info("%s/%s spare reason=%s: %s", meta["namespace"], meta["name"], spares.SPARE_TAKEOVER, sentence)
            kube.emit_event(job, "Normal", spares.SPARE_TAKEOVER, sentence)

    def _left_nodes(self, kube: Any, stored: Mapping[str, Any], ledger: inplace.Ledger | None, now: datetime) -> tuple[list[tuple[tuple[str, str, str], dict[str, Any]]], list[str]]:
        """The nodes the gang left for a verdict (a hot spare took their ranks) that are due for quarantine now
        (:func:`railtrain.operator.job.inplace.to_quarantine`, with the Nodes read for the platform's bound): each
        ``((node, verdict, evidence), status.quarantines record)``, and the sentences of those the bound kept."""
        if ledger is None or not inplace.uncounted(ledger, stored.get("inPlace")).left:
            return [], []
        from railtrain.operator.scheduling import quarantine

        nodes = kube.list_nodes()
        tainted = frozenset(n["metadata"]["name"] for n in nodes if quarantine.quarantined_by(n) is not None)
        taint, records, kept = job_inplace.to_quarantine(stored, ledger, now, tainted, quarantine.recent_quarantines(nodes, now), self._quarantine_limit)
        return list(zip(taint, records)), kept

    @staticmethod
    def _quarantine(kube: Any, job: Mapping[str, Any], taint: list[tuple[tuple[str, str, str], dict[str, Any]]], kept: list[str], now: datetime) -> None:
        """Taint the nodes :meth:`_left_nodes` found due (the status that records them is written), with the Events a
        gang restart's quarantine has; a Warning for each node the platform's bound kept untainted."""
        from railtrain.crds import reasons
        from railtrain.operator import controller
        from railtrain.operator.scheduling import quarantine

        meta = job["metadata"]
        for (node, verdict, evidence), _ in taint:
            text = quarantine.quarantined_sentence(node, verdict, evidence, spare=True)
            log.info("%s/%s quarantine reason=%s: %s", meta["namespace"], meta["name"], reasons.NODE_QUARANTINED, text)
            kube.emit_event(job, "Warning", reasons.NODE_QUARANTINED, text)
            controller.quarantine_node(kube, dict(job), node, verdict, evidence, now)
        for text in kept:
            log.info("%s/%s quarantine reason=%s: %s", meta["namespace"], meta["name"], reasons.NODE_QUARANTINED, text)
            kube.emit_event(job, "Warning", reasons.NODE_QUARANTINED, text)

    @staticmethod
    def _in_place(job: Mapping[str, Any], stored: Mapping[str, Any], ledger: inplace.Ledger | None, now: datetime) -> tuple[dict[str, Any], str]:
        """The status patch that counts ``ledger``'s new in-place restarts (:func:`railtrain.operator.job.inplace.count`) and its Event's sentence."""
        if ledger is None:
            return {}, ""
        policy = RunPolicy.model_validate((job.get("spec") or {}).get("runPolicy") or {})
        counted = job_inplace.count(stored, ledger, policy, now, job["metadata"].get("creationTimestamp"))
        return (dict(counted[0]), counted[1]) if counted else ({}, "")


def ledger_endpoint(pod: Mapping[str, Any]) -> str | None:
    """``http://IP:PORT/ledger`` of node rank 0's supervisor (crds/supervisor.py), or None for a pod not supervised or without an IP."""
    ip = (pod.get("status") or {}).get("podIP")
    containers = (pod.get("spec") or {}).get("containers") or []
    if not ip or not any(tuple(c.get("command") or ())[: len(launcher.SUPERVISOR)] == launcher.SUPERVISOR for c in containers):
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{supervisor.DEFAULT_SUPERVISOR_PORT}/ledger"
