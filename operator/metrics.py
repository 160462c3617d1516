"""The operator's Prometheus metrics (prometheus-client), served when ``RAILTRAIN_OPERATOR_METRICS_PORT`` is set."""

from __future__ import annotations

from typing import Any, Iterable

from prometheus_client import Counter, Gauge

from railtrain.operator.quarantine import is_quarantined

QUARANTINED_NODES = Gauge("railtrain_quarantined_nodes", "Nodes carrying the railtrain.dev/quarantined taint, as last listed by the operator.")
QUARANTINES = Counter("railtrain_quarantines_total", "Nodes the operator quarantined, by verdict.", ["verdict"])
RESTARTS = Counter("railtrain_gang_restarts_total", "Gang restarts the operator made, by condition reason (NodeLost, RankVanished, Restarting...).", ["reason"])

ENV_PORT = "RAILTRAIN_OPERATOR_METRICS_PORT"
"""Port of the operator's /metrics endpoint; unset or 0 serves none."""


def observe_nodes(nodes: Iterable[dict[str, Any]]) -> int:
    """Set :data:`QUARANTINED_NODES` from a Node listing; returns the count."""
    count = sum(1 for n in nodes if is_quarantined(n))
    QUARANTINED_NODES.set(count)
    return count
