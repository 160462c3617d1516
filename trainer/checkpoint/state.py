"""The state a checkpoint holds, and its three forms.

* **live**: ``{"model": ..., "optim": ..., "train": {name: int64 tensor}}`` from
  ``get_state_dict`` (DTensors under FSDP2/TP: each rank holds its shard);
* **staged**: a copy of it in CPU RAM (:class:`Stager`), taken at a step
  boundary, which the background writer saves while training goes on;
* **local**: the staged state with every DTensor replaced by this rank's local
  tensor (:func:`to_local`), serialized with ``torch.save`` as one rank's
  shard of the per-rank tiers, and put back with :func:`rebuild`.

It also holds the errors a checkpoint's state can raise (:class:`ShardMismatch`,
:class:`CheckpointMismatch`, :class:`NonFiniteState`) and the checks behind them.

Imports: the standard library and torch; nothing of the package.
"""

from __future__ import annotations

import io
from typing import Any

import torch
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass


class ShardMismatch(ValueError):
    """A per-rank shard does not fit this run's state (another layout, preset or optimizer); the message says where."""


class CheckpointMismatch(ValueError):
    """A checkpoint that cannot be loaded into this model: a tensor it lacks, one this model lacks, or another shape.

    Deterministic (a retry loads the same bytes into the same model), so the trainer
    reports it as a ``user-error`` verdict with reason ``CheckpointMismatch``
    (:data:`railtrain.crds.contract.REASON_CHECKPOINT_MISMATCH`); the message names the tensor.
    """


class NonFiniteState(ValueError):
    """The state to save, or the one just loaded, holds a NaN or an infinity on some rank.

    Saving it would let retention delete the last finite checkpoints, and every restart would
    resume a poisoned state (docs/checkpoints.md, "Only finite states are saved"); the trainer
    reports it as a ``user-error`` verdict with reason ``NonFiniteUpdate``
    (:data:`railtrain.crds.contract.REASON_NON_FINITE_UPDATE`).

    Attributes:
        step: the step of the state (the one saved, or the newest one rejected on load).
        evidence: ``{"ranks": [...], "tensors": {rank: [names]}}``, JSON values only.
    """

    def __init__(self, message: str, step: int, evidence: dict[str, Any]) -> None:
        super().__init__(message)
        self.step, self.evidence = step, evidence


def nonfinite_tensors(state: Any, limit: int = 3) -> list[str]:
    """Names of the floating-point tensors of ``state`` (this rank's local shards) that hold a NaN or an infinity.

    The check is cheap and local: one ``isfinite().all()`` per tensor on its own device and one
    synchronisation for all of them (a DTensor is checked as this rank's local shard, so there is
    no collective; every rank checks what it writes). Names are only looked up when some tensor fails.

    Args:
        state: nested dicts/lists of tensors (the live, staged or loaded checkpoint state).
        limit: at most this many names are returned.

    Returns:
        ``[]`` when every tensor is finite, else up to ``limit`` dotted paths such as
        ``"model.layers.0.attention.wq.weight"``.
    """
    found: list[tuple[str, torch.Tensor]] = []

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, DTensor):
            obj = obj._local_tensor
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point() and obj.numel():
                found.append((path, _unwrap(obj)))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]")

    walk(state, "")
    if not found:
        return []
    flags = [torch.isfinite(t).all() for _, t in found]
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for f in flags:
        by_device.setdefault(f.device, []).append(f)
    if all(bool(torch.stack(fs).all()) for fs in by_device.values()):
        return []
    return [name for (name, _), ok in zip(found, flags) if not bool(ok)][:limit]


def model_mismatch(model: dict[str, tuple[int, ...]], saved: dict[str, tuple[int, ...]]) -> str:
    """How a checkpoint's model tensors differ from this model's, or ``""`` when they fit.

    Args:
        model: this model's tensors: fully qualified name to global shape (every rank's, for pipeline stages).
        saved: the checkpoint's model tensors, the same way (from its DCP metadata).

    Returns:
        One clause naming the first tensor that differs (in this model's order, then the
        checkpoint's) and how many more do, e.g. ``"layers.2.attention.wq.weight is not in the
        checkpoint (and 17 more of this model's tensors are not)"``.
    """
    def more(n: int, what: str) -> str:
        return f" (and {n} more {what})" if n else ""

    missing = [k for k in model if k not in saved]
    extra = [k for k in saved if k not in model]
    reshaped = [k for k in model if k in saved and tuple(model[k]) != tuple(saved[k])]
    if reshaped:
        k = reshaped[0]
        return f"{k} is {list(saved[k])} in the checkpoint but {list(model[k])} in this model" + more(len(reshaped) - 1, "tensors differ in shape")
    if missing:
        return f"{missing[0]} is not in the checkpoint" + more(len(missing) - 1, "of this model's tensors are not")
    if extra:
        return f"the checkpoint holds {extra[0]}, which this model does not have" + more(len(extra) - 1, "such tensors")
    return ""


class Stager:
    """Copies the live state into CPU buffers that are reused from one save to the next.

    Uses torch's ``DefaultStager`` (the staging of ``dcp.async_save``): pinned
    memory and non-blocking copies on CUDA, plain copies on CPU.
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self._stager = DefaultStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=cuda))

    def stage(self, state: dict[str, Any]) -> dict[str, Any]:
        """A CPU copy of ``state`` that later training steps do not change."""
        staged = self._stager.stage(state)
        if self.cuda:
            torch.cuda.synchronize()
        return staged  # type: ignore[return-value]

    def close(self) -> None:
        """Release the cached buffers."""
        self._stager.close()


def to_local(obj: Any) -> Any:
    """``obj`` with every DTensor replaced by this rank's local tensor (containers copied, tensors shared)."""
    if isinstance(obj, DTensor):
        return obj.to_local()
    if isinstance(obj, dict):
        return {k: to_local(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_local(v) for v in obj)
    return obj


def _unwrap(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor a tensor-wrapper subclass holds (its first inner tensor, same shape and dtype), else ``t``."""
    if type(t) is torch.Tensor or not is_traceable_wrapper_subclass(t):
        return t
    names, _ = t.__tensor_flatten__()  # type: ignore[attr-defined]
    inner = getattr(t, names[0]) if names else None
    if isinstance(inner, torch.Tensor) and inner.shape == t.shape and inner.dtype == t.dtype:
        return inner
    return t


def plain_tensors(obj: Any) -> Any:
    """``obj`` with every tensor-wrapper subclass replaced by the plain tensor it wraps (sharing its memory).

    Under FSDP2 with float8 all-gather, torchao wraps each converted weight's
    shard (and, through ``empty_like``, the optimizer state made from it) in a
    ``WeightWithDynamicFloat8CastTensor``: a wrapper with no storage of its own,
    whose staged copies DCP writes as garbage. Checkpoints hold the plain
    float32 values instead, so they are the same whether a run was fp8 or
    bf16 (docs/checkpoints.md), and loading into the plain tensors writes
    through to the parameters. DTensors are rebuilt around the unwrapped local
    tensor (same mesh and placements); containers are copied, other values kept.
    """
    if isinstance(obj, DTensor):
        local = obj._local_tensor
        inner = _unwrap(local)
        if inner is local:
            return obj
        return DTensor.from_local(inner, obj.device_mesh, obj.placements, run_check=False, shape=obj.shape, stride=obj.stride())
    if isinstance(obj, torch.Tensor):
        return _unwrap(obj)
    if isinstance(obj, dict):
        return {k: plain_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain_tensors(v) for v in obj)
    return obj


def serialize(obj: Any) -> memoryview:
    """``torch.save`` of ``obj`` into memory."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getbuffer()


def deserialize(data: bytes | bytearray | memoryview) -> Any:
    """Inverse of :func:`serialize` (``weights_only``: tensors and plain containers only)."""
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def load_file(path: str) -> Any:
    """:func:`deserialize` of a file, read straight into tensors."""
    return torch.load(path, weights_only=True, map_location="cpu")


def saved_states_only(template: dict[str, Any], saved: Any) -> dict[str, Any]:
    """``template`` with its ``states`` (the loop's other stateful objects) cut to the names ``saved`` holds.

    A checkpoint written before the loop added an object (e.g. an LR scheduler) still loads; the object keeps its
    state and the manager says so. ``saved``: the names (any container of them) the checkpoint holds.
    """
    if "states" not in template:
        return template
    kept = {k: v for k, v in template["states"].items() if k in saved}
    return {**template, "states": kept} if kept else {k: v for k, v in template.items() if k != "states"}


def rebuild(template: Any, loaded: Any, path: str = "") -> Any:
    """Put a local shard back into the shape of the live state.

    Args:
        template: the live state (as from ``get_state_dict``); not modified.
        loaded: :func:`deserialize` output of a shard saved at the same layout.

    Returns:
        ``template``'s structure with the loaded values: DTensors rebuilt
        around the loaded local tensors (same mesh and placements), tensors
        moved to the template's device, other values taken from ``loaded``.

    Raises:
        ShardMismatch: keys, lengths, shapes or dtypes differ; names the path.
    """
    if isinstance(template, DTensor):
        local = template.to_local()
        _check_tensor(local, loaded, path)
        return DTensor.from_local(
            loaded.to(local.device), template.device_mesh, template.placements, run_check=False, shape=template.shape, stride=template.stride()
        )
    if isinstance(template, torch.Tensor):
        _check_tensor(template, loaded, path)
        return loaded.to(template.device)
    if isinstance(template, dict):
        if not isinstance(loaded, dict) or set(template) != set(loaded):
            extra = sorted(map(str, set(loaded) - set(template))) if isinstance(loaded, dict) else []
            missing = sorted(map(str, set(template) - set(loaded))) if isinstance(loaded, dict) else []
            raise ShardMismatch(f"{path or 'state'}: keys differ (missing {missing[:3]}, unexpected {extra[:3]})")
        return {k: rebuild(v, loaded[k], f"{path}.{k}" if path else str(k)) for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        if not isinstance(loaded, (list, tuple)) or len(loaded) != len(template):
            raise ShardMismatch(f"{path}: expected a sequence of {len(template)}")
        return type(template)(rebuild(t, v, f"{path}[{i}]") for i, (t, v) in enumerate(zip(template, loaded)))
    return loaded


def _check_tensor(expected: torch.Tensor, loaded: Any, path: str) -> None:
    if not isinstance(loaded, torch.Tensor):
        raise ShardMismatch(f"{path}: expected a tensor, found {type(loaded).__name__}")
    if loaded.shape != expected.shape or loaded.dtype != expected.dtype:
        raise ShardMismatch(f"{path}: saved {tuple(loaded.shape)} {loaded.dtype}, this run has {tuple(expected.shape)} {expected.dtype}")
