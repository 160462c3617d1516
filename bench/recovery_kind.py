"""A killed rank on kind with real pods: restarted in place vs the whole gang restarted, paired (issue 29).

Runs ``e2e/scene_inplace_pairs.py`` (the kind cluster of the e2e suite: 1 control plane and 3 workers, the chart
installed, built offline) with ``--pairs`` pairs. Each pair runs the same 2-node tiny job twice with the same fault,
rank 1's trainer worker killed at step >= 40: once with ``runPolicy.restartInPlace`` (the processes restart inside the
running pods) and once without (every pod deleted and created again), alternating which goes first. The time of each
is from the kill to the first step rank 0 logs in the next attempt. The table gives each pair's two times and their
ratio, and the medians; the JSON record holds every sample, the steps lost and the machine's load.

Run from the repository root (Docker must run; the first run builds the images, about 7 minutes)::

    python bench/recovery_kind.py --pairs 5
    python bench/recovery_kind.py --pairs 5 --parse saved-output.txt   # the table and record again from a run's output
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import Table, fmt_s, fmt_x, machine, median, ratio, write_json

REPO = Path(__file__).resolve().parents[1]
SCENE = "e2e/scene_inplace_pairs.py"


def pairs_in(output: str) -> list[dict[str, Any]]:
    """The ``PAIR {json}`` lines the scene printed (pytest's progress dot may precede one), in order; lines that are not
    complete pairs are left out."""
    out = []
    for line in output.splitlines():
        if "PAIR {" in line:  # pytest's progress dot may come first on the line
            try:
                pair = json.loads(line[line.index("PAIR {") + 5:])
            except ValueError:
                continue
            if isinstance(pair, dict) and "in-place" in pair and "gang" in pair:
                out.append(pair)
    return out


def summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over ``pairs`` of each path's seconds and of the per-pair ratio in place / gang, and the steps each
    path lost (the step at the kill minus the step it resumed at, median)."""
    ratios = [ratio(p["in-place"]["seconds"], p["gang"]["seconds"]) for p in pairs]
    lost = {path: median(p[path]["killed_at_step"] - p[path]["resumed_step"] for p in pairs) for path in ("in-place", "gang")}
    return {"pairs": len(pairs), "in_place_p50_s": median(p["in-place"]["seconds"] for p in pairs),
            "gang_p50_s": median(p["gang"]["seconds"] for p in pairs), "ratio_p50": median(ratios), "steps_lost_p50": lost}  # fmt: skip


def table(pairs: list[dict[str, Any]]) -> Table:
    """One row per pair, then the medians."""
    t = Table("A killed rank on kind: kill → rank 0's first step of the next attempt, in place vs the whole gang",
              ["pair", "in place (s)", "gang (s)", "in place / gang", "load after (in place / gang)"])
    for p in pairs:
        t.add(p["pair"], fmt_s(p["in-place"]["seconds"]), fmt_s(p["gang"]["seconds"]), fmt_x(ratio(p["in-place"]["seconds"], p["gang"]["seconds"])),
              f"{p.get('load_after_in-place', float('nan')):.1f} / {p.get('load_after_gang', float('nan')):.1f}")  # fmt: skip
    s = summary(pairs)
    if pairs:
        t.add("median", fmt_s(s["in_place_p50_s"]), fmt_s(s["gang_p50_s"]), fmt_x(s["ratio_p50"]), "")
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="Pairs of jobs (default 5).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/recovery_kind-<time>.json).")
    parser.add_argument("--parse", type=Path, default=None, help="Read the pairs from a saved output of this bench (or of the scene) instead of running it.")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs: must be 1 or more, got {args.pairs}")
    before = machine()
    if args.parse is not None:
        if not args.parse.is_file():
            parser.error(f"--parse: no such file: {args.parse}")
        proc = subprocess.CompletedProcess([], 0, args.parse.read_text(), "")
    else:
        env = dict(os.environ, RAILTRAIN_E2E_INPLACE_PAIRS=str(args.pairs))
        proc = subprocess.run([sys.executable, "-m", "pytest", SCENE, "-m", "kind", "-s", "-q", "-p", "no:cacheprovider"], cwd=REPO, env=env,
                              capture_output=True, text=True)  # fmt: skip
    pairs = pairs_in(proc.stdout)
    t = table(pairs)
    t.print()
    record = {"benchmark": "recovery_kind", "pairs": pairs, "summary": summary(pairs), "table": t.plain(), "machine_before": before,
              "machine_after": machine(), "pytest_exit": proc.returncode}  # fmt: skip
    path = write_json("recovery_kind", record, args.json)
    print(f"wrote {path}")
    if proc.returncode != 0 or len(pairs) != args.pairs:
        print(proc.stdout[-4000:] + proc.stderr[-2000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
