"""The Reconciler: the one object that reconciles jobs and runs admission passes, and owns what they share.

Built once by :func:`railtrain.operator.main.run` and carried to every handler in
kopf's memo (:attr:`railtrain.operator.context.OperatorContext.reconciler`). What
it is given: the API edge (:class:`~railtrain.operator.kube.verbs.Kube`), the
frozen plan settings (:class:`~railtrain.operator.job.plansettings.PlanSettings`),
the watched namespace, a clock (a ``now()`` callable, as kueue's ``WithClock``:
tests pass a fixed one) and a bounded pool. What it owns:

* one lock per job, so the pod-event, job-event, resync and admission paths
  never act on the same job at once; a deleted job's lock is dropped (:meth:`forget`);
* the scheduling lock around a whole admission pass (read → decide → write),
  taken before any job lock and never while holding one, so two passes never
  count the same free GPUs. The pins themselves (nodeSelectors on unbound pods)
  are the ledger of promised capacity that the next pass subtracts, which keeps
  admission all-or-nothing across jobs and across operator restarts;
* the pass counter: a caller whose request predates the start of a pass that
  ran while it waited skips its own pass;
* the request coalescer (:mod:`railtrain.operator.coalescer`): an event's
  reconcile absorbed by one of the same job that waits to start;
* one bounded pool for concurrent API calls: a pass applies up to
  :data:`DECIDE_CONCURRENCY` jobs' decisions at once, and every plan's per-pod
  calls (and the API edge's creates, when it is given the same pool) run on it.

The decisions themselves are pure (:func:`railtrain.operator.job.planner.plan`,
:func:`railtrain.operator.job.admit.decide`); applying a plan is
:mod:`railtrain.operator.controller`'s.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from datetime import datetime, timezone
from itertools import groupby
from typing import Any, Callable

from railtrain.operator import controller, kueue, metrics
from railtrain.operator.coalescer import Coalescer
from railtrain.crds import contract
from railtrain.crds.labels import HOSTNAME
from railtrain.operator.job import admit, kueuestatus, ledger, planner, resize, spares, workload
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.kube.fence import NotLeader
from railtrain.operator.kube.pool import CREATE_CONCURRENCY
from railtrain.operator.kube.connection import describe
from railtrain.operator.kube.verbs import Kube
from railtrain.operator.scheduling.placement import GangRequest, Placement
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.queue import Decision

log = logging.getLogger("railtrain.operator")

DECIDE_CONCURRENCY = 4
"""Jobs whose admission decisions one pass applies at once (each a status write, then its pods' creates and Events).
100 jobs of 8 pods admitted by one pass were applied one after the other: per job a GET of the job and of its
Service, a status write, the creates and two Events, about 500 sequential round trips before the last job's pods
(docs/bench-operator.md)."""

POOL_WORKERS = DECIDE_CONCURRENCY + CREATE_CONCURRENCY
"""Threads of the one pool (:func:`call_pool`). A decision waits on its own per-pod calls in the same pool, so a pass
never runs more than :data:`DECIDE_CONCURRENCY` decisions at once (:func:`fan_out`), leaving
:data:`~railtrain.operator.kube.pool.CREATE_CONCURRENCY` threads to the calls: no thread ever waits for a pool that
has none left, and a gang's creates keep the concurrency they had."""


def wall_clock() -> datetime:
    """The current time, UTC (the clock a :class:`Reconciler` gets unless told otherwise)."""
    return datetime.now(timezone.utc)


def call_pool(workers: int = POOL_WORKERS) -> ThreadPoolExecutor:
    """The operator's one bounded pool for concurrent API calls (threads started as needed)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="railtrain-api")


def fan_out(calls: list[Callable[[], Any]], pool: Executor, at_once: int) -> None:
    """Run ``calls`` on ``pool``, at most ``at_once`` of them started and not finished at any time; wait for all.

    The bound is kept by the caller, which waits before it submits one more: a call that itself waits on
    ``pool`` (a decision and its per-pod calls) holds at most ``at_once`` of its threads.

    Raises:
        The first error in ``calls`` order, after every call has finished.
    """
    gate = threading.BoundedSemaphore(at_once)
    futures: list[Future] = []
    for call in calls:
        gate.acquire()
        future = pool.submit(call)
        future.add_done_callback(lambda _: gate.release())
        futures.append(future)
    first = next((e for e in (f.exception() for f in futures) if e is not None), None)
    if first is not None:
        raise first


def _union(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods of both reads, each once (by uid, else namespace/name; the later read's copy wins)."""
    def ident(p: dict[str, Any]) -> str:
        meta = p.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")

    return list({ident(p): p for p in [*first, *second]}.values())


class Reconciler:
    """Reconciles jobs and runs admission passes for one operator (thread-safe; see the module docstring).

    Args:
        kube: the API edge every read and write goes through.
        settings: the plan settings (topology levels, fabric profile, quarantine bound).
        namespace: the operator's ``--namespace``: passes admit only its jobs (capacity is still counted over
            every namespace); None: every namespace.
        clock: returns the current time (UTC); read once per reconcile and per pass.
        pool: the bounded pool for concurrent calls (whoever passes it owns it); None: one of its own
            (:func:`call_pool`).
    """

    def __init__(
        self, kube: Kube, settings: PlanSettings = PlanSettings(), namespace: str | None = None,
        clock: Callable[[], datetime] = wall_clock, pool: Executor | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.namespace = namespace
        self.now = clock
        self.pool = pool if pool is not None else call_pool()
        self.requests = Coalescer()
        """The event handlers' reconcile requests, coalesced per job."""
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._scheduling = threading.Lock()
        self._passes_started = 0
        self.kueue_unmade: dict[str, kueuestatus.KueueView] = {}
        """``namespace/name`` → why the job's Workload could not be created at its last reconcile (Kueue not installed
        or not answering, the Workload refused) or is being replaced (until it is gone), for the admission pass's
        WaitingForKueue sentence."""

    def _remember_unmade(self, key: str, view: kueuestatus.KueueView | None) -> None:
        """Keep (or forget) why ``key``'s Workload could not be created or is being replaced, as
        :func:`railtrain.operator.kueue.sync` said; a Workload still being deleted keeps the reason it was released for."""
        if view is not None and view.state == kueuestatus.MISSING and view.message:
            self.kueue_unmade[key] = view
        elif not (view is not None and view.deleting and self.kueue_unmade.get(key, kueuestatus.KueueView()).reason == kueuestatus.REPLACED):
            self.kueue_unmade.pop(key, None)

    def job_lock(self, namespace: str, name: str) -> threading.Lock:
        """The lock every path that writes this job's status holds (reconciles, admission decisions, progress writes)."""
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted job's lock (a reconcile still holding it keeps it until it finds the job gone)."""
        self.kueue_unmade.pop(f"{namespace}/{name}", None)
        with self._locks_guard:
            lock = self._locks.get((namespace, name))
            if lock is not None and not lock.locked():
                del self._locks[(namespace, name)]

    def locks(self) -> int:
        """How many job locks are kept (for tests: a deleted job's is dropped)."""
        with self._locks_guard:
            return len(self._locks)

    def reconcile_job(self, namespace: str, name: str, admit: bool = True, coalesce: bool = False) -> planner.Plan | None:
        """Bring one job one step closer to its desired state; run an admission pass if it waits for nodes.

        Args:
            namespace, name: the TrainingJob.
            admit: run an admission pass when the job waits (the resync runs one
                pass after reconciling every job instead).
            coalesce: an event's request (:attr:`requests`): when a reconcile of this
                job already waits for the job's lock, return at once and let it run.

        Returns:
            The applied plan, or None when the job no longer exists or the request was coalesced.

        Raises:
            railtrain.operator.kube.fence.NotLeader: this operator may no longer write.
            railtrain.operator.kube.errors.ApiError: the API server refused a call other than the tolerated 404/409
            (the handler logs one line; the next event or resync retries). A pod or Service refused
            as invalid (400/422, :class:`~railtrain.operator.kube.errors.Rejected`) is not raised:
            the job fails with reason PodRejected and a Warning Event.
        """
        started = time.monotonic()
        try:
            return self._reconcile(namespace, name, self.now(), admit, coalesce)
        except Exception as err:
            metrics.RECONCILE_ERRORS.labels(metrics.error_kind(err)).inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def _reconcile(self, namespace: str, name: str, at: datetime, admit: bool, coalesce: bool) -> planner.Plan | None:
        """:meth:`reconcile_job` at time ``at``, read once for the whole reconcile and its pass."""
        lock = self.job_lock(namespace, name)
        if coalesce:
            ran, done = self.requests.run((namespace, name), lock, lambda: self._reconcile_locked(namespace, name, at, admit))
            if not ran:
                return None
        else:
            with lock:
                done = self._reconcile_locked(namespace, name, at, admit)
        p, waits = done
        if waits and admit:
            self._pass(at)
        return p

    def _reconcile_locked(self, namespace: str, name: str, at: datetime, admit: bool) -> tuple[planner.Plan | None, bool]:
        """Read, plan and apply one job under its lock; returns the plan (None: the job is gone) and whether the job waits for admission.

        A new job (no status yet) that waits and whose plan only writes its first
        status is not applied when ``admit``: the admission pass that follows at
        once writes the job's first status itself (the placement with the Service
        and the pods, or the refusal), so a gang admitted on arrival costs one
        status write, not two, and no Service create before its pods
        (:func:`~railtrain.operator.controller.first_write_left_to_the_pass`). The
        job was just read into the operator's cache, so the pass lists it.
        """
        kube = self.kube
        job = kube.read_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None, False
        pods = controller.job_pods(kube, job)
        seen = planner.observe_job(job)  # its spec parsed and checked, its status read, once for the whole pass
        if kueue.default_queue(kube, job, seen, self.settings.kueue_queue):
            return None, False  # labelled for Kueue: the job's next event reconciles it as Kueue's
        if workload.managed_elsewhere(job):  # Kueue's MultiKueue runs it on a worker cluster: its Workload only, no pods, no status
            kueue.manager_side(kube, job, seen, self.settings.levels, at)
            return None, False
        nodes = kube.list_nodes() if controller.needs_nodes(seen, pods) else None
        grow_to = self._grow_to(seen, nodes, at) if nodes is not None else None
        kview = kueue.sync(kube, job, seen, self.settings.levels, pods, at)  # a Kueue job's Workload (None for railtrain's own queue)
        self._remember_unmade(f"{namespace}/{name}", kview)
        stop = kueuestatus.stop_for(kview, workload.queue_name(job) or "", seen, pods)  # Kueue evicted it: the gang stops whole
        p = planner.plan(seen, pods, kube.get_service(namespace, name), at, stop, nodes=nodes, grow_to=grow_to, settings=self.settings, lighthouse=controller.lighthouse_of(kube, job))
        kueue.dress(kube, job, p)
        waits = planner.gang_request(seen, pods, at) is not None
        if admit and waits and controller.first_write_left_to_the_pass(job, p):
            return p, True
        if not controller.apply_or_reject(kube, job, p, at, self.pool):
            return p, False
        return p, waits

    def _grow_to(self, seen: planner.Observed, nodes: list[dict[str, Any]], at: datetime) -> int | None:
        """How large the job's gang could be now (:func:`railtrain.operator.job.resize.grow_size`), read only when a grow
        is due: a Running elastic job below ``spec.nodes`` whose grow interval has passed (:func:`~railtrain.operator.job.resize.grow_due`);
        before that the planner would not grow whatever the answer. Then the queue, the promised pods and the holds are
        read as the pass reads them, without the pass's hold-back of jobs whose old pods linger. ``seen``: the job as
        observed in this pass (its spec is not parsed again; one the models refuse never grows)."""
        if not resize.wants_to_grow(seen) or seen.job is None:
            return None
        spec = seen.job.spec
        if not resize.grow_due(spec, seen.status, at):
            return None
        jobs, pods = self._listed()
        own = ledger.key(seen.obj)
        found = ledger.read([seen if ledger.key(j) == own else j for j in jobs], ledger.by_job(pods), at)  # its own entry as observed: its spec parsed once
        self._log_problems(found)
        queue = [request for _, _, request in found.waiting.values()]
        active = self.kube.list_active_pods() + found.promised
        return resize.grow_size(seen, nodes, active, self.settings.levels, queue, found.holds_for(spec.resources.gpu_resource_name))

    def admission_pass(self) -> list[Decision]:
        """Admit waiting gangs across all jobs in queue order, and apply the decisions of ready ones.

        Returns:
            Every decision of the pass (also those of jobs not ready to be released),
            or ``[]`` when a pass that started after this call was made already ran.
        """
        return self._pass(self.now())

    def _pass(self, at: datetime) -> list[Decision]:
        """:meth:`admission_pass` at time ``at``: one at a time (the scheduling lock), skipped when a later one ran."""
        seen = self._passes_started
        with self._scheduling:
            if self._passes_started > seen:
                return []
            self._passes_started += 1
            started = time.monotonic()
            try:
                return self._admit(at)
            finally:
                metrics.ADMISSION_PASS_SECONDS.observe(time.monotonic() - started)

    def _admit(self, at: datetime) -> list[Decision]:
        """The body of a pass, under the scheduling lock: read, decide (:mod:`railtrain.operator.job.admit`), write."""
        kube = self.kube
        # Pods before jobs: the operator writes a job's status (an admission record, a restart's hold) before it creates
        # or deletes that job's pods, so a job read after its pods is never older than what the pods show.
        active = kube.list_active_pods()
        jobs, pods = self._listed()
        # ... and the pods again after the jobs: a reconcile outside this lock (the ranks of an admission record a
        # crashed operator left uncreated) creates pods, then marks its record created; read between the two, the
        # record no longer promises the node and the first read does not show it taken. Both reads count.
        active = _union(active, kube.list_active_pods())
        queue = admit.read_queue(jobs, pods, active, at)
        self._log_problems(queue)
        metrics.observe_jobs(queue.observed.values())  # every job listed, its status read once for the queue and the count
        metrics.ADMISSION_QUEUE.set(len(queue.waiting))
        with_spares = any((j.get("spec") or {}).get("spares") for j in jobs) or any(spares.is_spare(p) for p in pods)
        if not queue.waiting and not with_spares:
            return []  # holds matter only to a job that is being placed
        nodes = kube.list_nodes()
        metrics.observe_nodes(nodes)
        if with_spares:  # before the queue: a running gang's spares are its capacity (a refill gets back what it had)
            try:
                active = [*active, *self._spares(jobs, pods, [*active, *queue.promised], nodes)]
            except NotLeader:
                raise
            except Exception as err:  # a spare's trouble never stops the queue; the next pass tries again
                log.warning("spares not kept this pass, retried next pass: %s", describe(err))
                active = kube.list_active_pods()  # what was created before the error counts
        if not queue.waiting:
            return []
        found = admit.decide(queue, active, nodes, self.settings, kueue.admissions(kube, [job for job, _, _ in queue.waiting.values()], self.kueue_unmade))
        self._write(found, at)
        return found.decisions

    def _spares(self, jobs: list[dict[str, Any]], pods: list[dict[str, Any]], taken: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pass's hot-spare work (:func:`railtrain.operator.job.spares.plan_spares`): delete stale spare pods and
        create the missing ones, bound to free nodes of the gang's domain; returns the spare pods created (the queue's
        ledger then counts them)."""
        create, delete, short = spares.plan_spares(jobs, pods, taken, nodes, self.settings.levels)
        down = spares.down_nodes(nodes)
        for pod in delete:  # one on a lost node goes at once: its kubelet will never confirm
            meta = pod["metadata"]
            if pod["spec"].get("nodeName") in down:
                self.kube.force_delete_pod(meta["namespace"], meta["name"])
            else:
                self.kube.delete_pod(meta["namespace"], meta["name"], meta.get("uid"))
        for line in short:
            log.info("spares: %s", line)
        made = []
        if create:
            for pod, ok in zip(create, self.kube.create_many(create)):
                if ok:
                    made.append(pod)
                    log.info("%s/%s spare: created %s on %s", pod["metadata"]["namespace"], pod["metadata"]["labels"][contract.LABEL_JOB_NAME], pod["metadata"]["name"], pod["spec"]["nodeSelector"].get(HOSTNAME))
        return made

    def _listed(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The jobs of the watched namespace and every railtrain pod (read first), less the namespaces being deleted
        (no pods can be created there)."""
        pods = self.kube.list_railtrain_pods()  # before the jobs (see _admit)
        gone = self.kube.terminating_namespaces()
        jobs = [j for j in self.kube.list_jobs(self.namespace) if j["metadata"].get("namespace") not in gone]
        return jobs, pods

    @staticmethod
    def _log_problems(found: ledger.Ledger) -> None:
        """One line per job the queue could not read (it never blocks the others' admission)."""
        for name, what, err in found.problems:
            log.warning("%s %s: %s", name, what, describe(err))

    def _write(self, found: admit.Admissions, at: datetime) -> None:
        """Write a pass's decisions: admissions first, then refusals (a wave of refusal writes never delays a placed
        gang); within each, up to :data:`DECIDE_CONCURRENCY` jobs at once, each under its own lock. The pass still
        holds the scheduling lock until every decision is written, so the next pass reads them all."""
        fenced: list[str] = []

        def apply(decision: Decision) -> None:
            job, _, request = found.queue.waiting[decision.job]
            if fenced:
                fenced.append(decision.job)
                return
            try:
                self._decide(job, request, decision.result, at)
            except NotLeader:  # this operator may no longer write: drop the rest of the pass (docs/operator.md, "Leader fencing")
                fenced.append(decision.job)
            except Exception as err:  # isolated: the next pass decides this job again
                log.warning("%s: admission not applied, retried next pass: %s", decision.job, describe(err))

        for _, group in groupby(found.writes, key=lambda d: isinstance(d.result, Refusal)):  # the two runs of apply_order
            fan_out([lambda d=d: apply(d) for d in group], self.pool, DECIDE_CONCURRENCY)
        if fenced:
            log.info("admission pass dropped: this operator no longer leads; %d decision(s) not written (%s)", len(fenced), ", ".join(sorted(fenced)[:5]))

    def _decide(self, seen: dict[str, Any], request: GangRequest, result: Placement | Refusal, now: datetime) -> None:
        """Apply one admission decision to a job, if its gang still asks what the pass answered."""
        kube = self.kube
        meta = seen["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        with self.job_lock(namespace, name):
            job = kube.get_job(namespace, name)
            if job is None or job["metadata"].get("deletionTimestamp"):
                return
            pods = controller.job_pods(kube, job)
            fresh = planner.observe_job(job)  # its spec parsed and checked once for both questions below
            if planner.gang_request(fresh, pods, now) != request:
                return  # changed since the pass listed it; the next pass decides again
            nodes = kube.list_nodes() if controller.needs_nodes(fresh, pods) else None
            p = planner.plan(fresh, pods, kube.get_service(namespace, name), now, result, nodes=nodes, settings=self.settings, lighthouse=controller.lighthouse_of(kube, job))
            kueue.dress(kube, job, p)
            if not controller.apply_or_reject(kube, job, p, now, self.pool):
                return
            for type_, reason, message in p.events:
                log.info("%s/%s %s: %s", namespace, name, reason, message)
