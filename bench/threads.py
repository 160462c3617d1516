"""CPU threads of one training process, idle and on a busy machine (issue 25, item 7; crds/threads.py).

The tiny example as 1 node × 1 process (``python -m railtrain.trainer``, the
tiny preset on Python's email sources, ``--steps`` steps) under three settings:

* ``default``: no thread variables: torch's default (the machine's cores) and OpenMP's default wait
  (GNU OpenMP spins about 300,000 times at each barrier before sleeping);
* ``omp1``: ``OMP_NUM_THREADS=1``, what torchrun sets for several processes per node;
* ``railtrain``: what ``railtrain run --local`` renders for this gang (``RAILTRAIN_THREADS=auto``,
  ``RAILTRAIN_CPU_SHARERS=1``, ``OMP_WAIT_POLICY=PASSIVE``): the trainer takes this process's CPUs
  (affinity capped by the cgroup quota) ÷ 1 threads, whose idle threads sleep at once.

each ``idle`` (no synthetic load; other work on the machine is recorded as
its load average) and ``loaded`` (``--load-per-cpu`` busy-loop processes per
CPU, started before and stopped after the loaded block). The settings are
interleaved ``--repeats`` times within each condition. A run's figure is the
median tokens/s of its steps after the first (step 1 builds caches); the
table shows the median over repeats and each setting's ratio to the best
setting of the same condition; the JSON record keeps every step's figure.

    python bench/threads.py                                   # 10 steps, 5 repeats, 6 busy loops per CPU
    python bench/threads.py --settings railtrain --steps 2 --repeats 1 --load-per-cpu 0.5 --batch-size 2 --seq-len 32   # the smoke test's size
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import Table, fmt_x, machine, median, ratio, write_json

REPO = Path(__file__).resolve().parents[1]
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "omp1": {"OMP_NUM_THREADS": "1"},
    "railtrain": {"RAILTRAIN_THREADS": "auto", "RAILTRAIN_CPU_SHARERS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}
"""Each setting's variables; every other thread variable of this environment is removed."""
CLEARED = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS", "RAILTRAIN_THREADS", "RAILTRAIN_CPU_SHARERS")
TOKENS = re.compile(r"^step=(\d+) .*tokens_per_s=([0-9.]+)", re.MULTILINE)
THREADS = re.compile(r"^threads: (\d+) per process", re.MULTILINE)
WORST_LOSS = 0.20
"""The setting railtrain renders may lose at most this share against the better of the others, idle and loaded."""


def run_once(setting: str, steps: int, workdir: Path, size: list[str] | None = None) -> dict[str, Any]:
    """One trainer run under ``setting`` (``size``: extra trainer flags): its per-step tokens/s, the median after step 1, the threads it chose."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED} | SETTINGS[setting]
    argv = [sys.executable, "-m", "railtrain.trainer", "--preset", "tiny", "--data", "pkg://email/*.py", "--steps", str(steps),
            "--log-every", "1", "--no-health", *(size or [])]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise SystemExit(f"the trainer failed under {setting}: {proc.stderr[-2000:]}")
    per_step = {int(s): float(t) for s, t in TOKENS.findall(proc.stdout)}
    after_first = [t for s, t in sorted(per_step.items()) if s > 1] or list(per_step.values())
    chosen = THREADS.search(proc.stdout)
    return {"setting": setting, "tokens_per_s": median(after_first), "per_step": per_step, "wall_s": round(time.monotonic() - started, 2),
            "threads": int(chosen.group(1)) if chosen else None}  # fmt: skip


def busy_loops(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that spin on a CPU until killed (the synthetic load)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the JSON record (``within_bound``: railtrain's setting lost at most 20%). Returns 0."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="Training steps per run (the first is not counted).")
    p.add_argument("--repeats", type=int, default=5, help="Runs of each setting per condition, interleaved.")
    p.add_argument("--load-per-cpu", type=float, default=6.0, help="Busy-loop processes per CPU in the loaded condition.")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"Comma-separated settings to run, of {', '.join(SETTINGS)}.")
    p.add_argument("--batch-size", type=int, default=None, help="The trainer's --batch-size (default: the trainer's, 8).")
    p.add_argument("--seq-len", type=int, default=None, help="The trainer's --seq-len (default: the trainer's, 128).")
    p.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/threads-<time>.json).")
    args = p.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    if unknown := [s for s in settings if s not in SETTINGS]:
        p.error(f"--settings: unknown {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    size = [*(["--batch-size", str(args.batch_size)] if args.batch_size else []), *(["--seq-len", str(args.seq_len)] if args.seq_len else [])]
    cpus = len(os.sched_getaffinity(0))
    loops = max(1, round(args.load_per_cpu * cpus))
    samples: list[dict[str, Any]] = []
    workdir = Path(os.environ.get("TMPDIR", "/tmp"))
    for condition in ("idle", "loaded"):
        load = busy_loops(loops) if condition == "loaded" else []
        try:
            time.sleep(1.0 if load else 0.0)
            for rep in range(args.repeats):
                for setting in settings:
                    before = machine()["loadavg"]
                    sample = run_once(setting, args.steps, workdir, size) | {"condition": condition, "repeat": rep, "loadavg_before": before}
                    samples.append(sample)
                    print(f"{condition} {setting} #{rep}: {sample['tokens_per_s']:.1f} tokens/s (threads {sample['threads']}, load {before})", file=sys.stderr, flush=True)
        finally:
            for proc in load:
                proc.kill()
                proc.wait()
    table = Table(f"1 node × 1 process, tiny preset, {args.steps} steps: median tokens/s of {args.repeats} runs ({cpus} CPUs; loaded: {loops} busy loops)",
                  ["condition", "setting", "tokens/s", "vs best", "threads"])  # fmt: skip
    summary: dict[str, Any] = {}
    for condition in ("idle", "loaded"):
        medians = {s: median(x["tokens_per_s"] for x in samples if x["condition"] == condition and x["setting"] == s) for s in settings}
        best = max(medians.values())
        summary[condition] = {s: {"tokens_per_s": round(m, 1), "vs_best": round(ratio(m, best), 3)} for s, m in medians.items()}
        for s, m in medians.items():
            threads = sorted({x["threads"] for x in samples if x["condition"] == condition and x["setting"] == s and x["threads"]})
            table.add(condition, s, f"{m:.0f}", fmt_x(ratio(m, best)), ",".join(map(str, threads)) or "-")
    worst = min((summary[c]["railtrain"]["vs_best"] for c in summary if "railtrain" in summary[c]), default=float("nan"))
    table.note = f"railtrain's setting: at worst {worst:.2f}x the best setting of its condition (bound: {1 - WORST_LOSS:.2f}x)"
    table.print()
    path = write_json("threads", {"cpus": cpus, "busy_loops": loops, "steps": args.steps, "repeats": args.repeats, "machine_end": machine(),
                                  "summary": summary, "worst_vs_best": worst,
                                  "within_bound": worst >= 1 - WORST_LOSS, "samples": samples}, args.json)  # fmt: skip
    print(f"JSON: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
