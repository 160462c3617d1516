"""railtrain.trainer: a transformer LM trainer on byte-level text or pre-tokenized token files (DDP, FSDP2/HSDP, tensor and pipeline parallel on one DeviceMesh; checkpoints in memory, local and persistent tiers).

Modules: ``config`` (flags and pod contract), ``model``, ``data`` (sampling), ``tokens`` (token files), ``parallel``
(degrees, mesh, data parallel), ``tensor_parallel``, ``pipeline``, ``steps``
(one step's forwards and backwards), ``checkpoint`` (a package: the manager, tiers, I/O, state,
checksums; async saves, fallback), ``metrics`` (Prometheus),
``train`` (the :class:`~railtrain.trainer.train.Trainer`), and
``__main__`` (``python -m railtrain.trainer``). Importing this package does not
import torch.

The library surface (docs/library.md; ``__all__``, loaded on first use so that importing the package stays cheap):
:class:`Contract`/:func:`read_contract` (the pod contract), :class:`StepHook` (per-step health checks and
progress metrics), :class:`JobCheckpointer` (tiered checkpoints), :func:`write_verdict`/:func:`exit_with_verdict`
(termination message and exit code), :class:`HealthVerdict` and :class:`ContractError` (what they raise).
Everything else is internal and may change.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Contract": "railtrain.trainer.pod_contract",
    "read_contract": "railtrain.trainer.pod_contract",
    "StepHook": "railtrain.trainer.hook",
    "JobCheckpointer": "railtrain.trainer.checkpointing",
    "write_verdict": "railtrain.trainer.outcome",
    "exit_with_verdict": "railtrain.trainer.outcome",
    "HealthVerdict": "railtrain.trainer.health.verdict",
    "ContractError": "railtrain.crds.contract",
}

__all__ = ["Contract", "ContractError", "HealthVerdict", "JobCheckpointer", "StepHook", "exit_with_verdict", "read_contract", "write_verdict"]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'railtrain.trainer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
