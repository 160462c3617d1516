"""The operator SIGKILLed while gangs are admitted, at the scenario's full size: 20 kills while 20 gangs ask 300 GPUs of 80.

The scenario and every check it makes live in ``tests/operator/test_kill_chaos_cluster.py``; the suite runs it
at its smoke size (8 kills, 8 gangs), and this script runs the same module with ``$RAILTRAIN_CHAOS_SCALE=full``
(about 2 minutes on 2 cores, plus the control plane's start), once per ``--seeds`` entry. Each run passes or
fails on the module's own assertions; the table shows, per seed, the outcome, the wall time and the module's
summary line (kills taken over by a standby, pod events checked, peak GPUs per node, ...). Imports nothing of
railtrain: it starts ``pytest`` in a subprocess, which starts its own control plane (``tests/conftest.py``).

    python bench/kill_chaos.py                       # full size, seed 16
    python bench/kill_chaos.py --seeds 16,17,18      # three seeds, one after another
    python bench/kill_chaos.py --scale smoke         # the suite's size
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

from harness import Table, machine, write_json

REPO = Path(__file__).resolve().parents[1]
MODULE = "tests/operator/test_kill_chaos_cluster.py"
SUMMARY = re.compile(r"^\d+ kills \(.*$", re.MULTILINE)
"""The summary line the test prints (``20 kills (11 taken over by a standby, ...``)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--scale", choices=("full", "smoke"), default="full", help="the scenario's size (tests/operator/test_kill_chaos_cluster.py SCALES)")
    p.add_argument("--seeds", default="16", help="comma-separated $RAILTRAIN_CHAOS_SEED values, one run each")
    p.add_argument("--timeout", type=float, default=1200, help="seconds one run may take before it is stopped")
    p.add_argument("--json", type=Path, default=None, help="where to write the JSON record (default bench/results/kill_chaos-<time>.json)")
    args = p.parse_args(argv)
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    return args


def run_once(scale: str, seed: int, timeout: float) -> dict[str, Any]:
    """Run the module once; returns ``{"seed", "passed", "seconds", "summary", "tail"}`` (``tail``: the output's end on failure)."""
    env = {**os.environ, "RAILTRAIN_CHAOS_SCALE": scale, "RAILTRAIN_CHAOS_SEED": str(seed)}
    cmd = [sys.executable, "-m", "pytest", MODULE, "-q", "-s", "-p", "no:cacheprovider"]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    found = SUMMARY.search(proc.stdout)
    return {
        "seed": seed, "passed": proc.returncode == 0, "seconds": round(time.monotonic() - began, 1),
        "summary": found.group(0) if found else None, "tail": None if proc.returncode == 0 else (proc.stdout + proc.stderr)[-6000:],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = machine()
    runs = [run_once(args.scale, seed, args.timeout) for seed in args.seed_list]
    table = Table(f"Operator SIGKILLed while gangs are admitted ({args.scale} size; wall time includes the control plane's start)",
                  ["seed", "outcome", "seconds", "summary"])  # fmt: skip
    for r in runs:
        table.add(r["seed"], "passed" if r["passed"] else "FAILED", f"{r['seconds']:.1f}", r["summary"] or "-")
    table.print()
    for r in runs:
        if r["tail"]:
            print(f"\nseed {r['seed']} failed; the end of its output:\n{r['tail']}", file=sys.stderr)
    record = {"parameters": {"scale": args.scale, "seeds": args.seed_list}, "machine_before": before, "machine_after": machine(),
              "runs": runs, "table": table.plain()}  # fmt: skip
    print(f"wrote {write_json('kill_chaos', record, args.json)}")
    return 0 if all(r["passed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
