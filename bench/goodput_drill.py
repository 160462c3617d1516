"""Goodput drill (issue 29): a long ``railtrain run --local`` of the tiny example with a fault every ``--every``
seconds, mixed kinds, and the run's own goodput at the end (``status.goodput``'s local twin, cli/local_goodput.py).

The job restarts in place (``runPolicy.restartInPlace``), keeps one hot spare (``spec.spares: 1``) and a memory
tier every ``--memory-interval`` steps. Faults are injected from outside, as the world would, in turn:

* ``kill``: SIGKILL node rank 1's trainer worker (the process dies, its node and supervisor live): in place;
* ``node``: SIGKILL every process of the local node that runs node rank 1 (its machine lost): the spare takes rank 1
  if one waits (``run --local`` does not refill spares: the next loss in the same gang restarts the gang, whose new
  gang has a spare again);
* ``term``: SIGTERM to that node's supervisor (what the kubelet sends when a pod is deleted or evicted): the spare
  takes the rank at once if one waits, else the gang restarts.

The drill ends when the run ends (``--steps``: choose them for the training time wanted; the tiny example does about
1.6 steps a second here); faults stop ``--quiet-tail`` seconds before the expected end. It prints the run's goodput
line, the faults injected and the lost time by cause, and writes JSON::

    python bench/goodput_drill.py --steps 3000 --every 420 --json bench/results/goodput-drill.json
    python bench/goodput_drill.py --steps 60 --every 10 --kinds kill          # smoke size
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from harness import Table, fmt_pct, fmt_s, machine, revision, write_json

REPO = Path(__file__).resolve().parents[1]
GOODPUT = re.compile(r"goodput: wall ([0-9.]+) s = queued ([0-9.]+) \+ starting ([0-9.]+) \+ training ([0-9.]+) \+ lost ([0-9.]+)(?: \(([^)]*)\))?; training (\d+)% of wall")
STEP = re.compile(r"^\[rank 0\] step=(\d+) ")
KINDS = ("kill", "node", "term")


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children(p))
    return out


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(item.split("=", 1) for item in f.read().decode(errors="replace").split("\0") if "=" in item)
    except OSError:
        return {}


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rank_1(run_pid: int) -> tuple[int, int] | None:
    """``(local node root pid, trainer worker pid)`` of the node that runs node rank 1 now, or None (between gangs)."""
    for root in children(run_pid):
        for p in tree(root):
            if "railtrain.trainer" in cmdline(p) and "torchrun" not in cmdline(p) and environ(p).get("GROUP_RANK") == "1":
                return root, p
    return None


def inject(kind: str, run_pid: int) -> str:
    """One fault of ``kind`` on the node that runs node rank 1; returns what was done ("" when nothing ran it)."""
    found = rank_1(run_pid)
    if found is None:
        return ""
    root, worker = found
    if kind == "kill":
        os.kill(worker, signal.SIGKILL)
        return f"SIGKILL to rank 1's worker {worker}"
    if kind == "term":
        os.kill(root, signal.SIGTERM)
        return f"SIGTERM to rank 1's supervisor {root}"
    pids = tree(root)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return f"SIGKILL to {len(pids)} processes of rank 1's node (root {root})"


def manifest(folder: Path, steps: int, memory_interval: int) -> Path:
    """The tiny example with ``steps`` steps, restart in place, one spare and a memory tier."""
    doc = yaml.safe_load((REPO / "examples/tiny/trainingjob.yaml").read_text())
    args = doc["spec"]["args"]
    args[args.index("--steps") + 1] = args[args.index("--lr-decay-steps") + 1] = str(steps)
    args[args.index("--log-every") + 1] = "1"
    doc["spec"]["checkpoint"] = {"location": str(folder / "checkpoints"), "interval": 500, "memory": {"interval": memory_interval}}
    doc["spec"]["runPolicy"] = {"restartInPlace": True, "restartBackoffSeconds": 0, "backoffLimit": 1000, "maxInfrastructureRestarts": 1000}
    doc["spec"]["spares"] = 1
    path = folder / "drill.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def main(argv: list[str] | None = None) -> None:
    """Parse flags, run the drill, print the table and write the JSON record."""
    ap = argparse.ArgumentParser(prog="goodput_drill.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="Training steps of the run (default 3000: about 30 min here).")
    ap.add_argument("--every", type=float, default=420, help="Seconds between two faults, from the first step (default 420).")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"Fault kinds in turn, comma-separated, of {', '.join(KINDS)} (default all).")
    ap.add_argument("--memory-interval", type=int, default=10, help="The memory tier's interval in steps (default 10).")
    ap.add_argument("--quiet-tail", type=float, default=60, help="No fault in the last seconds before the expected end (default 60).")
    ap.add_argument("--timeout", type=float, default=7200, help="Seconds the run may take (default 7200).")
    ap.add_argument("--json", type=Path, default=None, help="Where to write the JSON record (default bench/results/goodput_drill-<time>.json).")
    ap.add_argument("--keep", type=Path, default=None, help="A folder to copy the run's output and node logs to (default: none kept).")
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.steps < 10 or args.every <= 0 or not kinds or any(k not in KINDS for k in kinds):
        ap.error(f"--steps must be >= 10, --every > 0, and --kinds a list of {', '.join(KINDS)}")
    record: dict[str, Any] = {"benchmark": "goodput_drill", "machine_before": machine(), "revision": revision(),
                              "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "faults": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="railtrain-drill-") as tmp:
        folder = Path(tmp)
        path = manifest(folder, args.steps, args.memory_interval)
        out_path = folder / "out.txt"
        with open(out_path, "w") as out:
            proc = subprocess.Popen([sys.executable, *(os.environ.get("DRILL_RUN", "-m railtrain.cli.main").split()), "run", str(path), "--local", "--grace", "2"], cwd=folder,
                                    stdout=subprocess.PIPE, stderr=out, text=True)  # fmt: skip
            steps: list[tuple[float, int]] = []

            def read() -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    out.write(line)
                    if m := STEP.match(line):
                        steps.append((time.monotonic(), int(m.group(1))))

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            start = time.monotonic()
            first = None
            index, next_at = 0, None
            try:
                while proc.poll() is None and time.monotonic() - start < args.timeout:
                    time.sleep(0.5)
                    if first is None and steps:
                        first = steps[0][0]
                        next_at = first + args.every
                    if next_at is None or time.monotonic() < next_at or len(steps) < 2:
                        continue
                    (t0, s0), (t1, s1) = steps[max(0, len(steps) - 200)], steps[-1]
                    rate = (s1 - s0) / max(1e-6, t1 - t0)
                    left = (args.steps - s1) / rate if rate > 0 else float("inf")
                    if left < args.quiet_tail:
                        next_at = float("inf")
                        continue
                    kind = kinds[index % len(kinds)]
                    did = inject(kind, proc.pid)
                    if not did:
                        next_at = time.monotonic() + 2  # between gangs: try again shortly
                        continue
                    record["faults"].append({"kind": kind, "at_s": time.monotonic() - first, "step": s1, "what": did})
                    print(f"  fault {index + 1} at {time.monotonic() - first:.0f}s (step {s1}): {kind}: {did}", flush=True)
                    index += 1
                    next_at = time.monotonic() + args.every
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                reader.join(timeout=10)
        text = out_path.read_text()
        if args.keep is not None:
            import shutil

            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(out_path, args.keep / "out.txt")
            if m := re.search(r"^logs: (\S+)", text, re.M):
                shutil.copytree(m.group(1), args.keep / "logs", dirs_exist_ok=True)
    record["returncode"] = proc.returncode
    record["machine_after"] = machine()
    m = None
    for m in GOODPUT.finditer(text):
        pass
    if m is None:
        print(text[-4000:], file=sys.stderr)
        raise SystemExit(f"the run printed no goodput line (exit {proc.returncode})")
    wall, queued, starting, training, lost = (float(m.group(i)) for i in range(1, 6))
    causes = {k.strip(): float(v) for k, v in (part.rsplit(" ", 1) for part in (m.group(6) or "").split(",") if part.strip())}
    record["goodput"] = {"wall_s": wall, "queued_s": queued, "starting_s": starting, "training_s": training, "lost_s": lost, "lost_by_cause_s": causes,
                         "training_share": training / wall if wall else float("nan"), "printed_percent": int(m.group(7))}  # fmt: skip
    g = record["goodput"]
    table = Table(f"goodput drill: tiny, {args.steps} steps, a fault every {args.every:.0f} s ({', '.join(kinds)} in turn), {len(record['faults'])} faults",
                  ["metric", "value"])  # fmt: skip
    table.add("run exit status", str(proc.returncode))
    table.add("wall s", fmt_s(wall))
    table.add("training s (share of wall)", f"{fmt_s(training)} ({fmt_pct(g['training_share'])})")
    table.add("starting s (first start)", fmt_s(starting))
    table.add("lost s", fmt_s(lost))
    for cause, seconds in sorted(causes.items()):
        table.add(f"  lost: {cause} s", fmt_s(seconds))
    table.add("faults by kind", ", ".join(f"{k} {sum(1 for f in record['faults'] if f['kind'] == k)}" for k in kinds))
    table.print()
    print(f"load average before {record['machine_before']['loadavg']}, after {record['machine_after']['loadavg']}")
    record["table"] = table.plain()
    print(f"JSON: {write_json('goodput_drill', record, args.json)}")
    if proc.returncode != 0:
        raise SystemExit(f"the run failed (exit {proc.returncode})")


if __name__ == "__main__":
    main()
