"""Fair sharing through Kueue, and one ledger for two backends: two teams' TrainingJobs admitted by stock Kueue beside
jobs of railtrain's own queue, on one KWOK cluster.

Issue 28's measurement. One fresh local control plane (etcd, kube-apiserver, kube-scheduler, controller-manager, KWOK
nodes of 8 GPUs), stock Kueue v0.17.0 as a local process (``integrations.externalFrameworks: [TrainingJob...]``,
``fairSharing`` on) and the railtrain operator as a subprocess. In Kueue: a Topology (block, rack, hostname), one TAS
ResourceFlavor over every node, a Cohort ``shared`` and two ClusterQueues in it, ``team-a`` and ``team-b``, whose
nominal GPU quotas split the cluster less the own queue's nodes (below) by ``--share-a`` (the configured shares), each free to borrow the other's unused
quota and to reclaim its own by preemption (``reclaimWithinCohort: Any``); a LocalQueue per team in its own namespace.

Each team keeps ``--backlog`` more jobs waiting than its quota holds (1-node jobs of 8 GPUs, labelled with its
LocalQueue), so both always ask for more than their share; a job runs ``--job-seconds`` after its pod is Running,
then the bench ends it (exit 0, through KWOK) and submits another. Beside them, in a third namespace without a queue
label, railtrain's own queue keeps ``--own-jobs`` 1-node jobs wanting nodes too, on any node (Kueue's quota cannot see
them, so that many nodes' GPUs are left out of the teams' quotas; Kueue's TAS sees their bound pods and works around them). Every ``--sample`` seconds the bench
lists every pod and records

* each team's GPUs in Running pods, integrated into GPU-seconds: the **measured share** of a team is its GPU-seconds
  over both teams' (what Kueue handed out), set against its **configured share** (its nominal quota over the
  cohort's); the issue's bar is a deviation within 10% of the configured share;
* per node, the GPUs of every pod bound to it and not ended, whichever backend admitted it: **double-booked** when
  that exceeds the node's 8 (the two backends promised the same GPUs); the bar is none at any sample.

    python bench/kueue_fairshare.py                               # 8 nodes, 0.75/0.25, 180 s
    python bench/kueue_fairshare.py --nodes 4 --seconds 20 --job-seconds 2   # the smoke test's size

Prints a table and writes JSON (``--json``, default ``bench/results/kueue_fairshare-<time>.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from harness import RESULTS_DIR, Table, fmt_pct, machine, write_json
from kwokbench import BenchCluster, trainingjob, G, V, P

from railtrain.cli.controlplane import LABEL_KWOK_EXIT, wait_until
from railtrain.cli.controlplane import kueue as kq
from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import contract
from railtrain.crds import kueue as names
from railtrain.crds.labels import HOSTNAME, RAILTRAIN_BLOCK, RAILTRAIN_RACK

GPUS_PER_NODE = 8
TEAMS = ("team-a", "team-b")
OWN = "own"
"""The namespace suffix of railtrain's own queue's jobs (no queue label)."""
TOPOLOGY = "railtrain"


def shares(nodes: int, share_a: float) -> dict[str, int]:
    """Each team's nominal GPU quota: ``share_a`` of the cluster's GPUs for team-a (rounded to whole nodes, at least
    one node each), the rest for team-b (pure).

    Raises:
        ValueError: fewer than 2 nodes, or ``share_a`` outside (0, 1).
    """
    if nodes < 2:
        raise ValueError("--nodes must be at least 2 (one node of quota per team)")
    if not 0 < share_a < 1:
        raise ValueError("--share-a must be between 0 and 1, exclusive")
    a = min(nodes - 1, max(1, round(nodes * share_a)))
    return {"team-a": a * GPUS_PER_NODE, "team-b": (nodes - a) * GPUS_PER_NODE}


def kueue_objects(flavor: str, node_labels: dict[str, str], quotas: dict[str, int], namespaces: dict[str, str]) -> list[dict[str, Any]]:
    """The Kueue objects of the scene: the TAS flavor, the Cohort, a ClusterQueue and a LocalQueue per team (pure)."""
    docs: list[dict[str, Any]] = [kq.resource_flavor(flavor, node_labels, TOPOLOGY),
                                  {"apiVersion": f"{kq.GROUP}/{kq.API}", "kind": "Cohort", "metadata": {"name": "shared"}, "spec": {}}]
    for team, gpus in quotas.items():
        cq = kq.cluster_queue(team, flavor, {"nvidia.com/gpu": gpus},
                              preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"})  # fmt: skip
        cq["spec"]["cohortName"] = "shared"
        docs += [cq, kq.local_queue(team, namespaces[team], team)]
    return docs


def gpus_of(pod: dict[str, Any]) -> int:
    """The GPUs a pod asks for (its containers' ``nvidia.com/gpu`` limits, else requests)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += int((res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get("nvidia.com/gpu") or 0)
    return total


def sample(pods: list[dict[str, Any]], team_of: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """One sample of the pod list (pure): GPUs in Running pods per team (namespace → team via ``team_of``, others
    ignored), and per node the GPUs of every bound pod not ended (any namespace)."""
    running = {team: 0 for team in set(team_of.values())}
    booked: dict[str, int] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        if pod["metadata"].get("deletionTimestamp") is None and phase == "Running" and pod["metadata"]["namespace"] in team_of:
            running[team_of[pod["metadata"]["namespace"]]] += gpus_of(pod)
        if node and phase in ("Pending", "Running"):
            booked[node] = booked.get(node, 0) + gpus_of(pod)
    return running, booked


def summarize(samples: list[dict[str, Any]], quotas: dict[str, int]) -> dict[str, Any]:
    """GPU-seconds per team (left Riemann sum over the samples), measured vs configured shares, the worst relative
    deviation, and the samples where a node was double-booked (pure)."""
    gpu_s = {team: 0.0 for team in quotas}
    for before, after in itertools.pairwise(samples):
        for team in quotas:
            gpu_s[team] += before["running"].get(team, 0) * (after["t"] - before["t"])
    total, configured_total = sum(gpu_s.values()), sum(quotas.values())
    rows = {}
    for team, quota in quotas.items():
        configured = quota / configured_total
        measured = gpu_s[team] / total if total else float("nan")
        rows[team] = {"quota_gpus": quota, "gpu_seconds": round(gpu_s[team], 1), "configured_share": configured,
                      "measured_share": measured, "deviation": (measured - configured) / configured}  # fmt: skip
    over = [{"t": s["t"], "nodes": {n: g for n, g in s["booked"].items() if g > GPUS_PER_NODE}} for s in samples
            if any(g > GPUS_PER_NODE for g in s["booked"].values())]  # fmt: skip
    worst = max((abs(r["deviation"]) for r in rows.values()), default=float("nan"))
    return {"teams": rows, "worst_deviation": worst, "double_booked_samples": over, "samples": len(samples)}


class Scene:
    """The running scene: submits jobs to keep each backlog, ends jobs past their run time, deletes finished ones."""

    def __init__(self, bc: BenchCluster, namespaces: dict[str, str], args: argparse.Namespace, quotas: dict[str, int]):
        self.bc, self.ns, self.args = bc, namespaces, args
        self.want = {team: quotas[team] // GPUS_PER_NODE + args.backlog for team in TEAMS} | {OWN: args.own_jobs}
        self.count = itertools.count()
        self.running_since: dict[tuple[str, str], float] = {}
        self.submitted = {k: 0 for k in self.want}
        self.finished = {k: 0 for k in self.want}

    def submit(self, key: str) -> None:
        body = trainingjob(f"{key}-{next(self.count)}", 1, GPUS_PER_NODE)
        if key != OWN:
            body["metadata"]["labels"] = {names.QUEUE_LABEL: key}
        self.bc.custom.create_namespaced_custom_object(G, V, self.ns[key], P, body)
        self.submitted[key] += 1

    def tick(self, pods: list[dict[str, Any]], now: float) -> None:
        """Keep every backlog full, end the pods of jobs Running ``--job-seconds``, delete the jobs that succeeded."""
        for key, ns in self.ns.items():
            jobs = self.bc.custom.list_namespaced_custom_object(G, V, ns, P)["items"]
            live = 0
            for job in jobs:
                name, phase = job["metadata"]["name"], (job.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    self.bc.custom.delete_namespaced_custom_object(G, V, ns, P, name)
                    self.finished[key] += 1
                    self.running_since.pop((ns, name), None)
                    continue
                live += 1
            for _ in range(self.want[key] - live):
                self.submit(key)
        for pod in pods:
            meta = pod["metadata"]
            job = (meta.get("labels") or {}).get(contract.LABEL_JOB_NAME)
            if meta["namespace"] not in self.ns.values() or job is None or (pod.get("status") or {}).get("phase") != "Running":
                continue
            since = self.running_since.setdefault((meta["namespace"], job), now)
            if now - since >= self.args.job_seconds and LABEL_KWOK_EXIT not in (meta.get("labels") or {}):
                self.bc.core.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"labels": {LABEL_KWOK_EXIT: "0"}}})


def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the scene, run it for ``args.seconds`` and return the record (see the module docstring).

    Raises:
        SystemExit: Kueue cannot be built here (its reason).
    """
    root, reason = kq.ensure_kueue()
    if root is None:
        raise SystemExit(f"kueue_fairshare: Kueue is not available: {reason}")
    quotas = shares(args.nodes - args.own_jobs, args.share_a)  # the own queue's jobs' nodes are left out of Kueue's quota
    with BenchCluster("fairshare") as bc:
        pool = {"railtrain.dev/bench-pool": bc.prefix}
        nodes = bc.add_nodes(args.nodes, GPUS_PER_NODE, nodes_per_rack=4, labels=pool)
        kueue = kq.LocalKueue(bc.local, root, args.out.parent / "kueue-fairshare-kueue.log", frameworks=("batch/job",),
                              external_frameworks=(kq.TRAININGJOB_FRAMEWORK,), fair_sharing=True)  # fmt: skip
        kueue.start()
        op = OperatorProcess(bc.local.kubeconfig, args.out.parent / "kueue-fairshare-operator.log", resync_seconds=1,
                             extra_args=("--topology-preset", "railtrain"))  # fmt: skip
        op.start()
        try:
            namespaces = {key: bc.namespace(key) for key in (*TEAMS, OWN)}
            kueue.apply([kq.topology(TOPOLOGY, (RAILTRAIN_BLOCK, RAILTRAIN_RACK, HOSTNAME))])
            kueue.apply(kueue_objects(f"{bc.prefix}-gpu", pool, quotas, namespaces))
            scene = Scene(bc, namespaces, args, quotas)
            team_of = {namespaces[t]: t for t in TEAMS}
            samples: list[dict[str, Any]] = []
            t0 = time.monotonic()
            while (now := time.monotonic()) - t0 < args.seconds:
                pods = json.loads(bc.core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
                running, booked = sample(pods, team_of)
                samples.append({"t": now - t0, "running": running, "booked": booked})
                scene.tick(pods, now)
                time.sleep(max(0.0, args.sample - (time.monotonic() - now)))
            result = summarize(samples, quotas)
        finally:
            op.stop()
            kueue.stop()
    return {"nodes": args.nodes, "gpus_per_node": GPUS_PER_NODE, "node_names": nodes, "seconds": args.seconds, "job_seconds": args.job_seconds,
            "backlog": args.backlog, "own_jobs": args.own_jobs, "quotas": quotas, "submitted": scene.submitted, "finished": scene.finished,
            "result": result, "kubernetes": bc.version, "machine": machine()}  # fmt: skip


def table(record: dict[str, Any]) -> Table:
    """The results table: per team, its quota, GPU-seconds, configured and measured share, deviation; then the ledger."""
    res = record["result"]
    t = Table(f"Fair sharing through Kueue: {record['nodes']} nodes x {GPUS_PER_NODE} GPUs, {record['seconds']:.0f} s, jobs of 1 node run "
              f"{record['job_seconds']:.0f} s; {record['own_jobs']} job(s) of railtrain's own queue beside",
              ["team", "nominal GPUs", "GPU-seconds", "configured share", "measured share", "deviation", "jobs finished"])  # fmt: skip
    for team, row in res["teams"].items():
        t.add(team, row["quota_gpus"], f"{row['gpu_seconds']:.0f}", fmt_pct(row["configured_share"]), fmt_pct(row["measured_share"]),
              f"{100 * row['deviation']:+.1f}%", record["finished"][team])  # fmt: skip
    t.note = (f"worst deviation {100 * res['worst_deviation']:.1f}% of the configured share (bar: 10%); "
              f"samples with a node double-booked: {len(res['double_booked_samples'])} of {res['samples']} (bar: 0); "
              f"railtrain's own queue finished {record['finished'][OWN]} job(s)")
    return t


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a bad value is one sentence and exit code 2."""
    parser = argparse.ArgumentParser(prog="kueue_fairshare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8, help="KWOK nodes of 8 GPUs (default 8; at least 2).")
    parser.add_argument("--share-a", type=float, default=0.75, help="team-a's share of the nominal quota (default 0.75; team-b has the rest).")
    parser.add_argument("--seconds", type=float, default=180, help="How long the scene runs (default 180).")
    parser.add_argument("--job-seconds", type=float, default=5, help="How long a job runs once its pod is Running (default 5).")
    parser.add_argument("--backlog", type=int, default=3, help="Jobs each team keeps waiting beyond its quota (default 3).")
    parser.add_argument("--own-jobs", type=int, default=1, help="1-node jobs railtrain's own queue keeps wanting (default 1).")
    parser.add_argument("--sample", type=float, default=0.5, help="Seconds between samples (default 0.5).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/kueue_fairshare-<time>.json).")
    args = parser.parse_args(argv)
    try:
        shares(args.nodes, args.share_a)
    except ValueError as err:
        parser.error(str(err))
    if args.nodes - args.own_jobs < 2:
        parser.error(f"--nodes must leave at least 2 nodes of Kueue quota beside --own-jobs ({args.own_jobs})")
    for flag in ("seconds", "job_seconds", "sample"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be greater than 0")
    for flag in ("backlog", "own_jobs"):
        if getattr(args, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be 0 or more")
    args.out = args.json or RESULTS_DIR / f"kueue_fairshare-{time.strftime('%Y%m%d-%H%M%S')}.json"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = run(args)
    table(record).print()
    path = write_json("kueue_fairshare", record, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
