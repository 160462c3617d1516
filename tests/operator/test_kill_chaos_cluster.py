"""The operator SIGKILLed at seeded random moments while gangs of mixed sizes are admitted and started (issue 16,
"Operator restarts"), on the real control plane with KWOK nodes.

Two sizes (:data:`SCALES`): the suite runs ``smoke``, 8 kills while 8 gangs ask 104 GPUs of 32 (~40 s); ``full``,
20 kills while 20 gangs ask 300 GPUs of 80 (~2 min on 2 cores), is a scenario-sized run kept as a benchmark:
``python bench/kill_chaos.py`` runs this module with ``$RAILTRAIN_CHAOS_SCALE=full`` and records the outcome.
The checks are the same at both sizes.

One job is submitted per operator lifetime, so the kills land in admission passes, pod writes and status writes;
from lifetime ``first_end`` on (the twelfth of 20, the fifth of 8), every other lifetime also ends the pods of one
Running job (exit 0), so capacity frees and waiting gangs are admitted while the kills go on. Half the restarts
(seeded) are a fresh process started after the kill, as a one-replica Deployment restarts its container; the other
half a standby started earlier that takes the Lease over, as with two replicas.

A watch on the namespace's pods stays open across the whole test and every event is checked at once: no node is
ever promised (pinned by nodeSelector or bound) more GPUs than it has, no rank of a job has two live pods, no pod
has a rank beyond its gang or no TrainingJob of the test. At the end every job still exists, every pod belongs to
a job that exists, the ended jobs Succeeded, and every waiting job that fits what the Running jobs leave (a greedy
check: enough nodes with enough free GPUs) is Running: a restart may delay admission, never lose it.

``$RAILTRAIN_CHAOS_SEED`` (the seed used is printed) fixes the kill moments, the restart kinds and which jobs end;
the control plane's own timing still varies from run to run. ``$RAILTRAIN_CHAOS_SCALE`` picks the size.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch

from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import contract
from tests.polling import wait_for

from .clusterkit import G, P, V, finish, job_body

pytestmark = pytest.mark.cluster

SEED_ENV = "RAILTRAIN_CHAOS_SEED"
SCALE_ENV = "RAILTRAIN_CHAOS_SCALE"
DEFAULT_SEED = 16


@dataclass(frozen=True)
class Scale:
    """One size of the scenario.

    Attributes:
        nodes, gpus_per_node: the KWOK nodes made for it.
        sizes: (nodes, GPUs per pod) of the jobs, submitted in this order, one per operator lifetime (so as many kills).
        first_end, end_every: from lifetime ``first_end`` on (0-based), every ``end_every``-th lifetime ends one Running
            job (its pods exit 0).
    """

    nodes: int
    gpus_per_node: int
    sizes: tuple[tuple[int, int], ...]
    first_end: int
    end_every: int = 2


SCALES = {
    # 300 GPUs asked of 80, so the first ~10 fit as they come and the rest wait for capacity the ended jobs free.
    "full": Scale(10, 8, ((1, 8), (2, 4), (3, 8), (1, 4), (2, 8), (1, 8), (4, 8), (1, 4), (2, 4), (3, 8),
                          (1, 8), (6, 8), (2, 8), (1, 4), (2, 8), (3, 4), (1, 8), (2, 8), (1, 4), (4, 8)), first_end=11),  # fmt: skip
    # The full size's first 8 jobs: 104 GPUs asked of 32. job-00 and job-01 fit as they come, job-02 (3 x 8) waits with
    # one node left whole, job-03 fits beside them; from the fifth lifetime on, ended jobs free what the waiting ones take.
    "smoke": Scale(4, 8, ((1, 8), (2, 4), (3, 8), (1, 4), (2, 8), (1, 8), (4, 8), (1, 4)), first_end=4),
}
SCALE = SCALES[os.environ.get(SCALE_ENV, "smoke")]
KILLS = len(SCALE.sizes)
NODES, GPUS_PER_NODE = SCALE.nodes, SCALE.gpus_per_node
SIZES = list(SCALE.sizes)
FIRST_END, END_EVERY = SCALE.first_end, SCALE.end_every
MAX_DELAY = 2.0
"""A timed kill comes within this many seconds after the lifetime's job was submitted: ``MAX_DELAY * u**2`` for a
uniform ``u``, so half of them land within 0.5 s, mostly in the new leader's start-up."""
TRIGGERED, AFTER_WRITE, WRITE_WAIT = 0.5, 0.2, 5.0
"""Half the kills (seeded) instead wait until the watch sees the lifetime's job's first pod (at most 5 s: a job that
does not fit has none) and come within 0.2 s after it, while the rest of the gang is being written."""
LEADING = "leading: this operator"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def gpus_of(pod: dict[str, Any]) -> int:
    """The pod's GPU request (requests, else limits, summed over its containers)."""
    total = 0
    for c in pod["spec"].get("containers", []):
        res = c.get("resources") or {}
        total += int((res.get("requests") or {}).get(GPU) or (res.get("limits") or {}).get(GPU) or 0)
    return total


def node_of(pod: dict[str, Any]) -> str | None:
    """The node the pod holds capacity on: bound (nodeName) or pinned (hostname nodeSelector)."""
    return pod["spec"].get("nodeName") or (pod["spec"].get("nodeSelector") or {}).get(HOSTNAME)


def holds(pod: dict[str, Any]) -> bool:
    return node_of(pod) is not None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class PodWatch:
    """A watch on one namespace's pods, run in a thread; every event's resulting state is checked (see the module docstring).

    Args:
        core: CoreV1Api.
        namespace: the namespace watched.
        capacity: node name -> GPUs; a pod held on any other node is a violation.
        gang: job name -> its gang size (nodes).
    """

    def __init__(self, core, namespace: str, capacity: dict[str, int], gang: dict[str, int]):
        self.core, self.namespace, self.capacity, self.gang = core, namespace, capacity, gang
        self.pods: dict[str, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.events = 0
        self.kinds: Counter[str] = Counter()
        self.seen: set[str] = set()
        self.peak: Counter[str] = Counter()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> None:
        resp = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        listing = json.loads(resp.data)
        for pod in listing["items"]:
            self._apply("ADDED", pod)
        self._rv = listing["metadata"]["resourceVersion"]
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def view(self) -> dict[str, str]:
        """Pod name -> resourceVersion as the watch has seen them (compared with a LIST: the watch missed nothing)."""
        with self._lock:
            return {name: p["metadata"]["resourceVersion"] for name, p in self.pods.items()}

    def partial(self) -> list[str]:
        """Jobs whose gang is half-written now: some ranks without a live pod, or some pods pinned and others not."""
        with self._lock:
            gangs: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
            for p in self.pods.values():
                if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    gangs[(p["metadata"].get("labels") or {}).get(contract.LABEL_JOB_NAME)].append(p)
            return sorted(j for j, g in gangs.items() if j in self.gang and (len(g) < self.gang[j] or len({node_of(p) is None for p in g}) > 1))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                w = watch.Watch()  # a short watch, resumed from the last resourceVersion: no event is skipped
                for ev in w.stream(self.core.list_namespaced_pod, self.namespace, resource_version=self._rv, timeout_seconds=2, deserialize=False):
                    self._rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(ev["type"], ev["object"])
        except BaseException as err:  # reported by the test: a watch that stopped early checked nothing after
            self.error = err

    def _apply(self, kind: str, pod: dict[str, Any]) -> None:
        with self._lock:
            self.events += 1
            self.kinds[kind] += 1
            name = pod["metadata"]["name"]
            self.seen.add((pod["metadata"].get("labels") or {}).get(contract.LABEL_JOB_NAME))
            if kind == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = pod
            self._check(f"event {self.events} ({kind} {name}, resourceVersion {pod['metadata']['resourceVersion']})")

    def _check(self, when: str) -> None:
        held: defaultdict[str, list[str]] = defaultdict(list)
        ranks: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        for name, p in self.pods.items():
            if holds(p):
                held[node_of(p)].append(name)
            labels = p["metadata"].get("labels") or {}
            job, rank = labels.get(contract.LABEL_JOB_NAME), labels.get(contract.LABEL_NODE_RANK)
            owners = [o for o in p["metadata"].get("ownerReferences") or [] if o.get("kind") == "TrainingJob" and o.get("controller")]
            if job not in self.gang or not owners or owners[0]["name"] != job:
                self._violate(f"{when}: pod {name} has no TrainingJob of this test (job label {job!r}, owners {owners})")
                continue
            if rank is None or not rank.isdigit() or int(rank) >= self.gang[job]:
                self._violate(f"{when}: pod {name} has rank {rank!r} outside job {job}'s gang of {self.gang[job]}")
            if not p["metadata"].get("deletionTimestamp"):
                ranks[(job, rank)].append(name)
        for node, names in held.items():
            used = sum(gpus_of(self.pods[n]) for n in names)
            self.peak[node] = max(self.peak[node], used)
            if used > self.capacity.get(node, 0):
                self._violate(f"{when}: node {node} holds {used} GPUs of {self.capacity.get(node, 0)}: "
                              + ", ".join(f"{n} ({gpus_of(self.pods[n])}, {'bound' if self.pods[n]['spec'].get('nodeName') else 'pinned'})" for n in sorted(names)))  # fmt: skip
        for (job, rank), names in ranks.items():
            if len(names) > 1:
                self._violate(f"{when}: job {job} rank {rank} has {len(names)} live pods: {sorted(names)}")

    def _violate(self, text: str) -> None:
        if text not in self.violations and len(self.violations) < 50:
            self.violations.append(text)


def fitting_waiters(jobs: dict[str, tuple[int, int]], phases: dict[str, str], pods: list[dict[str, Any]], capacity: dict[str, int]) -> list[str]:
    """Jobs neither Running nor Succeeded that fit what the held pods leave: ``nodes`` distinct nodes each with ``gpus`` free.

    Greedy in queue order (the jobs' names are in submission order); a job that fits is reserved before the next
    is tried, so the answer names the jobs an admission pass over this state would have to admit.
    """
    free = dict(capacity)
    for p in pods:
        if holds(p) and node_of(p) in free:
            free[node_of(p)] -= gpus_of(p)
    out = []
    for name, (nodes, gpus) in sorted(jobs.items()):
        if phases.get(name) in ("Running", "Succeeded"):
            continue
        fits = sorted((n for n, f in free.items() if f >= gpus), key=lambda n: (free[n], n))[:nodes]
        if len(fits) == nodes:
            for n in fits:
                free[n] -= gpus
            out.append(f"{name} ({nodes}x{gpus} GPUs, phase {phases.get(name)}) fits on {fits}")
    return out


def test_sigkills_while_gangs_are_admitted_lose_nothing_and_double_book_nothing(
    cluster, api, namespace, gpu_nodes, operator_process, submit, tmp_path
):
    seed = int(os.environ.get(SEED_ENV, DEFAULT_SEED))
    print(f"{SEED_ENV}={seed} (set it to reproduce)")
    rng = random.Random(seed)
    operator_process.stop()  # the session's cluster-wide operator would admit this namespace's jobs too (`operator` restarts it)
    core, custom = api
    capacity = {n: GPUS_PER_NODE for n in gpu_nodes(NODES, gpus_per_node=GPUS_PER_NODE)}
    jobs = {f"job-{i:02d}": size for i, size in enumerate(SIZES)}
    pods = PodWatch(core, namespace, capacity, {name: n for name, (n, _) in jobs.items()})
    pods.start()
    ops: list[OperatorProcess] = []
    ended: list[str] = []

    def start() -> OperatorProcess:  # namespaced, its Lease in the namespace, held 1 s: a killed leader is replaced within ~1 s
        op = OperatorProcess(Path(cluster.kubeconfig), tmp_path / f"operator-{len(ops):02d}.log", namespace=namespace, resync_seconds=1,
                             extra_args=("--topology-preset", "railtrain", "--lease-namespace", namespace, "--lease-seconds", "1"))  # fmt: skip
        op.start()
        ops.append(op)
        return op

    def leading(op: OperatorProcess) -> bool:
        op.check()
        return LEADING in op.log_path.read_text(errors="replace")

    def objects() -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in custom.list_namespaced_custom_object(G, V, namespace, P)["items"]}

    def phase(obj: dict[str, Any]) -> str | None:
        return (obj.get("status") or {}).get("phase")

    load = os.getloadavg()[0]
    began = time.monotonic()
    delays: list[float] = []
    standbys = interrupted = triggered = 0
    try:
        op = start()
        for i, (name, (n, g)) in enumerate(jobs.items()):  # 20 lifetimes, each ended by a SIGKILL
            wait_for(lambda: leading(op), 60, f"operator {ops.index(op)} to take the Lease")
            standby = start() if rng.random() < 0.5 else None
            submit(job_body(name, nodes=n, gpus=g, procs=g))
            pick = rng.random()
            if i >= FIRST_END and (i - FIRST_END) % END_EVERY == 0:
                running = sorted(j for j, o in objects().items() if phase(o) == "Running" and j not in ended)
                if running:
                    ended.append(running[int(pick * len(running))])
                    finish(core, namespace, ended[-1])
            if rng.random() < TRIGGERED:
                triggered += 1
                try:
                    wait_for(lambda: name in pods.seen, WRITE_WAIT, f"a pod of {name}", interval=0.02)
                except AssertionError:
                    pass  # it does not fit now: the kill comes in the middle of its refusal instead
                delays.append(rng.uniform(0.0, AFTER_WRITE))
            else:
                delays.append(MAX_DELAY * rng.random() ** 2)
            time.sleep(delays[-1])  # the random moment itself, not a wait for a condition
            op.kill()
            interrupted += bool(pods.partial())
            standbys += standby is not None
            op = standby or start()
        killed = time.monotonic()
        why: list[str] = []

        def settled() -> bool:
            op.check()
            objs = objects()
            phases = {name: phase(o) for name, o in objs.items()}
            live = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
            by_job = Counter((p["metadata"].get("labels") or {}).get(contract.LABEL_JOB_NAME) for p in live if holds(p))
            half = [n for n in objs if phases[n] == "Running" and by_job[n] != jobs[n][0]]
            held_waiting = [n for n in objs if phases[n] != "Running" and by_job[n]]
            not_running = [p["metadata"]["name"] for p in live if holds(p) and (p.get("status") or {}).get("phase") != "Running"]
            unended = [n for n in ended if phases.get(n) != "Succeeded"]
            fits = fitting_waiters(jobs, phases, live, capacity)
            why[:] = [f"missing jobs {sorted(set(jobs) - set(objs))}; Running without every pod held {half}; not Running but holding "
                      f"{held_waiting}; held pods not Running {not_running}; ended jobs not Succeeded {unended}; waiting jobs that fit: "
                      f"{fits}; phases {phases}"]  # fmt: skip
            return set(objs) == set(jobs) and not (half or held_waiting or not_running or unended or fits)

        try:
            wait_for(settled, 120, "every job that fits Running and nothing else holding GPUs")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{why[0]}\nthe last operator's log:\n{op.tail()}") from None
        done = time.monotonic()

        def listed() -> dict[str, str]:
            return {p.metadata.name: p.metadata.resource_version for p in core.list_namespaced_pod(namespace).items}

        wait_for(lambda: pods.view() == listed(), 30, "the pod watch to have seen every pod's last version")
    finally:
        pods.stop()
        for o in ops:
            o.stop()

    objs = objects()
    phases = {name: phase(o) for name, o in objs.items()}
    restarts = {n: (o.get("status") or {}).get("restarts") for n, o in objs.items() if (o.get("status") or {}).get("restarts")}
    tracebacks = sum(o.log_path.read_text(errors="replace").count("Traceback") for o in ops)
    print(f"{KILLS} kills ({standbys} taken over by a standby, {KILLS - standbys} by a fresh process; {triggered} right after a first pod; delays "
          f"{min(delays):.2f}..{max(delays):.2f} s; {interrupted} found a gang half-written) in {killed - began:.1f} s; settled {done - killed:.1f} s after the last kill; "
          f"{pods.events} pod events checked {dict(pods.kinds)}; ended {ended}; Running {sorted(n for n, p in phases.items() if p == 'Running')}; "
          f"peak GPUs held per node {sorted(pods.peak.values())}; job restarts {restarts}; tracebacks in the operators' logs {tracebacks}; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    assert pods.error is None, f"the pod watch stopped: {pods.error!r}"
    assert not pods.violations, "\n".join(pods.violations)
    assert set(objs) == set(jobs) and not any(o["metadata"].get("deletionTimestamp") for o in objs.values())
    assert {n for n, p in phases.items() if p in ("Succeeded", "Failed")} == set(ended), phases
    uids = {n: o["metadata"]["uid"] for n, o in objs.items()}
    for p in json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]:
        job = (p["metadata"].get("labels") or {}).get(contract.LABEL_JOB_NAME)
        assert any(o.get("uid") == uids.get(job) for o in p["metadata"].get("ownerReferences") or []), f"pod {p['metadata']['name']} outlives its job"
