"""Health checks: detection latency per injected fault, false positives on clean steps, step-time overhead.

Every figure comes from real gangs of trainer processes (one torchrun "node" per rank,
gloo, the ``tiny`` preset on ``pkg://email/*.py``), configured only by the pod contract
(``RAILTRAIN_HEALTH_*``, ``RAILTRAIN_FAULT_*``, ``RAILTRAIN_NODE_NAME``):

* **latency**: for each fault (docs/health.md, "Fault injection") one run with the fault at
  step ``--onset``; the table shows the verdict or log line that caught it, the suspect it
  named, and the steps (and for hangs the seconds) from onset to detection. Default
  intervals unless the row says otherwise (the fingerprint check runs every 50 steps, so a
  parameter flip is found at the next multiple of 50).
* **false positives**: one clean run of ``--clean-steps`` steps with the checks at every
  chance (fingerprints every 5 steps, known-answer test every 50, timing every step); every
  window the straggler detector judged (replayed from the per-rank compute times the run
  recorded, with the trainer's own detector and defaults) and every verdict count.
* **overhead**: ``--pairs`` back-to-back pairs of runs of ``--overhead-steps`` steps, all
  checks on with default intervals against ``RAILTRAIN_HEALTH=0``, alternating which goes
  first; median step time of each run (after 20 warm-up steps), the ratio per pair, and the
  median ratio (goal <= 1.02). Sequential runs on a shared machine differ by the load that
  changed between them, so each "on" run also times its own health work per step (rank 0's
  wall time inside the checks, ``health_s`` in the metrics file) as a share of its step time.

* **hangs**: hang detection time against step time: for each ``--hang-shapes`` shape
  (sequence length x batch, each a different step time) one run whose rank 1 never enters
  step ``--onset``'s collective, with ``hang_floor_s`` = ``--hang-floor``; the seconds from
  the hang to the verdict (the stalled rank's age when the watchdog fired), the median step
  time, and the bound ``max(3 x median step, floor)``; then one gang whose rank 1 never joins
  the process group (``hang_warmup_s`` = ``--init-deadline``): seconds from launch to the verdict.

    python bench/health.py                       # everything (about 15 minutes on 2 busy cores)
    python bench/health.py --only hangs          # detection time vs step time (docs/bench-health.md)
    python bench/health.py --only overhead --pairs 5
    python bench/health.py --clean-steps 40 --overhead-steps 30 --pairs 1 --only latency,clean,overhead   # smoke size
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import Table, fmt_pct, fmt_x, machine, median, ratio, revision, write_json

from railtrain.crds import contract
from railtrain.trainer.health import stats

COMMON = ["--data", "pkg://email/*.py", "--preset", "tiny", "--seq-len", "64", "--warmup-steps", "8", "--threads", "1", "--log-every", "1000000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_gang(workdir: Path, nnodes: int, steps: int, *, health: dict | None = None, faults: contract.Faults | None = None,
             extra_env: dict | None = None, batch: int = 8, timeout: float = 3600, extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """One gang; returns exit codes, rank 0's metrics records, every node's log and termination verdict, wall seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    pod = contract.PodEnvironment(job_name="bench", namespace="default", nnodes=nnodes, node_rank=0, procs_per_node=1, rdzv_addr="127.0.0.1", rdzv_port=_free_port())
    names = {v for k, v in vars(contract).items() if k.startswith("ENV_")} | {contract.health_variable(f) for f in contract.HealthSettings.__dataclass_fields__}
    base = {k: v for k, v in os.environ.items() if k not in names}
    metrics = workdir / "metrics.jsonl"
    procs, terms = [], []
    start = time.monotonic()
    for rank in range(nnodes):
        term = workdir / f"termination-{rank}"
        term.write_text("")
        env = base | contract.pod_env(replace(pod, node_rank=rank, node_name=f"node-{rank}"))
        env |= contract.health_env(contract.health_from_mapping(health or {})) | contract.fault_env(faults or contract.Faults()) | (extra_env or {})
        env[contract.ENV_TERMINATION_MESSAGE_PATH] = str(term)
        cmd = [sys.executable, "-m", "torch.distributed.run", "-m", "railtrain.trainer", *COMMON, "--batch-size", str(batch), "--steps", str(steps), "--metrics-file", str(metrics), *extra_args]
        log = (workdir / f"node{rank}.log").open("w")
        procs.append((subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, text=True), log))
        terms.append(term)
    rcs = []
    for proc, log in procs:
        rcs.append(proc.wait(timeout=timeout))
        log.close()
    wall = time.monotonic() - start
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    logs = [(workdir / f"node{r}.log").read_text() for r in range(nnodes)]
    return {"rcs": rcs, "records": records, "logs": logs, "verdicts": [contract.parse_termination_message(t.read_text()) for t in terms], "wall_s": wall}


def _verdict(run: dict[str, Any]) -> contract.Verdict | None:
    return next((v for v in run["verdicts"] if v is not None), None)


def latency(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """One run per fault; detection step and what was named."""
    s = args.onset
    floor = args.hang_floor
    cases = [
        ("bit flip, parameter, once (3 replicas)", 3, 6, contract.Faults(bitflip=contract.BitFlipFault(rank=1, step=s, bit=0, index=11)), {}),
        ("bit flip, parameter, persistent (2 replicas)", 2, 8, contract.Faults(bitflip=contract.BitFlipFault(rank=1, step=s, mode="persistent", bit=0)), {}),
        ("bit flip, activation, once", 2, 8, contract.Faults(bitflip=contract.BitFlipFault(rank=0, step=s, bit=30, target="activation")), {}),
        ("bad batch (data)", 2, 8, contract.Faults(bad_batch=contract.BadBatchFault(step=s, rank=1)), {}),
        ("slow x1.2", 2, 8, contract.Faults(slow=contract.SlowFault(rank=1, factor=1.2, from_step=s)), {}),
        (f"hang in compute (floor {floor:g}s)", 2, 8, contract.Faults(hang=contract.HangFault(rank=1, step=s, kind="compute")), {"hang_floor_s": floor}),
        (f"hang before a collective (floor {floor:g}s)", 2, 8, contract.Faults(hang=contract.HangFault(rank=1, step=s, kind="collective")), {"hang_floor_s": floor}),
    ]
    out = []
    for name, nnodes, batch, faults, health in cases:
        steps = s + (60 if "parameter" in name else 25)
        run = run_gang(tmp / f"lat-{len(out)}", nnodes, steps, health=health, faults=faults, batch=batch)
        v = _verdict(run)
        row: dict[str, Any] = {"fault": name, "onset": s, "rcs": run["rcs"], "verdict": v}
        if v is not None:
            row |= {"caught_by": f"{v['verdict']} {v['reason']}", "named": f"rank {v['ranks']} node {v['nodes']}", "detected_step": v["step"]}
            if v["verdict"] == contract.VERDICT_HANG:
                row["seconds"] = v["evidence"]["age_s"]
                row["bound_s"] = 3 * (v["evidence"]["median_step_s"] or 0) + floor
        else:
            text = run["logs"][0]
            marker = "straggler rank(s) [1]" if "slow" in name else "data, not hardware"
            hit = next((line for line in text.splitlines() if marker in line), "")
            step = int(hit.split("step ")[1].split(":")[0]) if hit else None
            row |= {"caught_by": ("report: straggler" if "slow" in name else "skip: data") if hit else "MISSED", "named": "rank [1] node ['node-1']" if "slow" in name and hit else "-", "detected_step": step}
        row["latency_steps"] = row["detected_step"] - s if row.get("detected_step") is not None else None
        out.append(row)
        print(f"  {name}: {row.get('caught_by')} at step {row.get('detected_step')} ({row.get('named')})", file=sys.stderr, flush=True)
    return out


def hangs(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Hang detection time vs step time: one hung gang per shape, then one gang stuck before its process group."""
    out = []
    for shape in args.hang_shapes:
        seq, batch = (int(x) for x in shape.split("x"))
        faults = contract.Faults(hang=contract.HangFault(rank=1, step=args.onset, kind="collective"))
        run = run_gang(tmp / f"hang-{shape}", 2, args.onset + 20, health={"hang_floor_s": args.hang_floor}, faults=faults, batch=batch, extra_args=("--seq-len", str(seq)))
        v = _verdict(run)
        row: dict[str, Any] = {"shape": f"seq {seq} x batch {batch}", "rcs": run["rcs"], "verdict": v}
        if v is not None and v["verdict"] == contract.VERDICT_HANG:
            e = v["evidence"]
            med = e["median_step_s"] or 0.0
            row |= {"median_step_s": med, "detected_s": e["age_s"], "deadline_s": e["deadline_s"], "bound_s": max(3 * med, args.hang_floor),
                    "detected_over_step": ratio(e["age_s"], med), "named": f"rank {v['ranks']} node {v['nodes']}"}  # fmt: skip
        out.append(row)
        print(f"  hang, {row['shape']}: {row.get('detected_s')} s at median step {row.get('median_step_s')} s", file=sys.stderr, flush=True)
    faults = contract.Faults(hang=contract.HangFault(rank=1, step=0, kind="init"))
    run = run_gang(tmp / "hang-init", 2, 5, health={"hang_warmup_s": args.init_deadline}, faults=faults)
    v = _verdict(run)
    out.append({"shape": "stuck joining the process group", "rcs": run["rcs"], "verdict": v, "deadline_s": args.init_deadline, "gang_wall_s": run["wall_s"],
                "named": f"rank {v['ranks']} node {v['nodes']}" if v else "-"})  # fmt: skip
    return out


def clean(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """A long clean run with frequent checks: verdicts and straggler windows flagged."""
    health = {"fingerprint_interval": 5, "kat_interval": 50, "timing_interval": 1}
    run = run_gang(tmp / "clean", 2, args.clean_steps, health=health)
    samples = [r["compute_s"] for r in run["records"] if "compute_s" in r][2:]  # the trainer ignores 2 warm-up samples too
    d = contract.HealthSettings()
    det = stats.StragglerDetector(2, d.straggler_threshold, d.straggler_window)
    windows = flagged = 0
    for t in samples:
        det.add(t)
        if len(det.history[0]) == det.window:
            windows += 1
            flagged += bool(det.flagged())
    reports = sum("straggler rank(s)" in line for line in run["logs"][0].splitlines())
    return {
        "steps": len(run["records"]), "rcs": run["rcs"], "verdict": _verdict(run), "straggler_windows": windows, "flagged_windows": flagged,
        "false_positive_rate": ratio(flagged, windows), "straggler_reports_logged": reports,
        "fingerprint_checks": len(run["records"]) // 5, "kat_checks": 1 + len(run["records"]) // 50, "wall_s": run["wall_s"],
    }  # fmt: skip


def overhead(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Alternating pairs: health on (defaults) vs off; median step seconds after 20 warm-up steps."""
    pairs = []
    for i in range(args.pairs):
        order = ["on", "off"] if i % 2 == 0 else ["off", "on"]
        med = {}
        for which in order:
            env = {} if which == "on" else {contract.ENV_HEALTH: "0"}
            run = run_gang(tmp / f"ovh-{i}-{which}", 2, args.overhead_steps, extra_env=env)
            assert run["rcs"] == [0, 0], run["logs"][0][-2000:]
            kept = run["records"][min(20, len(run["records"]) // 2):]
            med[which] = median(r["step_s"] for r in kept)
            if which == "on":
                med["self"] = median(r["health_s"] / r["step_s"] for r in kept)
        pairs.append({"on_s": med["on"], "off_s": med["off"], "ratio": ratio(med["on"], med["off"]), "first": order[0], "self_share": med["self"]})
        print(f"  pair {i}: on {med['on'] * 1e3:.2f} ms off {med['off'] * 1e3:.2f} ms ratio {pairs[-1]['ratio']:.3f} self-timed {med['self']:.4f}", file=sys.stderr, flush=True)
    return {"pairs": pairs, "median_ratio": median(p["ratio"] for p in pairs), "median_self_share": median(p["self_share"] for p in pairs), "steps": args.overhead_steps}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="health.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="latency,clean,overhead,hangs", help="Comma-separated parts: latency, clean, overhead, hangs.")
    parser.add_argument("--hang-shapes", default="64x8,256x8,512x16", help="hangs: comma-separated seq_len x batch shapes, one step time each (default 64x8,256x8,512x16).")
    parser.add_argument("--init-deadline", type=float, default=10.0, help="hangs: hang_warmup_s of the gang stuck joining the process group (default 10; the product default is 600).")
    parser.add_argument("--onset", type=int, default=20, help="Step at which each fault starts (default 20).")
    parser.add_argument("--hang-floor", type=float, default=5.0, help="hang_floor_s of the hang runs (default 5; the product default is 10).")
    parser.add_argument("--clean-steps", type=int, default=2000, help="Steps of the clean run (default 2000).")
    parser.add_argument("--overhead-steps", type=int, default=300, help="Steps per overhead run (default 300).")
    parser.add_argument("--pairs", type=int, default=3, help="On/off pairs (default 3).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/health-<time>.json).")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    bad = [p for p in args.parts if p not in ("latency", "clean", "overhead", "hangs")]
    if bad:
        parser.error(f"--only: unknown part(s) {', '.join(bad)}; allowed: latency, clean, overhead, hangs")
    args.hang_shapes = [x.strip() for x in args.hang_shapes.split(",") if x.strip()]
    if not args.hang_shapes or any(len(x.split("x")) != 2 or not all(p.isdigit() and int(p) > 0 for p in x.split("x")) for x in args.hang_shapes):
        parser.error(f"--hang-shapes must be comma-separated SEQxBATCH pairs of positive integers, e.g. 64x8, got {','.join(args.hang_shapes)!r}")
    if args.onset < 3 or args.clean_steps < 10 or args.overhead_steps < 2 or args.pairs < 1:
        parser.error("--onset must be >= 3, --clean-steps >= 10, --overhead-steps >= 2, --pairs >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = machine()
    record: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"} | {"json": str(args.json)}, "machine_before": before, "revision": revision()}
    with tempfile.TemporaryDirectory(prefix="railtrain-bench-health-") as tmpdir:
        tmp = Path(tmpdir)
        if "latency" in args.parts:
            rows = record["latency"] = latency(args, tmp)
            table = Table("health: detection latency per injected fault (2 ranks unless noted, tiny preset, default intervals)", ["fault", "caught by", "named", "onset", "detected", "latency (steps)", "hang s / bound s"])
            for r in rows:
                hang = f"{r['seconds']:.2f} / {r['bound_s']:.2f}" if "seconds" in r else "-"
                table.add(r["fault"], r["caught_by"], r["named"], r["onset"], r["detected_step"], r["latency_steps"], hang)
            table.print()
        if "hangs" in args.parts:
            rows = record["hangs"] = hangs(args, tmp)
            table = Table(
                f"health: hang detection time vs step time (2 ranks, rank 1 never enters step {args.onset}'s collective; hang_floor_s {args.hang_floor:g})",
                ["gang", "median step (s)", "detected after (s)", "bound max(3 x step, floor) (s)", "detected / step", "named"],
                note=f"last row: rank 1 never joins the process group, hang_warmup_s {args.init_deadline:g}; 'detected after' is the gang's wall time from launch (Python and torch start included)",
            )
            for r in rows:
                if "gang_wall_s" in r:
                    caught = f"{r['verdict']['verdict']} ({r['verdict']['evidence'].get('phase')})" if r["verdict"] else "MISSED"
                    table.add(r["shape"], "-", f"{r['gang_wall_s']:.1f} ({caught})", f"{r['deadline_s']:g} + start", "-", r["named"])
                elif "detected_s" in r:
                    table.add(r["shape"], f"{r['median_step_s']:.3f}", f"{r['detected_s']:.2f}", f"{r['bound_s']:.2f}", fmt_x(r["detected_over_step"]), r["named"])
                else:
                    table.add(r["shape"], "-", "MISSED", "-", "-", "-")
            table.print()
        if "clean" in args.parts:
            c = record["clean"] = clean(args, tmp)
            table = Table(f"health: false positives over {c['steps']} clean steps (fingerprints every 5, KAT every 50, timing every step)", ["measure", "value"])
            table.add("verdicts", "none" if c["verdict"] is None else f"{c['verdict']['verdict']} {c['verdict']['reason']}")
            table.add("exit codes", c["rcs"])
            table.add("straggler windows judged", c["straggler_windows"])
            table.add("windows flagged (false positives)", f"{c['flagged_windows']} ({fmt_pct(c['false_positive_rate'])})")
            table.add("straggler report lines logged", c["straggler_reports_logged"])
            table.add("fingerprint / KAT checks", f"{c['fingerprint_checks']} / {c['kat_checks']}")
            table.print()
        if "overhead" in args.parts:
            o = record["overhead"] = overhead(args, tmp)
            table = Table(
                f"health: step-time overhead, all checks on (default intervals) vs off, {o['steps']} steps per run",
                ["pair", "on (ms)", "off (ms)", "on/off", "health work / step (self-timed, on)"],
                note="self-timed: rank 0's wall time inside the checks (hooks, numeric check, gathers, fingerprints, KAT) over its step time, median over steps",
            )
            for i, p in enumerate(o["pairs"]):
                table.add(i, f"{p['on_s'] * 1e3:.2f}", f"{p['off_s'] * 1e3:.2f}", fmt_x(p["ratio"]), fmt_pct(p["self_share"]))
            table.add("median", "", "", f"{o['median_ratio']:.4f}x", fmt_pct(o["median_self_share"]))
            table.print()
    record["machine_after"] = machine()
    path = write_json("health", record, args.json)
    print(f"load average before {before['loadavg']} after {record['machine_after']['loadavg']}; JSON: {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
