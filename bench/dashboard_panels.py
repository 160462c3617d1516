"""The chart's Grafana dashboard as data: its panels, their PromQL with Grafana's variables filled in, and their layout.

Pure functions on the dashboard JSON (helm/railtrain/files/dashboard.json) and
on Prometheus query results, used by ``bench/dashboard_render.py`` to draw the
dashboard from real data without Grafana, and tested without Prometheus or
matplotlib (tests/bench/test_dashboard_panels.py).

Grafana rules followed here (from Grafana's documentation of dashboards,
variables, panels and units):

- ``gridPos`` places a panel on a grid 24 columns wide; one height unit is 30
  px plus a 8 px gap, so a row of ``h`` units is about ``h * 38`` px.
- Variables appear in queries as ``$name``, ``${name}``, ``${name:format}`` or
  ``[[name]]``; the built-ins ``$__rate_interval``, ``$__interval`` and
  ``$__range`` are set by Grafana from the time range and the scrape interval.
- A legend format ``{{label}}`` is replaced by the series' label value.
- Units ``percentunit`` (0..1 shown as %), ``s`` (seconds) and ``short``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

GRID_COLUMNS = 24
"""Grafana's dashboard grid width in columns."""
ROW_PX = 38
"""Pixels of one gridPos height unit (30 px cell + 8 px margin)."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(\w+)")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Query:
    """One target of a panel: its PromQL after substitution and its legend format."""

    ref: str
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One drawable panel: id, type (timeseries, stat), title, unit, grid position and its queries."""

    id: int
    type: str
    title: str
    unit: str
    x: int
    y: int
    w: int
    h: int
    queries: tuple[Query, ...]
    stacked: bool = False


def load(path: Path) -> dict[str, Any]:
    """The dashboard JSON at ``path`` as a dict.

    Raises:
        OSError: the file cannot be read; ValueError: it is not JSON.
    """
    return json.loads(Path(path).read_text())


def substitute(expr: str, variables: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """Fill Grafana's variables into one PromQL expression (pure).

    Args:
        expr: a target's ``expr`` as the dashboard holds it.
        variables: value of each variable by name, without the ``$``
            (e.g. ``{"__rate_interval": "1m", "namespace": "research"}``).

    Returns:
        The expression with every known variable replaced, and the names of
        the variables it used, in order of first use.

    Raises:
        KeyError: the expression uses a variable not in ``variables`` (its name).
    """
    used: list[str] = []

    def fill(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in variables:
            raise KeyError(name)
        if name not in used:
            used.append(name)
        return variables[name]

    return _VARIABLE.sub(fill, expr), tuple(used)


def panels(dashboard: Mapping[str, Any], variables: Mapping[str, str]) -> list[Panel]:
    """The dashboard's panels in reading order (top to bottom, left to right), rows flattened (pure).

    Row panels (``type: row``) are headers, not drawn; the panels a collapsed
    row holds are taken from its ``panels``. A target with ``hide: true`` is left out.

    Raises:
        KeyError: a target uses a variable not in ``variables``.
    """
    flat: list[Mapping[str, Any]] = []
    for p in dashboard.get("panels") or []:
        if p.get("type") == "row":
            flat.extend(p.get("panels") or [])
        else:
            flat.append(p)
    out = []
    for p in flat:
        grid = p.get("gridPos") or {}
        defaults = (p.get("fieldConfig") or {}).get("defaults") or {}
        stacking = ((defaults.get("custom") or {}).get("stacking") or {}).get("mode", "none")
        queries = tuple(
            Query(t.get("refId", ""), substitute(t["expr"], variables)[0], t.get("legendFormat", ""))
            for t in p.get("targets") or [] if t.get("expr") and not t.get("hide")
        )
        out.append(Panel(int(p.get("id", 0)), p.get("type", "timeseries"), p.get("title", ""), defaults.get("unit", "short"),
                         int(grid.get("x", 0)), int(grid.get("y", 0)), int(grid.get("w", 12)), int(grid.get("h", 8)), queries, stacking == "normal"))
    return sorted(out, key=lambda q: (q.y, q.x))


def variables_used(dashboard: Mapping[str, Any]) -> list[str]:
    """Every variable name any target's ``expr`` uses, in order of first use (pure)."""
    seen: list[str] = []
    for p in dashboard.get("panels") or []:
        for sub in [p, *(p.get("panels") or [])]:
            for t in sub.get("targets") or []:
                for m in _VARIABLE.finditer(t.get("expr") or ""):
                    name = m.group(1) or m.group(2) or m.group(3)
                    if name not in seen:
                        seen.append(name)
    return seen


def layout(items: Iterable[Panel], width: float = 1.0) -> tuple[float, list[tuple[Panel, tuple[float, float, float, float]]]]:
    """Each panel's rectangle on a figure, from its gridPos (pure).

    Args:
        items: the panels.
        width: the figure's width in any unit (inches for matplotlib).

    Returns:
        The figure's height in the same unit (the grid's rows scaled as Grafana
        draws them on a 24-column width of ``width``: one height unit is
        :data:`ROW_PX` px of a 1,824 px wide screen, 76 px per column), and per
        panel ``(left, bottom, w, h)`` as fractions of the figure, bottom-up as
        matplotlib counts them.
    """
    items = list(items)
    rows = max((p.y + p.h for p in items), default=0)
    col_px = 76.0
    height = width * rows * ROW_PX / (GRID_COLUMNS * col_px)
    out = []
    for p in items:
        left, w = p.x / GRID_COLUMNS, p.w / GRID_COLUMNS
        top, h = p.y / rows if rows else 0.0, p.h / rows if rows else 0.0
        out.append((p, (left, 1.0 - top - h, w, h)))
    return height, out


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """A series' legend: ``fmt`` with each ``{{label}}`` replaced by its value ("" when absent); the label set when ``fmt`` is empty (pure)."""
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt)


def series(result: Mapping[str, Any], fmt: str) -> list[tuple[str, list[float], list[float]]]:
    """The series of one Prometheus ``/api/v1/query_range`` answer (pure).

    Args:
        result: the decoded JSON answer (``{"status": "success", "data": {"resultType": "matrix", "result": [...]}}``).
        fmt: the target's legend format.

    Returns:
        ``(legend, unix_seconds, values)`` per series, sorted by legend; NaN and
        ±Inf samples (a histogram quantile without observations) are left out,
        and a series left with no samples is dropped.

    Raises:
        ValueError: the answer is not a successful matrix.
    """
    data = result.get("data") or {}
    if result.get("status") != "success" or data.get("resultType") != "matrix":
        raise ValueError(f"not a successful range query answer: {str(result)[:200]}")
    out = []
    for s in data.get("result") or []:
        ts, vs = [], []
        for t, v in s.get("values") or []:
            value = float(v)
            if math.isfinite(value):
                ts.append(float(t))
                vs.append(value)
        if ts:
            out.append((legend(fmt, s.get("metric") or {}), ts, vs))
    return sorted(out, key=lambda s: s[0])


def scale(unit: str) -> tuple[float, str]:
    """Factor and axis suffix that show a value of Grafana ``unit`` as Grafana does (pure): percentunit ×100 "%", s "s", else ×1 ""."""
    return {"percentunit": (100.0, "%"), "percent": (1.0, "%"), "s": (1.0, "s")}.get(unit, (1.0, ""))


def stat_value(values: list[float]) -> float | None:
    """The number a stat panel shows: Grafana's default reduction, the last non-null value (None when there is none)."""
    return values[-1] if values else None
