"""The tier implementations, built from the job's tier configs: peer RAM, node-local disk, persistent storage.

* ``memory``: a :class:`~railtrain.trainer.checkpoint.shards.ShardTier` in a
  directory on tmpfs that outlives the trainer, each rank's shard copied to the
  next node (:class:`~railtrain.trainer.checkpoint.comm.Peers`), never fsynced;
* ``local``: a :class:`~railtrain.trainer.checkpoint.shards.ShardTier` on the
  node's own disk, fsynced;
* ``persistent``: a :class:`~railtrain.trainer.checkpoint.persistent.PersistentTier`,
  one DCP checkpoint in shared storage, the only tier that reshards.

A job's tiers arrive as :class:`~railtrain.crds.checkpoint.TierConfig` values, the type the pod
contract hands over (:meth:`railtrain.crds.contract.PodEnvironment.checkpoint_tiers`).

Imports: :mod:`railtrain.crds.checkpoint` (the tier configs), :mod:`.comm`, :mod:`.persistent` and :mod:`.shards`.
"""

from __future__ import annotations

from railtrain.crds.checkpoint import TIERS, TierConfig
from railtrain.trainer.checkpoint.comm import Peers
from railtrain.trainer.checkpoint.persistent import PersistentTier
from railtrain.trainer.checkpoint.shards import ShardTier

Tier = ShardTier | PersistentTier
"""One built tier."""

__all__ = ["TIERS", "Tier", "TierConfig", "build_tiers", "node_size"]


def node_size(world_size: int, local_world_size: int) -> int:
    """Processes per node for the memory tier's peers: ``local_world_size`` when it divides ``world_size``, else ``world_size`` (one node)."""
    if 0 < local_world_size <= world_size and world_size % local_world_size == 0:
        return local_world_size
    return world_size


def build_tiers(configs: list[TierConfig], rank: int, world_size: int, local_world_size: int) -> list[Tier]:
    """The tiers of ``configs``, fastest first.

    Args:
        configs: the job's tiers (any order, each name at most once).
        rank, world_size: this process's place in the job.
        local_world_size: processes per node (ranks are node-major); see :func:`node_size`.

    Raises:
        ValueError: a name outside :data:`TIERS` or given twice; a persistent location fsspec cannot open.
    """
    names = [t.name for t in configs]
    if len(set(names)) != len(names) or not set(names) <= set(TIERS):
        raise ValueError(f"checkpoint tiers must be distinct names among {', '.join(TIERS)}, got {names}")
    lws = node_size(world_size, local_world_size)
    peers = Peers(world_size, lws) if world_size > lws else None
    tiers: list[Tier] = []
    for t in sorted(configs, key=lambda t: TIERS.index(t.name)):
        if t.name == "persistent":
            tiers.append(PersistentTier(t.location, t.interval, t.keep, rank, world_size))
        else:
            tiers.append(ShardTier(t.name, t.location, t.interval, t.keep, rank, world_size, peers if t.name == "memory" else None, fsync=t.name != "memory"))
    return tiers
