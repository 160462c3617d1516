"""What a save or a load reports: one tier's result on one rank, a whole save's report, an error in words.

Imports: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TierResult:
    """One tier's part of a save or load on this rank.

    Attributes:
        tier: the tier's name (``memory``, ``local`` or ``persistent``).
        seconds: wall time of this rank's part (s).
        bytes: bytes this rank wrote or read.
        error: ``""``, or why the tier failed (on a load: the same on every rank).
        notes: what a load had to work around (e.g. a shard taken from a neighbour's copy).
    """

    tier: str
    seconds: float = 0.0
    bytes: int = 0
    error: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class SaveReport:
    """What one save did: per-tier results on this rank, errors seen on any rank, and its wall time (s)."""

    step: int
    results: list[TierResult]
    errors: list[str]
    seconds: float


def describe_error(err: BaseException) -> str:
    """``"<ExceptionType>: <message>"``: how a tier's result and the log name an error."""
    return f"{type(err).__name__}: {err}"
