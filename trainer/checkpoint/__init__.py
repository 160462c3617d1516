"""Checkpoints in up to three tiers, written in the background, restored from the fastest valid copy.

Tiers (:mod:`.tiers`), fastest first:

* ``memory``: each rank's shard in RAM that outlives the trainer (tmpfs), plus
  a copy on the next node, so losing one node loses nothing;
* ``local``: each rank's shard on its node's own disk;
* ``persistent``: one DCP checkpoint in shared storage (a path or an fsspec
  URI), the only tier that loads at another world size (DCP reshards).

The training loop uses :class:`Checkpointer` (:mod:`.manager`), built from the
job's :class:`TierConfig` values. The modules, each importing only those below it:

* :mod:`.manager`: the :class:`Checkpointer` (save in the background, resume from the fastest valid copy);
* :mod:`.tiers`: the tier implementations built from their configs, over
  :mod:`.shards` (memory and local: per-rank shards, a copy on the next node) and
  :mod:`.persistent` (one DCP checkpoint in shared storage);
* :mod:`.comm`: the collectives on the checkpoint's own process group, and which rank keeps whose copy;
* :mod:`.state`: the state a checkpoint holds, staged and serialized, and its errors;
* :mod:`.files`: step directories, manifests and the storages that hold them;
* :mod:`.io`: shard I/O from buffers kept across saves, hashed as it is written;
* :mod:`.retention`: "should I save now" and what to delete, pure functions of step numbers;
* :mod:`.checksum`, :mod:`.report`: checksums of files, and what a save or a load reports.

This package's public surface is what the trainer and its tests use, listed in
``__all__``; anything else is imported from its own module.

Imports: its own modules only.
"""

from railtrain.trainer.checkpoint.files import MANIFEST, CheckpointStorage, LocalStorage
from railtrain.trainer.checkpoint.manager import Checkpointer, Observer
from railtrain.trainer.checkpoint.retention import latest_complete, should_save, steps_to_prune
from railtrain.trainer.checkpoint.state import CheckpointMismatch, NonFiniteState
from railtrain.trainer.checkpoint.tiers import TIERS, TierConfig

__all__ = [
    "MANIFEST",
    "TIERS",
    "CheckpointMismatch",
    "CheckpointStorage",
    "Checkpointer",
    "LocalStorage",
    "NonFiniteState",
    "Observer",
    "TierConfig",
    "latest_complete",
    "should_save",
    "steps_to_prune",
]
