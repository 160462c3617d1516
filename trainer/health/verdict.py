"""The health checks' verdict inside the trainer, and the collective timeout that backs the hang watchdog.

:class:`HealthVerdict` is what :class:`~railtrain.trainer.health.monitor.HealthMonitor` raises;
:mod:`railtrain.trainer.__main__` writes it as the termination message (the format is
:mod:`railtrain.crds.contract`'s). Re-exported by :mod:`railtrain.trainer.health.monitor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from railtrain.crds import contract


@dataclass
class HealthVerdict(Exception):
    """A health finding that ends the run; :mod:`railtrain.trainer.__main__` writes it as the termination message.

    Attributes: see :class:`railtrain.crds.contract.Verdict`.
    """

    verdict: str
    reason: str
    message: str
    nodes: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.verdict} {self.reason}: {self.message}"

    def details(self) -> dict[str, Any]:
        """Keyword arguments of :func:`railtrain.crds.contract.write_termination_message`."""
        return {"nodes": self.nodes, "ranks": self.ranks, "step": self.step, "evidence": self.evidence}


def process_group_timeout_s(settings: contract.HealthSettings) -> float:
    """The collective timeout: ``max((hang_factor + 1) x hang_floor_s, 300)`` seconds.

    A backstop above the watchdog's firing time for steps up to the floor (the watchdog, which
    names the stalled rank, fires first), and still six times shorter than torch's 30-minute
    default, which is what holds a hung gang in pytorch/pytorch#111646.
    """
    return max((settings.hang_factor + 1) * settings.hang_floor_s, 300.0)


def json_number(x: float) -> float | str:
    """A JSON-safe number for a verdict's evidence: ``x`` itself, or ``str(x)`` if it is NaN or infinite."""
    return x if x == x and abs(x) != float("inf") else str(x)
