"""The goodput drill on kind with real pods (issue 29): one long job, faults of mixed kinds, ``status.goodput``.

Runs ``e2e/scene_goodput_drill.py`` on the e2e suite's kind cluster (1 control plane and 3 workers in Docker, the
chart installed, built offline): the tiny example as a 2-node job with one hot spare and ``restartInPlace``, a fault
every ``--every`` seconds on the pod holding node rank 1, in turn ``kill`` (its worker SIGKILLed: in place),
``delete`` (the pod deleted: the spare takes the rank, the operator refills the pool) and ``stop`` (its worker
SIGSTOPped: a hang verdict, in place), for ``--seconds`` from the first step. The table is the operator's breakdown
of the job's wall time (``status.goodput``: training, starting, lost by cause) and the restarts it counted; the JSON
record holds the faults and the whole breakdown. There is no baseline arm: the figure is judged against the issue's
bar (97%, ByteRobust's ETTR) and the local drill (``bench/goodput_drill.py``).

Run from the repository root (Docker must run; the first run builds the images, about 7 minutes)::

    python bench/goodput_drill_kind.py --seconds 1800 --every 300
    python bench/goodput_drill_kind.py --parse saved-output.txt   # the table and record again from a run's output
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness import Table, fmt_pct, machine, saved_or_run, write_json

REPO = Path(__file__).resolve().parents[1]
SCENE = "e2e/scene_goodput_drill.py"


def drill_in(output: str) -> dict[str, Any] | None:
    """The scene's ``DRILL {json}`` record in ``output`` (pytest's progress dot may precede it), or None."""
    for line in output.splitlines():
        if "DRILL {" in line:
            try:
                record = json.loads(line[line.index("DRILL {") + 6:])
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("goodput"), dict):
                return record
    return None


def breakdown(record: dict[str, Any]) -> list[tuple[str, float, float]]:
    """``(what, seconds, share of wall)`` rows of the record's goodput: wall, queued, starting, training, then each
    lost cause, largest first."""
    g = record["goodput"]
    wall = float(g.get("wallSeconds") or 0.0)
    share = lambda s: s / wall if wall else float("nan")  # noqa: E731
    rows = [("wall", wall, 1.0)]
    for key, what in (("queuedSeconds", "queued"), ("startingSeconds", "starting (the first gang's pods, torch import, rendezvous)"), ("trainingSeconds", "training")):
        rows.append((what, float(g.get(key) or 0.0), share(float(g.get(key) or 0.0))))
    for cause, seconds in sorted((g.get("lostSeconds") or {}).items(), key=lambda kv: -kv[1]):
        rows.append((f"lost: {cause}", float(seconds), share(float(seconds))))
    return rows


def table(record: dict[str, Any]) -> Table:
    """The breakdown, then the counts of faults by kind and the restarts the operator counted."""
    t = Table("Goodput drill on kind: status.goodput after the drill", ["", "seconds", "share of wall"])
    for what, seconds, share in breakdown(record):
        t.add(what, f"{seconds:,.1f}", fmt_pct(share) if what != "wall" else "")
    kinds: dict[str, int] = {}
    for f in record.get("faults") or []:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    t.add("faults", ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none", "")
    t.add("restarts counted", f"in place {record.get('inPlaceRestarts', 0)}, gang {record.get('restarts', 0)}", "")
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1800.0, help="How long the drill trains from its first step, seconds (default 1800).")
    parser.add_argument("--every", type=float, default=300.0, help="Seconds between faults (default 300).")
    parser.add_argument("--memory-interval", type=int, default=50, help="The memory tier's interval, steps (default 50).")
    parser.add_argument("--kinds", default="kill,delete,stop", help="Comma-separated fault kinds in turn, from kill, delete, stop (default all three).")
    parser.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/goodput_drill_kind-<time>.json).")
    parser.add_argument("--parse", type=Path, default=None, help="Read the record from a saved output of this bench (or of the scene) instead of running it.")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or set(kinds) - {"kill", "delete", "stop"}:
        parser.error(f"--kinds: a comma-separated list from kill, delete, stop; got {args.kinds!r}")
    if args.every <= 0 or args.seconds < args.every:
        parser.error(f"--every must be above 0 and at most --seconds; got --every {args.every} --seconds {args.seconds}")
    if args.memory_interval < 1:
        parser.error(f"--memory-interval: must be 1 or more, got {args.memory_interval}")
    before = machine()
    env = dict(os.environ, RAILTRAIN_E2E_DRILL_SECONDS=str(args.seconds), RAILTRAIN_E2E_DRILL_EVERY=str(args.every),
               RAILTRAIN_E2E_DRILL_MEMORY=str(args.memory_interval), RAILTRAIN_E2E_DRILL_KINDS=",".join(kinds))  # fmt: skip
    proc = saved_or_run(args.parse, [sys.executable, "-m", "pytest", SCENE, "-m", "kind", "-s", "-q", "-p", "no:cacheprovider"], env, REPO, parser.error)
    record = drill_in(proc.stdout)
    if record is None:
        print("the drill printed no record", file=sys.stderr)
        print(proc.stdout[-4000:] + proc.stderr[-2000:], file=sys.stderr)
        return 1
    t = table(record)
    t.print()
    path = write_json("goodput_drill_kind", {"benchmark": "goodput_drill_kind", "drill": record, "table": t.plain(), "machine_before": before,
                                             "machine_after": machine(), "pytest_exit": proc.returncode}, args.json)  # fmt: skip
    print(f"wrote {path}")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
