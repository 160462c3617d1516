"""Train-and-save or resume-and-compare, in every rank of a torchrun gang: the checkpoint round trip between precisions.

``torchrun ... bench/float8_roundtrip.py save SNAPDIR TRAINER-FLAG...``
trains a :class:`Trainer` as the flags say (checkpointing at its last step) and
writes each rank's parameters and optimizer state to ``SNAPDIR/rank-<r>.pt``.
``... load SNAPDIR TRAINER-FLAG...`` builds a Trainer, resumes from the
checkpoint the flags point at, and compares every tensor with that snapshot
bitwise (then again after loading from the persistent tier alone, see
:func:`main`); it prints one line per difference and exits 1 if there is any. Each
phase is its own torchrun: a process group is made once per process.
tests/trainer/test_float8.py runs it with 2 FSDP2 ranks; bench/float8_emulated.py
uses :func:`snapshot` and :func:`differences` in one process.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from railtrain.trainer.config import parse_args
from railtrain.trainer.train import Trainer, build_checkpointer


def plain(t: torch.Tensor) -> torch.Tensor:
    """This rank's values of ``t`` as an ordinary CPU tensor (a DTensor's local shard; torchao's float8 weight wrapper unwrapped)."""
    if isinstance(t, DTensor):
        t = t.to_local()
    inner = getattr(t, "_tensor", None)  # torchao's WeightWithDynamicFloat8CastTensor (FSDP2 float8 all-gather)
    if isinstance(inner, torch.Tensor):
        t = inner
    return t.detach().to("cpu", copy=True).as_subclass(torch.Tensor)


def snapshot(trainer: Trainer) -> dict[str, torch.Tensor]:
    """Every parameter and optimizer-state tensor of ``trainer`` on this rank, by name."""
    params = dict(trainer.model.named_parameters())
    out = {f"param {name}": plain(p) for name, p in params.items()}
    names = {id(p): name for name, p in params.items()}
    for p, state in trainer.optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                out[f"optim {names[id(p)]}.{key}"] = plain(value)
    return out


def differences(saved: dict[str, torch.Tensor], loaded: dict[str, torch.Tensor]) -> list[str]:
    """One line per tensor that is missing, extra, or not bitwise equal (``[]``: the same)."""
    if set(saved) != set(loaded):
        return [f"tensor names differ: {sorted(set(saved) ^ set(loaded))[:4]}"]
    return [f"{name} differs (max |diff| {(saved[name].float() - loaded[name].float()).abs().max().item():.3g})"
            for name in saved if saved[name].dtype != loaded[name].dtype or not torch.equal(saved[name], loaded[name])]  # fmt: skip


def reload_persistent(trainer: Trainer) -> str:
    """Zero the model and optimizer state, then load them again from the persistent tier alone; where it loaded from."""
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.zero_()
        for state in trainer.optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    value.zero_()
    only = dataclasses.replace(trainer.config, checkpoint_local_dir="", checkpoint_memory_dir="")
    checkpointer = build_checkpointer(only, trainer.dims.describe(), trainer.model, trainer.optimizer, trainer.contract, trainer.health, trainer.log)
    assert checkpointer is not None
    try:
        checkpointer.resume(trainer.sampler.state())
        return checkpointer.loaded_from
    finally:
        checkpointer.close()


def main(argv: list[str]) -> int:
    """``save|load SNAPDIR TRAINER-FLAG...``; returns the exit code.

    ``load`` compares twice when the flags name both a local and a persistent
    tier: after the ordinary resume (the local tier, the faster), and after
    zeroing everything and loading from the persistent tier alone.
    """
    phase, snapdir, flags = argv[0], Path(argv[1]), argv[2:]
    trainer = Trainer(parse_args(flags))
    try:
        rank = trainer.info.rank
        if phase == "save":
            trainer.train()
            snapdir.mkdir(parents=True, exist_ok=True)
            torch.save(snapshot(trainer), snapdir / f"rank-{rank}.pt")
            return 0
        saved = torch.load(snapdir / f"rank-{rank}.pt", weights_only=True)
        trainer.resume()
        assert trainer.checkpointer is not None
        loads = [(trainer.checkpointer.loaded_from, differences(saved, snapshot(trainer)))]
        if trainer.config.checkpoint_local_dir and trainer.config.checkpoint_dir:
            where = reload_persistent(trainer)
            loads.append((where, differences(saved, snapshot(trainer))))
        failed = False
        for where, problems in loads:
            for line in problems[:10]:
                print(f"rank {rank}: {where}: {line}", flush=True)
            print(f"rank {rank}: step {trainer.step} from {where}: {'exact' if not problems else f'{len(problems)} differences'}", flush=True)
            failed = failed or bool(problems)
        return 1 if failed else 0
    finally:
        trainer.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
