"""railtrain.trainer: a byte-level transformer LM trainer (DDP, FSDP2/HSDP, tensor and pipeline parallel on one DeviceMesh; checkpoints in memory, local and persistent tiers).

Modules: ``config`` (flags and pod contract), ``model``, ``data``, ``parallel``
(degrees, mesh, data parallel), ``tensor_parallel``, ``pipeline``, ``steps``
(one step's forwards and backwards), ``checkpoint`` (a package: the manager, tiers, I/O, state,
checksums; async saves, fallback), ``metrics`` (Prometheus),
``train`` (the :class:`~railtrain.trainer.train.Trainer`), and
``__main__`` (``python -m railtrain.trainer``). Importing this package does not
import torch.
"""
