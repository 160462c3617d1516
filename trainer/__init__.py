"""railtrain.trainer: a byte-level transformer LM trainer (DDP / FSDP2, DCP checkpoints).

Modules: ``config`` (flags and pod contract), ``model``, ``data``, ``parallel``,
``checkpoint``, ``train`` (the :class:`~railtrain.trainer.train.Trainer`), and
``__main__`` (``python -m railtrain.trainer``). Importing this package does not
import torch.
"""
