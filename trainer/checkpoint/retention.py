"""When to save and what to delete: pure functions of step numbers and manifests.

"Should I save now" (:func:`should_save`) and retention (:func:`prune_plan`, the
newest step known good kept) decide on step numbers alone, so they are tested
without processes or files; :func:`latest_complete` and :func:`steps_to_prune`
apply them to a :class:`~railtrain.trainer.checkpoint.files.CheckpointStorage`,
which a test may fake.

Imports: the standard library only (the storage protocol for type hints).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Collection

if TYPE_CHECKING:
    from railtrain.trainer.checkpoint.files import CheckpointStorage

GOOD_KEY = "good"
"""Manifest key: ``true`` when every rank checked its part of the state finite before the save
(:func:`railtrain.trainer.checkpoint.state.nonfinite_tensors`); retention keeps the newest such step
(:func:`prune_plan`). Manifests without it predate the check."""


def should_save(step: int, interval: int, last_step: int) -> bool:
    """Save after ``step`` if it is a multiple of ``interval`` or the last step of the run."""
    return step % interval == 0 or step == last_step


def prune_plan(series: dict[int, bool], keep: int, good: Collection[int] = ()) -> list[int]:
    """Steps of one series to delete: complete ones beyond the ``keep`` newest, and
    incomplete ones older than the newest complete one (``keep == 0`` keeps every complete one).
    The newest complete step in ``good`` is never deleted, even beyond ``keep``.

    Args:
        series: ``{step: complete}``.
        good: steps whose manifest says ``"good": true`` (:data:`GOOD_KEY`: their state was checked
            finite on every rank when saved); it is enough to give the newest such step.

    Returns:
        The steps to delete, ascending.
    """
    complete = sorted(s for s, ok in series.items() if ok)
    if not complete:
        return []
    old = complete[:-keep] if keep else []
    known_good = [s for s in complete if s in good]
    if known_good:
        old = [s for s in old if s != known_good[-1]]
    stale = [s for s, ok in series.items() if not ok and s < complete[-1]]
    return sorted(old + stale)


def is_good(manifest: dict[str, Any] | None) -> bool | None:
    """What a manifest says of its state: ``True`` (checked finite when saved), ``False`` (marked not good),
    ``None`` (no mark: written before the check existed, so unknown)."""
    mark = manifest.get(GOOD_KEY) if manifest else None
    return mark if isinstance(mark, bool) else None


def newest_good(complete: list[int], read: Callable[[int], dict[str, Any] | None]) -> list[int]:
    """``[newest step of complete whose manifest read(step) is good]`` or ``[]``; manifests are read newest first
    and only until one is good (the ``good`` argument of :func:`prune_plan`)."""
    for step in sorted(complete, reverse=True):
        if is_good(read(step)):
            return [step]
    return []


def latest_complete(storage: CheckpointStorage) -> int | None:
    """The newest step with a complete checkpoint in ``storage``, or ``None``."""
    complete = [s for s in storage.list_steps() if storage.is_complete(s)]
    return complete[-1] if complete else None


def steps_to_prune(storage: CheckpointStorage, keep: int) -> list[int]:
    """Checkpoints to delete once the newest complete one exists.

    Returns:
        Complete checkpoints beyond the ``keep`` newest (none if ``keep == 0``),
        plus incomplete ones older than the newest complete one (leftovers of
        an interrupted save). Incomplete ones newer than it are left alone, and
        so is the newest checkpoint known good (:func:`prune_plan`), when the
        storage reads manifests.
    """
    series = {s: storage.is_complete(s) for s in storage.list_steps()}
    read = getattr(storage, "read_manifest", None)
    good = [s for s, ok in series.items() if ok and read is not None and is_good(read(s))]
    return prune_plan(series, keep, good)
