"""A killed rank on kind with real pods: restarted in place vs the whole gang restarted, paired (issue 29).

Runs ``e2e/scene_inplace_pairs.py`` (the kind cluster of the e2e suite: 1 control plane and 3 workers, the chart
installed, built offline) with ``--pairs`` pairs. Each pair runs the same 2-node tiny job twice with the same fault,
rank 1's trainer worker killed at step >= 40: once with ``runPolicy.restartInPlace`` (the processes restart inside the
running pods) and once without (every pod deleted and created again), alternating which goes first. The time of each
is from the kill to the first step rank 0 logs in the next attempt. ``--fault hang`` (rank 1 never enters the step's
collective; the watchdogs' hang verdict ends the attempt) times the hang → the first step of the next attempt from the
runtime's log timestamps, with the detection and the restart apart; ``--fault data`` (the step's batch poisoned on
every rank) times what the re-executed, skipped batch cost, on both paths, which restart nothing. The table gives each pair's two times and their
ratio, and the medians; the JSON record holds every sample, the steps lost and the machine's load.

Run from the repository root (Docker must run; the first run builds the images, about 7 minutes)::

    python bench/recovery_kind.py --pairs 5
    python bench/recovery_kind.py --pairs 5 --parse saved-output.txt   # the table and record again from a run's output
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness import Table, fmt_s, fmt_x, machine, median, ratio, saved_or_run, write_json

REPO = Path(__file__).resolve().parents[1]
SCENE = "e2e/scene_inplace_pairs.py"


FAULTS = ("kill", "hang", "data")
"""The scene's faults (``--fault``; ``RAILTRAIN_E2E_INPLACE_FAULT``)."""
ARMS = ("in-place", "gang")
"""The default arms of a pair (``--arms``; ``in-place-cold`` adds the in-place restart with the warm launcher off)."""


def pairs_in(output: str, arms: tuple[str, ...] = ARMS) -> list[dict[str, Any]]:
    """The ``PAIR {json}`` lines the scene printed (pytest's progress dot may precede one), in order; lines that are not
    complete pairs (a sample of every arm in ``arms``) are left out."""
    out = []
    for line in output.splitlines():
        if "PAIR {" in line:  # pytest's progress dot may come first on the line
            try:
                pair = json.loads(line[line.index("PAIR {") + 5:])
            except ValueError:
                continue
            if isinstance(pair, dict) and all(isinstance(pair.get(a), dict) and "seconds" in pair[a] for a in arms):
                out.append(pair)
    return out


def summary(pairs: list[dict[str, Any]], arms: tuple[str, ...] = ARMS) -> dict[str, Any]:
    """Medians over ``pairs``: each arm's seconds (``<arm>_p50_s``) and steps lost (the step at the kill minus the step
    it resumed at), and the per-pair ratios of each in-place arm over the gang's (``<arm>_over_gang_p50``) and of the
    warm launcher over the cold start (``warm_over_cold_p50``) where both arms ran."""
    out: dict[str, Any] = {"pairs": len(pairs), "steps_lost_p50": {}}
    for a in arms:
        out[f"{a}_p50_s"] = median(p[a]["seconds"] for p in pairs)
        fault_at = [(p[a].get("killed_at_step", p[a].get("fault_step")), p[a].get("resumed_step")) for p in pairs]
        if fault_at and all(f is not None and r is not None for f, r in fault_at):
            out["steps_lost_p50"][a] = median(f - r for f, r in fault_at)
        for part in ("detect_seconds", "verdict_to_step_seconds", "stall_seconds", "survivor_steps_lost"):  # a hang: detection, then restart; groups: the survivor
            if pairs and all(part in p[a] for p in pairs):
                out[f"{a}_{part}_p50"] = median(p[a][part] for p in pairs)
        if a != "gang" and "gang" in arms:
            out[f"{a}_over_gang_p50"] = median(ratio(p[a]["seconds"], p["gang"]["seconds"]) for p in pairs)
    if "in-place" in arms and "in-place-cold" in arms:
        out["warm_over_cold_p50"] = median(ratio(p["in-place"]["seconds"], p["in-place-cold"]["seconds"]) for p in pairs)
    return out


def table(pairs: list[dict[str, Any]], arms: tuple[str, ...] = ARMS, fault: str = "kill") -> Table:
    """One row per pair (each arm's seconds, the ratios), then the medians; ``fault`` names what was timed."""
    title = {"kill": "A killed rank on kind: kill → rank 0's first step of the next attempt",
             "hang": "A hung rank on kind: the hang → rank 0's first step of the next attempt (the watchdog's detection included)",
             "data": "A poisoned batch on kind: the time it cost beyond two steps (re-executed and skipped: no restart)"}[fault]  # fmt: skip
    ratios = [a for a in arms if a != "gang" and "gang" in arms]
    warm = "in-place" in arms and "in-place-cold" in arms
    groups = "groups" in arms  # its seconds: back at full strength; the survivor's stall is its own column
    t = Table(title,
              ["pair", *(f"{a} (s)" for a in arms), *(f"{a} / gang" for a in ratios), *(["warm / cold"] if warm else []),
               *(["groups survivor stall (s)", "survivor steps lost"] if groups else []), "load after"])  # fmt: skip
    for p in pairs:
        t.add(p["pair"], *(fmt_s(p[a]["seconds"]) for a in arms), *(fmt_x(ratio(p[a]["seconds"], p["gang"]["seconds"])) for a in ratios),
              *([fmt_x(ratio(p["in-place"]["seconds"], p["in-place-cold"]["seconds"]))] if warm else []),
              *([fmt_s(p["groups"]["stall_seconds"]), p["groups"]["survivor_steps_lost"]] if groups else []),
              " / ".join(f"{p.get('load_after_' + a, float('nan')):.1f}" for a in arms))  # fmt: skip
    if pairs:
        s = summary(pairs, arms)
        t.add("median", *(fmt_s(s[f"{a}_p50_s"]) for a in arms), *(fmt_x(s[f"{a}_over_gang_p50"]) for a in ratios),
              *([fmt_x(s["warm_over_cold_p50"])] if warm else []),
              *([fmt_s(s["groups_stall_seconds_p50"]), s["groups_survivor_steps_lost_p50"]] if groups else []), "")  # fmt: skip
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="Pairs of jobs (default 5).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/recovery_kind-<time>.json).")
    parser.add_argument("--parse", type=Path, default=None, help="Read the pairs from a saved output of this bench (or of the scene) instead of running it.")
    parser.add_argument("--arms", default=",".join(ARMS), help="Comma-separated paths of each pair, from in-place,in-place-cold,gang,groups (default in-place,gang; groups: the job as 2 replica groups, "
                        "the killed rank's group replaced alone, timed to its first step back and with the survivor's stall).")
    parser.add_argument("--kill-step", type=int, default=40, help="The step rank 0 has logged when rank 1's worker is killed, or the injected fault's step (default 40).")
    parser.add_argument("--fault", default="kill", choices=FAULTS, help="kill: rank 1's worker kill -9; hang: rank 1 never enters a collective "
                        "(the watchdog's verdict restarts the attempt); data: a poisoned batch on every rank (re-executed and skipped, no restart). Default kill.")  # fmt: skip
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs: must be 1 or more, got {args.pairs}")
    arms = tuple(a for a in args.arms.split(",") if a)
    if not arms or len(set(arms)) != len(arms) or set(arms) - {"in-place", "in-place-cold", "gang", "groups"}:
        parser.error(f"--arms: a comma-separated list of distinct paths from in-place, in-place-cold, gang, groups; got {args.arms!r}")
    if "groups" in arms and args.fault != "kill":
        parser.error(f"--arms groups: the replica-group arm times a killed group only (--fault kill), got --fault {args.fault}")
    before = machine()
    env = dict(os.environ, RAILTRAIN_E2E_INPLACE_PAIRS=str(args.pairs), RAILTRAIN_E2E_INPLACE_ARMS=",".join(arms),
               RAILTRAIN_E2E_INPLACE_KILL_STEP=str(args.kill_step), RAILTRAIN_E2E_INPLACE_FAULT=args.fault)
    proc = saved_or_run(args.parse, [sys.executable, "-m", "pytest", SCENE, "-m", "kind", "-s", "-q", "-p", "no:cacheprovider"], env, REPO, parser.error)
    pairs = pairs_in(proc.stdout, arms)
    t = table(pairs, arms, args.fault)
    t.print()
    record = {"benchmark": "recovery_kind", "fault": args.fault, "arms": list(arms), "kill_step": args.kill_step, "pairs": pairs, "summary": summary(pairs, arms), "table": t.plain(), "machine_before": before,
              "machine_after": machine(), "pytest_exit": proc.returncode}  # fmt: skip
    path = write_json("recovery_kind", record, args.json)
    print(f"wrote {path}")
    if proc.returncode != 0 or (args.parse is None and len(pairs) != args.pairs) or not pairs:
        print(proc.stdout[-4000:] + proc.stderr[-2000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
