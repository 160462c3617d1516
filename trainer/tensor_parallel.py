"""Tensor parallel (Megatron-LM style) with sequence parallel, through torch's DTensor parallel styles.

Inside each block (Shoeybi et al. 2019, "Megatron-LM", section 3): the
attention's ``wq``/``wk``/``wv`` are split column-wise, so each of the ``tp``
ranks computes ``n_heads / tp`` whole heads, and ``wo`` row-wise, whose
partial sums are reduced; the MLP's ``w1``/``w3`` column-wise and ``w2``
row-wise. Between those regions the activations are sharded along the
sequence (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", section 4.2.2): the RMSNorms run on ``seq / tp`` tokens
(``SequenceParallel``), the row-wise layers reduce-scatter instead of
all-reduce, and the attention and MLP inputs are all-gathered. The embedding
is split row-wise over the vocabulary and the output head column-wise, its
logits gathered whole so the loss is the ordinary cross-entropy.

This is torchtitan's plan for LLaMA (``parallelize_llama.apply_tp``). Every
parameter becomes a DTensor on the ``tp`` mesh dimension; FSDP2 then shards
them further over the data-parallel dimensions.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def block_plan(float8: bool = False) -> dict[str, object]:
    """The parallel style of each submodule of a :class:`~railtrain.trainer.model.TransformerBlock`.

    Its input and output are sharded along the sequence (dimension 1).

    Args:
        float8: use torchao's float8 styles (the blocks' linear layers are
            tensorwise ``Float8Linear``, :mod:`railtrain.trainer.float8`): the
            attention and MLP inputs are cast to float8 before they are
            all-gathered, and the row-wise layers' gradients likewise, so those
            collectives move half the bytes (torchtitan's float8 TP plan).
    """
    colwise, rowwise, prepare = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if float8:
        from torchao.float8.float8_tensor_parallel import Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput

        colwise, rowwise, prepare = Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput
    return {
        "attention_norm": SequenceParallel(),
        "attention": prepare(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
        "attention.wq": colwise(),
        "attention.wk": colwise(),
        "attention.wv": colwise(),
        "attention.wo": rowwise(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": colwise(),
        "feed_forward.w3": colwise(),
        "feed_forward.w2": rowwise(output_layouts=Shard(1)),
    }


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh, float8: bool = False) -> None:
    """Tensor-parallelise ``model`` in place over ``tp_mesh`` (1-D).

    Args:
        model: a :class:`~railtrain.trainer.model.Transformer` or a pipeline
            stage of it (the parts it lacks are skipped). A stage without
            the embedding takes, and a stage without the output head returns,
            a hidden state sharded along the sequence, which is what travels
            between pipeline stages.
        float8: the blocks use torchao's float8 styles (:func:`block_plan`);
            the embedding and the output head, never converted, keep the ordinary ones.
    """
    outer: dict[str, object] = {}
    if model.tok_embeddings is not None:
        outer["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if model.norm is not None:
        outer["norm"] = SequenceParallel()
    if model.output is not None:
        outer["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    if outer:
        parallelize_module(model, tp_mesh, outer)
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, block_plan(float8))
