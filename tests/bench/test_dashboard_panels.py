"""bench/dashboard_panels.py: the chart's dashboard read as panels, queries and layout (pure; no Prometheus, no matplotlib)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import dashboard_panels as dp  # noqa: E402

DASHBOARD = REPO / "helm/railtrain/files/dashboard.json"


def test_every_panel_of_the_chart_dashboard_has_queries_and_fits_the_grid():
    dashboard = dp.load(DASHBOARD)
    panels = dp.panels(dashboard, {"datasource": "prometheus"})
    assert len(panels) == len(dashboard["panels"]) and all(p.queries for p in panels)
    assert all(0 <= p.x and p.x + p.w <= dp.GRID_COLUMNS for p in panels)
    height, rects = dp.layout(panels, width=24.0)
    rows = max(p.y + p.h for p in panels)
    assert height == pytest.approx(24.0 * rows * dp.ROW_PX / (24 * 76.0))
    for p, (left, bottom, w, h) in rects:
        assert 0 <= left and left + w <= 1 + 1e-9 and bottom >= -1e-9 and bottom + h <= 1 + 1e-9
    by_id = {p.id: r for p, r in rects}
    a, b = sorted(rects, key=lambda pr: (pr[0].y, pr[0].x))[:2]
    assert a[0].y == b[0].y and by_id[a[0].id][1] == pytest.approx(by_id[b[0].id][1])  # one grid row: one bottom edge


def test_substitute_fills_every_grafana_variable_form_and_names_an_unknown_one():
    vars_ = {"namespace": "research", "__rate_interval": "1m", "job": "tiny"}
    expr = 'rate(x{namespace="$namespace", trainingjob="${job}", n="[[namespace]]", f="${job:regex}"}[$__rate_interval])'
    out, used = dp.substitute(expr, vars_)
    assert out == 'rate(x{namespace="research", trainingjob="tiny", n="research", f="tiny"}[1m])'
    assert used == ("namespace", "job", "__rate_interval")
    with pytest.raises(KeyError, match="cluster"):
        dp.substitute("up{c=\"$cluster\"}", vars_)


def test_rows_are_flattened_and_hidden_targets_left_out():
    dashboard = {"panels": [
        {"type": "row", "id": 1, "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}, "panels": [
            {"id": 2, "type": "stat", "title": "b", "gridPos": {"x": 12, "y": 1, "w": 12, "h": 4}, "targets": [{"refId": "A", "expr": "up"}]}]},
        {"id": 3, "type": "timeseries", "title": "a", "gridPos": {"x": 0, "y": 1, "w": 12, "h": 4},
         "targets": [{"refId": "A", "expr": "sum(up)", "legendFormat": "{{job}}"}, {"refId": "B", "expr": "down", "hide": True}]},
    ]}
    panels = dp.panels(dashboard, {})
    assert [p.id for p in panels] == [3, 2] and [q.expr for q in panels[0].queries] == ["sum(up)"]


def test_series_applies_the_legend_and_drops_non_finite_samples():
    answer = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"phase": "Running"}, "values": [[100, "2"], [105, "3"]]},
        {"metric": {"phase": "Pending"}, "values": [[100, "NaN"], [105, "+Inf"]]},
        {"metric": {"phase": "Failed"}, "values": [[100, "NaN"], [105, "1"]]},
    ]}}
    assert dp.series(answer, "{{phase}} jobs") == [("Failed jobs", [105.0], [1.0]), ("Running jobs", [100.0, 105.0], [2.0, 3.0])]
    assert dp.legend("", {"__name__": "up", "job": "op"}) == '{job="op"}'
    with pytest.raises(ValueError, match="not a successful"):
        dp.series({"status": "error", "error": "parse error"}, "")
    assert dp.scale("percentunit") == (100.0, "%") and dp.stat_value([]) is None and dp.stat_value([0.0, 2.0]) == 2.0
