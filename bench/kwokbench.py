"""Start-up benchmarks on the local control plane: a workload, three ways to start it, one table.

The three modes start the *same* pods (same name, image, environment,
resources) and are timed from the first API call to the last pod Running:

``floor``
    the pods created directly with ``spec.nodeName`` set: no operator, no
    scheduler; only the API server, etcd and KWOK. Nothing can start faster.
``scheduler``
    the pods created with no node: kube-scheduler binds them one by one, no
    gang (what a user gets from plain pods or an Indexed Job).
``operator``
    TrainingJobs applied, and the railtrain operator (a real subprocess)
    creates the gated gang, places it all-or-nothing, pins and ungates it;
    kube-scheduler then binds each pod to its pinned node.

Each mode runs in its own namespace and the operator watches only its own,
so baselines run with the operator idle. Modes are interleaved within every
repetition (floor, scheduler, operator, floor, ...) so that slow drift of a
shared machine hits all of them alike, and every namespace is emptied (and
the emptiness waited for) between measurements; nodes are reused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness import RESULTS_DIR, Table, fmt_s, fmt_x, machine, median, ratio, write_json
from timeline import act_and_watch

from railtrain.cli.controlplane import LocalCluster, wait_until
from railtrain.cli.controlplane.operator_process import OperatorProcess
from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render

MODES = ("floor", "scheduler", "operator")
G, V, P = contract.API_GROUP, contract.API_VERSION, contract.PLURAL
IMAGE = "ghcr.io/railtrain/trainer:0.1.0"
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    """``jobs`` jobs of ``pods_per_job`` pods, each pod asking ``gpus_per_pod`` GPUs.

    Attributes:
        label: how the workload is named in tables ("256", "100x8").
    """

    label: str
    jobs: int
    pods_per_job: int
    gpus_per_pod: int

    @property
    def pods(self) -> int:
        """Total pods of the workload."""
        return self.jobs * self.pods_per_job


def trainingjob(name: str, nodes: int, gpus: int) -> dict[str, Any]:
    """The TrainingJob a user would apply: ``nodes`` pods of ``gpus`` GPUs, one process per GPU."""
    return {
        "apiVersion": f"{G}/{V}",
        "kind": contract.KIND,
        "metadata": {"name": name},
        "spec": {
            "image": IMAGE,
            "command": ["torchrun", "-m", "railtrain.trainer"],
            "nodes": nodes,
            "procsPerNode": max(1, gpus),
            "resources": {"gpus": gpus},
        },
    }


def bare_pods(name: str, namespace: str, nodes: int, gpus: int, node_names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The pods the operator would render for job ``name``, as plain pods.

    They carry the same name, labels, environment and resources, but no
    scheduling gate and no ownerReference (no TrainingJob exists to own them).

    Args:
        node_names: when given, pod ``r`` gets ``spec.nodeName = node_names[r]``
            (the floor); else the scheduler chooses.
    """
    job = TrainingJob.model_validate(trainingjob(name, nodes, gpus))
    out = []
    for rank, pod in enumerate(render.render_gang(job, namespace, uid="")):
        pod["metadata"].pop("ownerReferences", None)
        pod["spec"].pop("schedulingGates", None)
        if node_names is not None:
            pod["spec"]["nodeName"] = node_names[rank]
        out.append(pod)
    return out


def in_parallel(calls: Sequence[Callable[[], Any]], workers: int) -> None:
    """Run every call on a pool of ``workers`` threads; the first exception propagates."""
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="bench-create") as pool:
        for future in [pool.submit(c) for c in calls]:
            future.result()


class Operator(OperatorProcess):
    """``python -m railtrain.operator --namespace NS`` as a subprocess, logging to a file."""

    def __init__(self, kubeconfig: Path, namespace: str, log_path: Path, resync_seconds: float | None = None):
        super().__init__(kubeconfig, log_path, namespace=namespace, resync_seconds=resync_seconds)


class BenchCluster:
    """The control plane of one benchmark run: a fresh :class:`LocalCluster`, or a running one attached by name.

    A fresh cluster is stopped at exit (and by a watchdog if this process
    dies); on an attached one, the nodes and namespaces this run created are
    deleted and everything else is left alone.
    """

    def __init__(self, prefix: str, attach: str | None = None):
        self.prefix = f"{prefix}-{uuid.uuid4().hex[:4]}"
        self.attach = attach
        self.local = LocalCluster(attach or f"bench-{self.prefix}")
        self.nodes: list[str] = []
        self.namespaces: list[str] = []

    def __enter__(self) -> "BenchCluster":
        from kubernetes import client

        if self.attach:
            if not self.local.is_running():
                raise RuntimeError(f"no running local cluster named {self.attach!r}")
        else:
            self.local.start(owner_pid=os.getpid())
        try:
            self.local.install_crds(sorted((REPO / "crds").glob("*.yaml")))
            self.api = self.local.api_client()
            self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
            wait_until(lambda: self.custom.list_cluster_custom_object(G, V, P) is not None, 60, "the TrainingJob API to be served")
            self.version = client.VersionApi(self.api).get_code().git_version
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.attach:
            self.local.stop()
            return
        for name in self.nodes:
            self.core.delete_node(name, _preload_content=False)
        for name in self.namespaces:
            self.core.delete_namespace(name, _preload_content=False)

    def add_nodes(self, count: int, gpus: int, **shape: Any) -> list[str]:
        """Add ``count`` KWOK nodes of ``gpus`` GPUs named after this run; wait until schedulable."""
        names = self.local.add_gpu_nodes(count, gpus, name_prefix=f"{self.prefix}-node", timeout=120 + count, **shape)
        self.nodes.extend(names)
        return names

    def namespace(self, suffix: str) -> str:
        """Create namespace ``<prefix>-<suffix>`` and wait for its default ServiceAccount."""
        name = f"{self.prefix}-{suffix}"
        self.core.create_namespace({"metadata": {"name": name, "labels": {"railtrain.dev/bench": "true"}}})
        self.namespaces.append(name)
        wait_until(lambda: self.core.read_namespaced_service_account("default", name), 60, f"ServiceAccount {name}/default")
        return name

    def _count(self, namespace: str, kind: str) -> int:
        if kind == "pods":
            res = self.core.list_namespaced_pod(namespace, _preload_content=False)
            return len(json.loads(res.data)["items"])
        return len(self.custom.list_namespaced_custom_object(G, V, namespace, P)["items"])

    def empty(self, namespace: str, timeout: float = 300) -> None:
        """Delete every TrainingJob, pod and Service in ``namespace`` and wait until they are gone.

        Jobs go first (else the operator would recreate their pods); pods are
        then deleted with grace period 0 rather than waiting for the garbage collector.
        """
        self.custom.delete_collection_namespaced_custom_object(G, V, namespace, P)
        wait_until(lambda: self._count(namespace, "jobs") == 0, timeout, f"TrainingJobs in {namespace} gone")
        self.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _preload_content=False)
        wait_until(lambda: self._count(namespace, "pods") == 0, timeout, f"pods in {namespace} gone", interval=0.25)
        self.core.delete_collection_namespaced_service(namespace, _preload_content=False)


def job_names(workload: Workload, rep: str) -> list[str]:
    """Distinct job names for one measurement (a Service of a deleted job may linger for a while)."""
    return [f"w{workload.label.replace('x', '-')}-{rep}-{j}" for j in range(workload.jobs)]


def measure(bc: BenchCluster, mode: str, namespace: str, workload: Workload, nodes: Sequence[str], rep: str, workers: int, timeout: float) -> dict[str, Any]:
    """Start ``workload`` in ``mode``, time it to all pods Running, then empty the namespace.

    Returns:
        One sample: the milestones (seconds), pods/s and per-job Running times.
    """
    names = job_names(workload, rep)
    size, gpus = workload.pods_per_job, workload.gpus_per_pod
    if mode == "operator":
        calls = [lambda n=n: bc.custom.create_namespaced_custom_object(G, V, namespace, P, trainingjob(n, size, gpus)) for n in names]
    else:
        pods = []
        for j, name in enumerate(names):
            pinned = [nodes[(j * size + r) % len(nodes)] for r in range(size)] if mode == "floor" else None
            pods += bare_pods(name, namespace, size, gpus, pinned)
        calls = [lambda p=p: bc.core.create_namespaced_pod(namespace, p, _preload_content=False) for p in pods]
    timeline = act_and_watch(bc.core, namespace, workload.pods, lambda: in_parallel(calls, workers), timeout)
    bc.empty(namespace)
    return sample_of(workload, mode, rep, timeline)


def sample_of(workload: Workload, mode: str, rep: str, timeline: Any) -> dict[str, Any]:
    """One measurement's sample: the timeline's milestones (seconds), the load, pods/s and, for several jobs, each job's
    seconds to Running. ``timeline``: from :func:`timeline.act_and_watch`."""
    sample: dict[str, Any] = {"workload": workload.label, "mode": mode, "rep": rep, **timeline.milestones(), "load1": round(os.getloadavg()[0], 2)}
    sample["pods_per_s"] = ratio(workload.pods, sample["all_running_s"])
    if workload.jobs > 1:
        sample["job_running_s"] = [round(t, 3) for t in timeline.job_running_times()]
    return sample


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Options every start-up benchmark takes."""
    parser.add_argument("--repeats", type=int, default=3, help="Timed repetitions of every workload and mode (default 3).")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed rounds of every mode on a small workload first (default 1).")
    parser.add_argument("--modes", default=",".join(MODES), help=f"Comma-separated subset of {','.join(MODES)} (default all).")
    parser.add_argument("--workers", type=int, default=8, help="Threads creating pods or TrainingJobs at once (default 8).")
    parser.add_argument("--timeout", type=float, default=600, help="Seconds one measurement may take (default 600).")
    parser.add_argument("--resync-seconds", type=float, default=None, help="Passed to the operator (default: the operator's own default).")
    parser.add_argument("--attach", metavar="NAME", default=None, help="Use the running LocalCluster NAME (e.g. `railtrain dev up`'s 'railtrain') instead of starting one; no other railtrain operator may run there.")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/<name>-<time>.json).")


def run_matrix(name: str, args: argparse.Namespace, workloads: Sequence[Workload], node_count: int, gpus_per_node: int,
               node_shape: dict[str, Any], warmup: Workload | None = None) -> dict[str, Any]:
    """Run every workload in every mode, ``args.repeats`` times, on one cluster; return the JSON record.

    ``args.warmup`` untimed rounds of every mode on ``warmup`` (default: the
    first workload) come first: they start the operator's and the
    scheduler's caches and make sure the operator is up before anything is timed.

    Raises:
        ValueError: an unknown mode, or repeats < 1.
    """
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES) or args.repeats < 1:
        raise ValueError(f"--modes must be a non-empty subset of {','.join(MODES)} and --repeats >= 1")
    record: dict[str, Any] = {"machine_before": machine(), "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    samples: list[dict[str, Any]] = []
    with BenchCluster(name.replace("_", "-"), args.attach) as bc:
        t = time.perf_counter()
        nodes = bc.add_nodes(node_count, gpus_per_node, **node_shape)
        print(f"{bc.local.name}: Kubernetes {bc.version}, {len(nodes)} KWOK nodes x {gpus_per_node} GPUs ready in {time.perf_counter() - t:.1f}s", flush=True)
        spaces = {m: bc.namespace(m) for m in modes}
        operator = Operator(bc.local.kubeconfig, spaces["operator"], RESULTS_DIR / f"{name}-operator-{os.getpid()}.log", args.resync_seconds) if "operator" in modes else None
        try:
            if operator:
                operator.start()
            rounds = [(f"warm{i}", [warmup or workloads[0]], True) for i in range(args.warmup)]
            rounds += [(f"r{i}", workloads, False) for i in range(args.repeats)]
            for rep, todo, warm in rounds:
                for workload in todo:
                    for mode in modes:
                        if operator:
                            operator.check()
                        s = measure(bc, mode, spaces[mode], workload, nodes, rep, args.workers, args.timeout)
                        print(f"  {rep:6} {workload.label:>6} {mode:9} all Running in {s['all_running_s']:7.2f}s{'  (warm-up)' if warm else ''}", flush=True)
                        if not warm:
                            samples.append(s)
        except BaseException:
            if operator:
                print("---- operator log tail ----\n" + operator.tail(), file=sys.stderr)
            raise
        finally:
            if operator:
                operator.stop()
        record["cluster"] = {"kubernetes": bc.version, "nodes": node_count, "gpus_per_node": gpus_per_node, **node_shape}
    record["machine_after"] = machine()
    record["samples"] = samples
    record["load1_median"] = median(s["load1"] for s in samples)
    record["summary"] = summarize(samples, workloads, modes)
    return record


def summarize(samples: Sequence[dict[str, Any]], workloads: Sequence[Workload], modes: Sequence[str]) -> list[dict[str, Any]]:
    """Medians per (workload, mode), with the ratio of each median to the floor's in the same run."""
    out = []
    for w in workloads:
        floor = median(s["all_running_s"] for s in samples if s["workload"] == w.label and s["mode"] == "floor")
        for mode in modes:
            mine = [s for s in samples if s["workload"] == w.label and s["mode"] == mode]
            if not mine:
                continue
            med = median(s["all_running_s"] for s in mine)
            row = {
                "workload": w.label,
                "pods": w.pods,
                "mode": mode,
                "n": len(mine),
                "all_running_s_median": med,
                "all_running_s_min": min(s["all_running_s"] for s in mine),
                "all_running_s_max": max(s["all_running_s"] for s in mine),
                "all_created_s_median": median(s["all_created_s"] for s in mine),
                "all_ungated_s_median": median(s["all_ungated_s"] for s in mine),
                "all_bound_s_median": median(s["all_bound_s"] for s in mine),
                "pods_per_s_median": median(s["pods_per_s"] for s in mine),
                "ratio_to_floor": ratio(med, floor),
            }
            if w.jobs > 1:
                row["job_running_s_p50_median"] = median(median(s["job_running_s"]) for s in mine)
            out.append(row)
    return out


def summary_table(title: str, summary: Sequence[dict[str, Any]], note: str = "") -> Table:
    """The summary as a :class:`Table`: one row per workload and mode."""
    per_job = any("job_running_s_p50_median" in r for r in summary)
    cols = ["workload", "mode", "n", "all Running s", "min-max s", "all created s", "all ungated s", "all bound s", "pods/s", "vs floor"]
    if per_job:
        cols.insert(8, "median job Running s")
    table = Table(title, cols, note=note)
    for r in summary:
        cells = [r["workload"], r["mode"], r["n"], fmt_s(r["all_running_s_median"]),
                 f"{fmt_s(r['all_running_s_min'])}-{fmt_s(r['all_running_s_max'])}",
                 fmt_s(r["all_created_s_median"]), fmt_s(r["all_ungated_s_median"]), fmt_s(r["all_bound_s_median"]),
                 f"{r['pods_per_s_median']:.0f}", fmt_x(r["ratio_to_floor"])]
        if per_job:
            cells.insert(8, fmt_s(r.get("job_running_s_p50_median", float("nan"))))
        table.add(*cells)
    return table


def report(name: str, record: dict[str, Any], title: str, note: str, json_path: Path | None) -> Path:
    """Print ``record``'s summary as a table titled ``title`` and the median 1-minute load average; add the table's
    plain text to ``record`` and write it as JSON (``json_path``, default ``bench/results/<name>-<time>.json``).

    Returns:
        Where the JSON record was written (also printed).
    """
    table = summary_table(title, record["summary"], note=note)
    table.print()
    print(f"1-minute load average during the measurements (median): {record['load1_median']:.2f} on {record['machine_before']['cpus']} CPUs")
    record["table"] = table.plain()
    path = write_json(name, record, json_path)
    print(f"JSON: {path}")
    return path
