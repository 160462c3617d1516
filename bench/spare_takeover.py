"""The operator's part of a lost node at scale: a hot spare's takeover vs a gang restart, one job, one run (issue 29).

On one local control plane with KWOK nodes (racks of 8, 8 GPUs each), one TrainingJob of ``--gang`` nodes with
``spec.spares: 1`` and ``runPolicy.restartInPlace``, the operator a subprocess. Once its ranks and its spare are
Running, the two paths alternate ``--repeats`` times, each timed from its trigger:

* **spare**: what the operator does when the gang's coordinator has given a lost rank to the spare. KWOK pods run no
  process, so the coordinator's answer is served to the operator's own progress reader (``operator/progress.py``),
  run in this process against the same API server, as the control-plane tests do: timed until the spare pod is
  labelled with the rank and the rank's old pod is gone (the reader's pass alone is reported too), then until a new
  spare is bound and Running (the pool refilled, in the background: the gang trains meanwhile); the gang's other
  pods untouched (their uids checked).
* **gang**: one rank's pod fails (exit 137 through KWOK's stage label), as today's recovery after a lost node ends:
  the operator deletes and recreates every pod of the gang, places it again, and the time runs until every rank is
  Running again (new pods) and the new gang's spare is Running too.

The processes inside the pods (torch import, rendezvous, checkpoint load) are not simulated: this is the operator's
part, the part that grows with the gang (docs/bench-operator.md's 128-node restart)::

    python bench/spare_takeover.py                         # a 128-node gang on 136 nodes, 5 repeats of each
    python bench/spare_takeover.py --gang 2 --repeats 1    # smoke size
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness import RESULTS_DIR, Table, fmt_s, fmt_x, machine, median, ratio, revision, write_json
from kwokbench import BenchCluster, Operator, trainingjob, G, V, P

from railtrain.cli.controlplane import wait_until
from railtrain.crds import contract, inplace

GPUS_PER_NODE, NODES_PER_RACK, RACKS_PER_BLOCK = 8, 8, 4


def job_pods(bc: BenchCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    """The job's pods, not being deleted, as plain dicts."""
    items = json.loads(bc.core.list_namespaced_pod(namespace, label_selector=f"{contract.LABEL_JOB_NAME}={job}", _preload_content=False).data)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def split(pods: list[dict[str, Any]]) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """(Running rank pods by node rank, Running waiting spares)."""
    up = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    labels = [(p, p["metadata"].get("labels") or {}) for p in up]
    return {int(lb[contract.LABEL_NODE_RANK]): p for p, lb in labels if contract.LABEL_NODE_RANK in lb}, [p for p, lb in labels if contract.LABEL_SPARE in lb]


def settled(bc: BenchCluster, namespace: str, job: str, gang: int, timeout: float) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """Wait until every rank and one spare are Running; returns (ranks, spare)."""
    out: list[Any] = []

    def ok() -> bool:
        ranks, spares = split(job_pods(bc, namespace, job))
        if len(ranks) == gang and len(spares) == 1:
            out[:] = [ranks, spares[0]]
            return True
        return False

    wait_until(ok, timeout, f"{job}: {gang} ranks and a spare Running", interval=0.25)
    return out[0], out[1]


def status(bc: BenchCluster, namespace: str, job: str) -> dict[str, Any]:
    return bc.custom.get_namespaced_custom_object(G, V, namespace, P, job).get("status") or {}


def takeover(bc: BenchCluster, namespace: str, job: str, gang: int, rank: int, taken_before: int, timeout: float) -> dict[str, Any]:
    """The coordinator gave ``rank`` to the waiting spare: the reader's pass, then the time to a refilled pool."""
    from railtrain.operator import progress
    from railtrain.operator.kube.verbs import Kube

    ranks, spare = settled(bc, namespace, job, gang, timeout)
    st = status(bc, namespace, job)
    restarts = int(st.get("restarts", 0))
    n = taken_before + 1
    ledger = inplace.Ledger(restarts=restarts, attempt=n, infrastructure=n, causes={inplace.SPARE_CAUSE: n}, spares=n)
    body = json.dumps({"ledger": ledger.to_json(), "holders": {str(rank): spare["metadata"]["name"]}, "attempt": n})
    others = {r: p["metadata"]["uid"] for r, p in ranks.items() if r != rank}
    old = ranks[rank]["metadata"]["name"]
    obj = bc.custom.get_namespaced_custom_object(G, V, namespace, P, job)
    reader = progress.Reader(fetch=lambda url: body if url.endswith("/ledger") else "")
    t0 = time.monotonic()
    reader._one(Kube(bc.api), (namespace, job), progress.rank_zero_pods(obj), datetime.now(timezone.utc), lambda ns, name: threading.Lock(), obj)
    written = time.monotonic() - t0

    marks: dict[str, float] = {}

    def refilled() -> bool:
        pods = job_pods(bc, namespace, job)
        now_ranks, spares = split(pods)
        held = now_ranks.get(rank)
        taken = held is not None and held["metadata"]["name"] == spare["metadata"]["name"] and len(now_ranks) == gang and all(p["metadata"]["name"] != old for p in pods)
        if taken and "taken" not in marks:
            marks["taken"] = time.monotonic() - t0
        return taken and len(spares) == 1

    wait_until(refilled, timeout, f"{job}: rank {rank} on the spare and a new spare Running", interval=0.1)
    total = time.monotonic() - t0
    now_ranks, _ = split(job_pods(bc, namespace, job))
    touched = sorted(r for r, uid in others.items() if now_ranks[r]["metadata"]["uid"] != uid)
    return {"path": "spare", "rank": rank, "reader_pass_s": written, "taken_s": marks.get("taken", total), "refilled_s": total, "other_pods_recreated": touched,
            "restarts": int(status(bc, namespace, job).get("restarts", 0)) - restarts}  # fmt: skip


def gang_restart(bc: BenchCluster, namespace: str, job: str, gang: int, rank: int, timeout: float) -> dict[str, Any]:
    """One rank's pod fails (exit 137): the time until a new gang (every pod new) and its spare are Running."""
    ranks, _ = settled(bc, namespace, job, gang, timeout)
    before = {p["metadata"]["uid"] for p in ranks.values()}
    restarts = int(status(bc, namespace, job).get("restarts", 0))
    t0 = time.monotonic()
    bc.core.patch_namespaced_pod(ranks[rank]["metadata"]["name"], namespace, {"metadata": {"labels": {"railtrain.dev/kwok-exit": "137"}}})
    marks: dict[str, float] = {}

    def back() -> bool:
        now_ranks, spares = split(job_pods(bc, namespace, job))
        fresh = len(now_ranks) == gang and not before & {p["metadata"]["uid"] for p in now_ranks.values()}
        if fresh and "ranks" not in marks:
            marks["ranks"] = time.monotonic() - t0
        return fresh and len(spares) == 1

    wait_until(back, timeout, f"{job}: a new gang and its spare Running", interval=0.1)
    return {"path": "gang", "rank": rank, "all_running_s": marks.get("ranks", time.monotonic() - t0), "with_spare_s": time.monotonic() - t0,
            "restarts": int(status(bc, namespace, job).get("restarts", 0)) - restarts}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run both paths alternately, print the table and write the JSON record."""
    ap = argparse.ArgumentParser(prog="spare_takeover.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gang", type=int, default=128, help="Nodes of the job (default 128).")
    ap.add_argument("--free", type=int, default=8, help="KWOK nodes beyond the gang: room for its spare and the refill (default 8, at least 2).")
    ap.add_argument("--repeats", type=int, default=5, help="Takeovers and gang restarts, alternating (default 5 of each).")
    ap.add_argument("--timeout", type=float, default=600, help="Seconds any one wait may take (default 600).")
    ap.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/spare_takeover-<time>.json).")
    args = ap.parse_args(argv)
    if args.gang < 2 or args.free < 2 or args.repeats < 1:
        ap.error("--gang must be >= 2, --free >= 2 and --repeats >= 1")
    record: dict[str, Any] = {"benchmark": "spare_takeover", "machine_before": machine(), "revision": revision(),
                              "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "samples": []}  # fmt: skip
    with BenchCluster("spares") as bc:
        nodes = bc.add_nodes(args.gang + args.free, GPUS_PER_NODE, nodes_per_rack=NODES_PER_RACK, racks_per_block=RACKS_PER_BLOCK)
        ns = bc.namespace("op")
        operator = Operator(bc.local.kubeconfig, ns, RESULTS_DIR / f"spare-takeover-operator-{os.getpid()}.log")
        operator.start()
        try:
            job = "big"
            body = trainingjob(job, args.gang, GPUS_PER_NODE)
            body["spec"] |= {"spares": 1, "runPolicy": {"restartInPlace": True, "restartBackoffSeconds": 0, "backoffLimit": 10 * args.repeats,
                                                         "maxInfrastructureRestarts": 10 * args.repeats}}  # fmt: skip
            t = time.monotonic()
            bc.custom.create_namespaced_custom_object(G, V, ns, P, body)
            settled(bc, ns, job, args.gang, args.timeout)
            record["first_gang_and_spare_running_s"] = time.monotonic() - t
            print(f"{len(nodes)} KWOK nodes; a {args.gang}-node gang and its spare Running in {record['first_gang_and_spare_running_s']:.1f}s", flush=True)
            taken = 0
            for i in range(args.repeats):
                rank = (37 * i) % args.gang  # a different rank each time, node rank 0 first
                for path in (("spare", "gang") if i % 2 == 0 else ("gang", "spare")):
                    operator.check()
                    if path == "spare":
                        sample = takeover(bc, ns, job, args.gang, rank, taken, args.timeout)
                        taken += 1
                    else:
                        sample = gang_restart(bc, ns, job, args.gang, rank, args.timeout)
                        taken = 0  # a new gang: its own ledger
                    record["samples"].append(sample)
                    print(f"  {path}: {sample}", flush=True)
        except BaseException:
            print("---- operator log tail ----\n" + operator.tail(), file=sys.stderr)
            raise
        finally:
            operator.stop()
    record["machine_after"] = machine()
    spare = [s["taken_s"] for s in record["samples"] if s["path"] == "spare"]
    refill = [s["refilled_s"] for s in record["samples"] if s["path"] == "spare"]
    reader = [s["reader_pass_s"] for s in record["samples"] if s["path"] == "spare"]
    gang = [s["all_running_s"] for s in record["samples"] if s["path"] == "gang"]
    gang_spare = [s["with_spare_s"] for s in record["samples"] if s["path"] == "gang"]
    record["summary"] = {"spare_taken_s": median(spare), "spare_refilled_s": median(refill), "spare_reader_pass_s": median(reader), "gang_all_running_s": median(gang),
                         "gang_with_spare_s": median(gang_spare), "ratio_spare_over_gang": ratio(median(spare), median(gang)),
                         "other_pods_recreated": sum(len(s["other_pods_recreated"]) for s in record["samples"] if s["path"] == "spare")}  # fmt: skip
    s = record["summary"]
    table = Table(f"spare takeover vs gang restart: a {args.gang}-node gang, {len(nodes)} KWOK nodes x {GPUS_PER_NODE} GPUs, {args.repeats} of each (medians)",
                  ["path", "operator's part s", "until", "then the pool refilled s", "pods recreated"])  # fmt: skip
    table.add("spare", fmt_s(s["spare_taken_s"]), f"the rank's pod is the spare, the old pod gone (the reader's pass {fmt_s(s['spare_reader_pass_s'])})",
              fmt_s(s["spare_refilled_s"]), "0 (+1 new spare)")  # fmt: skip
    table.add("gang restart", fmt_s(s["gang_all_running_s"]), "every rank Running again in new pods", fmt_s(s["gang_with_spare_s"]), str(args.gang))
    table.add("ratio spare / gang", fmt_x(s["ratio_spare_over_gang"]), "", "", "")
    table.print()
    print(f"load average before {record['machine_before']['loadavg']}, after {record['machine_after']['loadavg']}")
    record["table"] = table.plain()
    print(f"JSON: {write_json('spare_takeover', record, args.json)}")


if __name__ == "__main__":
    main()
