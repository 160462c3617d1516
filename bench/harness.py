"""What every railtrain benchmark shares: statistics, the results table, the JSON record.

Benchmarks run on a shared, noisy machine, so each one measures its baseline in
the same invocation as the thing it judges, interleaves them, and reports
medians and ratios of medians rather than absolute times alone. The JSON
record carries the exact command, the machine's load before and after, and
every raw sample, so a figure quoted in ``docs/`` can be traced back.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""Default folder of the JSON records (gitignored)."""


def median(values: Iterable[float]) -> float:
    """Median of ``values``; NaN when there are none."""
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``; NaN when the denominator is 0 or NaN."""
    if not denominator or denominator != denominator:
        return float("nan")
    return numerator / denominator


_STARTED_AT: dict[str, Any] | None = None
"""The checkout's revision when the benchmark first called :func:`machine` (its start): the code its processes ran."""


def machine() -> dict[str, Any]:
    """Facts about this machine worth recording next to timings: CPUs, load, Python.

    The first call also notes the checkout's :func:`revision`, which :func:`write_json`
    records: a long run's subprocesses run the code of its start, even if the checkout moves on.
    """
    global _STARTED_AT
    if _STARTED_AT is None:
        _STARTED_AT = revision()
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def revision() -> dict[str, Any]:
    """The git commit of the checkout and the paths under operator/ and crds/ that differ from it."""
    repo = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "dirty": git("status", "--porcelain", "--", "operator", "crds").splitlines()}


def command_line() -> str:
    """The command that started this process, as a person would retype it."""
    script = Path(sys.argv[0])
    try:
        script = script.resolve().relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.join(["python", str(script), *sys.argv[1:]])


@dataclass
class Table:
    """A results table: a title, column headers and rows of already formatted cells."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    note: str = ""

    def add(self, *cells: Any) -> None:
        """Append a row; cells are turned into strings."""
        self.rows.append([str(c) for c in cells])

    def plain(self) -> str:
        """The table as aligned plain text (what goes into Markdown too)."""
        widths = [max(len(str(c)) for c in col) for col in zip(self.columns, *self.rows)]
        line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
        out = [self.title, line(self.columns), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        out += [line(r) for r in self.rows]
        if self.note:
            out.append(self.note)
        return "\n".join(out)

    def print(self) -> None:
        """Print with rich on a terminal when it is installed, else as plain text."""
        if not sys.stdout.isatty():
            print(self.plain(), flush=True)
            return
        try:
            from rich.console import Console
            from rich.table import Table as RichTable
        except ImportError:
            print(self.plain(), flush=True)
            return
        table = RichTable(title=self.title, caption=self.note or None)
        for i, col in enumerate(self.columns):
            table.add_column(col, justify="left" if i == 0 else "right")
        for row in self.rows:
            table.add_row(*row)
        Console().print(table)


def fmt_s(seconds: float) -> str:
    """Seconds with two decimals ("-" for NaN)."""
    return "-" if seconds != seconds else f"{seconds:.2f}"


def fmt_x(value: float) -> str:
    """A ratio as ``1.23x`` ("-" for NaN)."""
    return "-" if value != value else f"{value:.2f}x"


def fmt_pct(value: float) -> str:
    """A share in [0, 1] as a percentage with one decimal."""
    return "-" if value != value else f"{100 * value:.1f}%"


def write_json(name: str, record: dict[str, Any], path: Path | None = None) -> Path:
    """Write ``record`` (plus the command and a timestamp) as indented JSON.

    Args:
        name: benchmark name, used in the default file name.
        record: the benchmark's parameters, raw samples and summary.
        path: where to write; defaults to ``bench/results/<name>-<UTC time>.json``.

    Returns:
        The path written.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = Path(path) if path else RESULTS_DIR / f"{name}-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    now = revision()
    started = _STARTED_AT or now
    moved = {"revision_at_end": now} if now != started else {}
    full = {"benchmark": name, "command": command_line(), "finished_utc": stamp, "revision": started, **moved, **record}
    path.write_text(json.dumps(full, indent=1, sort_keys=False) + "\n")
    return path


def saved_or_run(saved: Path | None, command: Sequence[str], env: dict[str, str], cwd: Path, error: Any) -> subprocess.CompletedProcess:
    """The output of a scene run: read from ``saved`` (a bench's ``--parse`` file) when given, else from running
    ``command`` in ``cwd`` with ``env`` (output captured). ``error`` is the parser's ``error`` (it exits 2), called
    with one sentence when ``saved`` is not a file."""
    if saved is not None:
        if not saved.is_file():
            error(f"--parse: no such file: {saved}")
        return subprocess.CompletedProcess([], 0, saved.read_text(), "")
    return subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True)
