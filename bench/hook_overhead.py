"""Overhead of the per-step hook (:class:`railtrain.trainer.StepHook`): one loop with the hook on and off, interleaved.

For each configuration (a model preset from ``trainer/presets.py`` times a process count: one process, or a
gloo gang of two DDP ranks under torchrun) one worker process builds two identical copies of the preset's
model (same seed; DDP-wrapped when distributed), each with its own AdamW, and drives them with the same plain
loop (a pool of fixed random token batches, forward, ``lm_loss``, backward, ``clip_grad_norm_``,
``optimizer.step``, ``zero_grad``). Only the **on** copy has a ``StepHook`` (contract read from the
environment, the defaults a user gets: every check on, ``HealthSettings`` default intervals) and calls
``begin_step``/``after_forward``/``check``/``end_step`` every step (``--after-forward off``: no ``after_forward``); the **off** copy calls nothing. After ``--warmup`` untimed
steps of each, the two run ``--pairs`` pairs of blocks of ``--block-steps`` steps, alternating which block
of a pair goes first (off/on, on/off, ...), so the machine's noise hits both arms alike; every step is timed
on rank 0 (``perf_counter``, the hook's calls included). The table shows per arm the median step time, and
the on/off ratio as the median over pairs of each pair's ratio of block medians, with its interquartile
range, plus the same for block means (means include the scheduled checks when they fall in the block).

What ran is read from the hook itself (``railtrain_health_checks_total{check}``, the watchdog thread). The
on copy's hook numbers its steps on, across its blocks, so the fingerprint (every 50 steps) and the
known-answer test (at start and every 500 steps) run on their schedule; between its blocks the hook is
parked in phase ``checkpoint`` (``StepHook.phase``) so its hang watchdog, which keeps polling through both
arms, allows the off block its length. The watchdog thread's own CPU time is reported as a share of the
process's, since the ratio cannot see it. Before the timed steps the garbage of building both copies is collected and
frozen (``--gc freeze``, default): left alone, one full collection of it (about 170 ms on ``tiny``) lands in whichever
arm's step tips it; full collections during the timed steps are counted per arm. ``--repeats`` runs every
configuration again in rounds; the last table gives per configuration the median of its runs and all its pairs pooled.

    python bench/hook_overhead.py                                   # tiny and small, 1 process and 2 gloo processes
    python bench/hook_overhead.py --presets tiny --procs 1 --pairs 40
    python bench/hook_overhead.py --repeats 3                       # every configuration 3 times; the verdict pools their pairs
    python bench/hook_overhead.py --report bench/results/hook_overhead-20261205.json   # the tables of a record again
    python bench/hook_overhead.py --presets tiny --procs 1 --pairs 2 --block-steps 2 --warmup 1 --seq-len 16 --batch-size 2   # smoke size
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Table, fmt_pct, machine, median, ratio, write_json

REPO = Path(__file__).resolve().parents[1]
CHECKS = ("numeric", "timing", "fingerprint", "known_answer")
"""The detectors ``railtrain_health_checks_total`` counts (trainer/health/metrics.py)."""


# --- worker: one configuration, alone or under torchrun ----------------------------------------


def thread_cpu_s(native_id: int | None) -> float:
    """CPU seconds (user + system) of one thread of this process, from /proc; NaN when unreadable."""
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    except (OSError, TypeError):
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: state is field 3, utime 14, stime 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Arm:
    """One copy of the preset's model, its optimizer and the plain loop; with a ``StepHook`` when ``hooked``."""

    def __init__(self, args: argparse.Namespace, contract: Any, batches: list[Any], hooked: bool) -> None:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        import railtrain.trainer as rt
        from railtrain.trainer.model import PRESETS, Transformer, lm_loss

        self.torch, self.lm_loss, self.batches = torch, lm_loss, batches
        config = PRESETS[args.preset]
        torch.manual_seed(0)
        self.model = Transformer(config)
        self.wrapped = DistributedDataParallel(self.model) if contract.distributed else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        total = args.warmup + args.pairs * args.block_steps
        self.hook = (
            rt.StepHook(self.wrapped, contract, total_steps=total, tokens_per_step=args.batch_size * args.seq_len, flops_per_token=config.flops_per_token(args.seq_len))
            if hooked else None
        )  # fmt: skip
        self.step = 0
        self.after_forward = args.after_forward == "on"
        self.after_forward_s = 0.0

    def forward_backward(self, inputs: Any, targets: Any, step: int = 0) -> Any:
        """Zero the gradients, forward and backward on one batch; the detached local loss.

        With a hook, ``step`` > 0 and ``--after-forward on``, the hook's ``after_forward`` starts its loss all-reduce
        between the two (what docs/library.md's loop does); the re-execution (``step`` 0) does not call it."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.lm_loss(self.wrapped(inputs), targets)
        if self.hook is not None and step and self.after_forward:
            t0 = time.perf_counter()
            self.hook.after_forward(step, loss)
            self.after_forward_s += time.perf_counter() - t0
        loss.backward()
        return loss.detach()

    def run(self, steps: int) -> tuple[list[float], list[float], list[float]]:
        """``steps`` optimizer steps; each step's wall seconds, process CPU seconds, and wall seconds in the hook's calls."""
        torch, hook = self.torch, self.hook
        times, cpu, in_hook = [], [], []
        for _ in range(steps):
            self.step += 1
            step, inputs, targets = self.step, *self.batches[self.step % len(self.batches)]
            c0, t0 = time.process_time(), time.perf_counter()
            h = 0.0
            if hook is not None:
                hook.begin_step(step)
                h += time.perf_counter() - t0
            self.after_forward_s = 0.0
            loss = self.forward_backward(inputs, targets, step)
            h += self.after_forward_s
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            skip = False
            if hook is not None:
                t1 = time.perf_counter()
                _, skip = hook.check(step, loss, grad_norm, lambda: self.forward_backward(inputs, targets))
                h += time.perf_counter() - t1
            if not skip:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if hook is not None:
                t1 = time.perf_counter()
                hook.end_step(step, t1 - t0)
                h += time.perf_counter() - t1
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            in_hook.append(h)
        if hook is not None:
            hook.phase(step, "checkpoint")  # parked: the watchdog allows the other arm's block (a slow phase)
        return times, cpu, in_hook

    def what_ran(self) -> dict[str, Any]:
        """The hook's check counters, internal errors, skipped batches, settings and watchdog thread (alive, CPU s)."""
        hook = self.hook
        registry = hook.metrics.registry
        counts = {c: int(registry.get_sample_value("railtrain_health_checks_total", {"check": c}) or 0) for c in CHECKS}
        errors = sum(s.value for m in hook.internal_errors.collect() for s in m.samples if s.name.endswith("_total"))
        watchdog = hook.monitor.watchdog
        return {
            "checks": counts, "internal_errors": int(errors), "skipped_batches": hook.skipped,
            "health_enabled": hook.contract.health_enabled, "settings": dataclasses.asdict(hook.contract.health),
            "watchdog_alive": bool(watchdog is not None and watchdog.is_alive()),
            "watchdog_cpu_s": thread_cpu_s(watchdog.native_id) if watchdog is not None else 0.0,
            "metrics_port": hook.contract.metrics_port,
        }  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    """Run one configuration's interleaved blocks; rank 0 writes its samples to ``--out``."""
    import torch
    import torch.distributed as dist

    import railtrain.trainer as rt

    torch.set_num_threads(args.threads)
    contract = rt.read_contract()
    if contract.distributed:
        dist.init_process_group("gloo")
    try:
        local = args.batch_size // contract.world_size
        gen = torch.Generator().manual_seed(1234 + contract.rank)
        pool = [torch.randint(0, 256, (local, args.seq_len + 1), generator=gen) for _ in range(8)]
        batches = [(t[:, :-1], t[:, 1:]) for t in pool]
        arms = {"off": Arm(args, contract, batches, hooked=False), "on": Arm(args, contract, batches, hooked=True)}
        t0 = time.perf_counter()
        arms["on"].hook.start()  # node names, the first known-answer test, the watchdog (timed: the KAT's cost)
        start_s = time.perf_counter() - t0
        for arm in arms.values():
            arm.run(args.warmup)
        samples: dict[str, list[list[float]]] = {"off": [], "on": [], "off_cpu": [], "on_cpu": [], "on_hook": []}
        if args.gc == "freeze":
            gc.collect()  # the garbage of building both copies, collected now rather than in whichever arm tips it
            gc.freeze()
        running = {"arm": "", "t0": 0.0}
        full_gc: dict[str, list[float]] = {"on": [], "off": []}

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                running["t0"] = time.perf_counter()
            elif info["generation"] == 2 and running["arm"]:
                full_gc[running["arm"]].append(time.perf_counter() - running["t0"])

        gc.callbacks.append(on_gc)
        cpu0, wd0 = time.process_time(), arms["on"].what_ran()["watchdog_cpu_s"]
        for pair in range(args.pairs):
            for name in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                running["arm"] = name
                times, cpu, in_hook = arms[name].run(args.block_steps)
                running["arm"] = ""
                samples[name].append(times)
                samples[f"{name}_cpu"].append(cpu)
                if name == "on":
                    samples["on_hook"].append(in_hook)
        gc.callbacks.remove(on_gc)
        ran = arms["on"].what_ran()
        ran["watchdog_cpu_share"] = ratio(ran["watchdog_cpu_s"] - wd0, time.process_time() - cpu0)
        arms["on"].hook.close()
        if contract.rank == 0:
            record = {
                "preset": args.preset, "procs": contract.world_size, "steps_per_arm": args.pairs * args.block_steps,
                "warmup_steps": args.warmup, "block_steps": args.block_steps, "pairs": args.pairs,
                "params": sum(p.numel() for p in arms["on"].model.parameters()),
                "off_s": samples["off"], "on_s": samples["on"], "off_cpu_s": samples["off_cpu"], "on_cpu_s": samples["on_cpu"],
                "on_hook_calls_s": samples["on_hook"], "start_s": start_s, "hook": ran,
                "full_gc_s": full_gc,
            }  # fmt: skip
            Path(args.out).write_text(json.dumps(record))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# --- driver ------------------------------------------------------------------------------------


PASSED = ("preset", "batch_size", "seq_len", "threads", "block_steps", "pairs", "warmup", "after_forward", "gc")
"""Flags the driver hands on to every worker."""


def run_config(args: argparse.Namespace, preset: str, procs: int, out: Path) -> dict[str, Any]:
    """Launch the worker of one configuration (alone, or torchrun with ``procs`` processes) and return its record.

    Raises:
        RuntimeError: the worker failed (the end of its output is in the message).
    """
    values = vars(args) | {"preset": preset}
    worker_args = [
        str(Path(__file__).resolve()), "--worker", "--out", str(out),
        *(a for k in PASSED for a in (f"--{k.replace('_', '-')}", str(values[k]))),
    ]  # fmt: skip
    if procs == 1:
        cmd = [sys.executable, *worker_args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs), *worker_args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAILTRAIN_")}  # a user's defaults, outside the operator
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "bench"), env.get("PYTHONPATH", "")]))
    env["OMP_NUM_THREADS"] = str(args.threads)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{preset} x {procs} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def quartiles(values: list[float]) -> list[float]:
    """First and third quartile (``statistics.quantiles``, inclusive); the value twice when there is one."""
    if len(values) < 2:
        return [values[0], values[0]] if values else [float("nan")] * 2
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [q[0], q[2]]


def pair_ratios(on: list[list[float]], off: list[list[float]], stat: Any = median) -> list[float]:
    """Per pair of blocks (run back to back): ``stat`` of the on block over ``stat`` of the off block."""
    return [ratio(stat(a), stat(b)) for a, b in zip(on, off)]


def median_ci(values: list[float], z: float = 1.96) -> list[float]:
    """Distribution-free 95% confidence interval of the median: the order statistics of ranks ``n/2 -+ z*sqrt(n)/2``
    (the binomial approximation; Conover, *Practical Nonparametric Statistics*, 3.2); the range below 3 values."""
    v = sorted(values)
    if len(v) < 3:
        return [v[0], v[-1]] if v else [float("nan")] * 2
    n, half = len(v), z * math.sqrt(len(v)) / 2
    return [v[max(math.floor(n / 2 - half), 1) - 1], v[min(math.ceil(1 + n / 2 + half), n) - 1]]


def summarize(rec: dict[str, Any]) -> dict[str, Any]:
    """Medians of both arms and the on/off ratios of one configuration's record.

    ``wall``: per pair, the median on-step wall time over the median off-step wall time of the pair's two blocks
    (which ran back to back, under the same load); its median over pairs and interquartile range. ``wall_means``:
    the same with block means (these include the scheduled checks of the steps in the block). ``cpu``: as ``wall``
    with each step's process CPU time (all threads), which other processes' load barely moves. ``amortized``: all
    timed on-steps' wall time over all off-steps'. ``hook_calls_share``: median over on-steps of the wall time inside
    ``begin_step``/``check``/``end_step`` (forward hooks not included) over the step's.
    """
    on, off = rec["on_s"], rec["off_s"]
    flat_on, flat_off = [x for b in on for x in b], [x for b in off for x in b]
    shares = [h / s for hb, sb in zip(rec["on_hook_calls_s"], on) for h, s in zip(hb, sb) if s > 0]
    out = {"off_median_s": median(flat_off), "on_median_s": median(flat_on), "steps_on": len(flat_on), "steps_off": len(flat_off)}
    for name, ratios in (("wall", pair_ratios(on, off)), ("wall_means", pair_ratios(on, off, statistics.fmean)), ("cpu", pair_ratios(rec["on_cpu_s"], rec["off_cpu_s"]))):
        out[name] = {"median": median(ratios), "iqr": quartiles(ratios), "ci95": median_ci(ratios)}
    return out | {"amortized": ratio(sum(flat_on), sum(flat_off)), "hook_calls_share": median(shares)}


def fmt_ratio(r: dict[str, Any]) -> str:
    """``1.004 [0.961-1.043] (1.001-1.009)``: a median ratio, its interquartile range and the median's 95% interval."""
    if r["median"] != r["median"]:
        return "-"
    (q1, q3), (lo, hi) = r["iqr"], r["ci95"]
    return f"{r['median']:.3f} [{q1:.3f}-{q3:.3f}] ({lo:.3f}-{hi:.3f})"


def table(args: argparse.Namespace, records: list[dict[str, Any]]) -> Table:
    """The results table: one row per configuration."""
    t = Table(
        f"StepHook overhead: batch {args.batch_size} x {args.seq_len} tokens, CPU, {args.threads} thread(s)/process; "
        f"{args.pairs} interleaved pairs x {args.block_steps} steps per arm after {args.warmup} warm-up steps; after_forward {args.after_forward}",
        ["preset", "procs", "run", "off ms", "on ms", "on/off wall [IQR] (95% CI)", "on/off CPU [IQR] (95% CI)", "amortized", "in hook calls", "checks run (numeric/timing/fingerprint/KAT)", "watchdog CPU", "full GCs on/off"],
        note="off/on ms: median step wall time; on/off: median over pairs of the ratio of the pair's two blocks (run back to back) of median step "
        "wall time, of median step process CPU time, with the ratios' interquartile range and the median's 95% interval; amortized: all on-steps' "
        "wall time over all off-steps'; in hook calls: begin_step+check+end_step wall time over step time (median; forward hooks excluded); "
        "watchdog CPU: its thread's share of the process CPU time (paid by both arms); full GCs: Python's generation-2 "
        "collections during each arm's timed steps (count, seconds)",
    )  # fmt: skip
    for rec in records:
        s, ran = rec["summary"], rec["hook"]
        checks = "/".join(str(ran["checks"][c]) for c in CHECKS)
        watchdog = fmt_pct(ran["watchdog_cpu_share"]) if ran["watchdog_alive"] else "not running"
        t.add(
            rec["preset"], rec["procs"], rec["run"], f"{1000 * s['off_median_s']:.2f}", f"{1000 * s['on_median_s']:.2f}", fmt_ratio(s["wall"]),
            fmt_ratio(s["cpu"]), f"{s['amortized']:.3f}", fmt_pct(s["hook_calls_share"]), checks, watchdog,
            " / ".join(f"{len(rec['full_gc_s'][a])} ({sum(rec['full_gc_s'][a]):.2f} s)" for a in ("on", "off")),
        )  # fmt: skip
    return t


def over_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (preset, procs), the median over its runs of each run's median ratios and amortized ratio."""
    out = []
    for key in dict.fromkeys((r["preset"], r["procs"]) for r in records):
        config = [r for r in records if (r["preset"], r["procs"]) == key]
        runs = [r["summary"] for r in config]
        out.append({
            "preset": key[0], "procs": key[1], "runs": len(runs),
            **{f"{name}_median": median([r[name]["median"] for r in runs]) for name in ("wall", "cpu")},
            **{f"{name}_runs": [r[name]["median"] for r in runs] for name in ("wall", "cpu")},
            "amortized_median": median([r["amortized"] for r in runs]),
            **pooled(config),
        })  # fmt: skip
    return out


def pooled(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every pair of every run of one configuration taken together: the median pair ratio (wall, CPU) with its 95%
    interval (:func:`median_ci`), and all runs' on-steps' wall time over all their off-steps' (amortized)."""
    out: dict[str, Any] = {}
    for name, on, off in (("wall", "on_s", "off_s"), ("cpu", "on_cpu_s", "off_cpu_s")):
        ratios = [x for r in records for x in pair_ratios(r[on], r[off])]
        out[f"{name}_pooled"] = {"pairs": len(ratios), "median": median(ratios), "ci95": median_ci(ratios)}
    total = lambda key: sum(x for r in records for block in r[key] for x in block)  # noqa: E731
    return out | {"amortized_pooled": ratio(total("on_s"), total("off_s"))}


def runs_table(rows: list[dict[str, Any]]) -> Table:
    """The verdict table: one row per configuration, medians over its runs."""
    t = Table(
        "Over runs (each configuration's runs spread over the invocation)",
        ["preset", "procs", "runs", "on/off wall (each run)", "on/off CPU (each run)", "amortized", "pairs", "pooled wall (95% CI)",
         "pooled CPU (95% CI)", "pooled amortized", "overhead (pooled wall)"],
        note="the median over runs of each run's median pair ratio (each run's value in brackets) and of its amortized ratio; pooled: "
        "every pair of every run together, the median pair ratio and its 95% interval, and all on-steps' time over all off-steps'; "
        "overhead: the pooled wall median minus 1",
    )  # fmt: skip
    for r in rows:
        each = lambda name: f"{r[name + '_median']:.3f} [{', '.join(f'{v:.3f}' for v in r[name + '_runs'])}]"  # noqa: E731
        pool = lambda name: f"{r[name + '_pooled']['median']:.4f} ({r[name + '_pooled']['ci95'][0]:.4f}-{r[name + '_pooled']['ci95'][1]:.4f})"  # noqa: E731
        t.add(r["preset"], r["procs"], r["runs"], each("wall"), each("cpu"), f"{r['amortized_median']:.3f}", r["wall_pooled"]["pairs"],
              pool("wall"), pool("cpu"), f"{r['amortized_pooled']:.4f}", fmt_pct(r["wall_pooled"]["median"] - 1))  # fmt: skip
    return t


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a bad value is one sentence from argparse and exit code 2."""
    parser = argparse.ArgumentParser(prog="hook_overhead.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny,small", help="Comma-separated model presets (default tiny,small).")
    parser.add_argument("--procs", default="1,2", help="Comma-separated process counts: 1 (alone) or more (gloo under torchrun) (default 1,2).")
    parser.add_argument("--batch-size", type=int, default=8, help="Global batch in sequences, split over the processes (default 8).")
    parser.add_argument("--seq-len", type=int, default=128, help="Tokens per sequence (default 128).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process (default 1).")
    parser.add_argument("--block-steps", type=int, default=1, help="Steps of one arm's block (default 1: the arms alternate every step).")
    parser.add_argument("--pairs", type=int, default=200, help="Interleaved pairs of blocks (default 200).")
    parser.add_argument("--warmup", type=int, default=5, help="Untimed steps of each arm first (default 5; the hook's start runs in them).")
    parser.add_argument("--after-forward", choices=("on", "off"), default="on",
                        help="The on copy calls StepHook.after_forward between forward and backward, as docs/library.md's loop does "
                        "(on, default), or leaves the loss all-reduce to check (off: the loop before that call existed).")
    parser.add_argument("--repeats", type=int, default=1, help="Runs of every configuration, in rounds over all of them (default 1).")
    parser.add_argument("--gc", choices=("freeze", "as-is"), default="freeze",
                        help="Before the timed steps, collect and freeze (gc.freeze) what building both copies left (freeze, "
                        "default), so that one full collection of startup garbage does not land in one arm's step; as-is: leave it.")
    parser.add_argument("--report", type=Path, default=None, help="Print the tables of a JSON record this script wrote earlier; run nothing.")
    parser.add_argument("--timeout", type=float, default=3600, help="Seconds one configuration may take (default 3600).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/hook_overhead-<time>.json).")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--preset", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    from railtrain.trainer.presets import PRESETS

    args.preset_list = [p for p in args.presets.split(",") if p]
    unknown = [p for p in args.preset_list if p not in PRESETS]
    if unknown or not args.preset_list:
        parser.error(f"--presets: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(PRESETS)}")
    try:
        args.proc_list = [int(p) for p in args.procs.split(",") if p]
    except ValueError:
        parser.error(f"--procs must be comma-separated integers >= 1, got {args.procs!r}")
    if not args.proc_list or min(args.proc_list) < 1 or any(args.batch_size % p for p in args.proc_list):
        parser.error(f"--procs must be integers >= 1 that divide --batch-size {args.batch_size}, got {args.procs!r}")
    if min(args.block_steps, args.pairs, args.batch_size, args.seq_len, args.threads, args.repeats) < 1 or args.warmup < 0:
        parser.error("--block-steps, --pairs, --batch-size, --seq-len, --threads and --repeats must be >= 1, --warmup >= 0")
    return args


def print_tables(args: argparse.Namespace, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Print the per-run table and the over-runs table of ``records`` (each with its ``summary``); returns :func:`over_runs`."""
    table(args, records).print()
    verdict = over_runs(records)
    runs_table(verdict).print()
    return verdict


def report(path: Path) -> None:
    """Print the tables of the JSON record at ``path`` (written by an earlier run) with this script's summaries.

    Raises:
        SystemExit: the file is missing or not a record of this benchmark (one sentence, exit code 1).
    """
    try:
        record = json.loads(path.read_text())
        records, params = record["configs"], argparse.Namespace(**record["params"])
        for rec in records:
            rec.setdefault("run", 1)
            rec.setdefault("full_gc_s", {"on": [], "off": []})
            rec["summary"] = summarize(rec)
        print_tables(params, records)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"hook_overhead.py: --report {path}: not a record of this benchmark ({type(err).__name__}: {err})") from None
    print(f"load average before {record['machine_before']['loadavg']} after {record['machine_after']['loadavg']}")


def main(argv: list[str] | None = None) -> None:
    """As the driver: every configuration, the table, the JSON record; as ``--worker``: one configuration."""
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    if args.report is not None:
        report(args.report)
        return
    before = machine()
    started = time.perf_counter()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(1, args.repeats + 1):
            for preset in args.preset_list:
                for procs in args.proc_list:
                    rec = run_config(args, preset, procs, Path(tmp) / f"{preset}-{procs}-{run}.json")
                    rec["run"] = run
                    rec["summary"] = summarize(rec)
                    records.append(rec)
    verdict = print_tables(args, records)
    after = machine()
    print(f"load average before {before['loadavg']} after {after['loadavg']}")
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("worker", "preset", "out")}
    record = {"machine_before": before, "machine_after": after, "params": params, "elapsed_s": round(time.perf_counter() - started, 2), "configs": records, "over_runs": verdict}
    path = write_json("hook_overhead", record, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
