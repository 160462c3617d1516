"""FP8 training through torchao's float8 linear layers (``--mixed-precision fp8``).

What changes: each ``nn.Linear`` of the transformer blocks whose widths are
multiples of 16 (per tensor-parallel shard) becomes a ``torchao.float8.Float8Linear``
(:func:`convert`). Its three matrix products (output, gradient of the input,
gradient of the weight) cast their operands to float8 with dynamic scales,
computed from each tensor's absolute maximum at every call (torchao's
"dynamic scaling"; Micikevicius et al. 2022, "FP8 Formats for Deep Learning"),
and multiply with ``torch._scaled_mm`` on FP8 tensor cores. ``tensorwise``
keeps one scale per tensor; ``rowwise`` one power-of-two scale per row (more
accurate, slower), torchao's two recipes of those names.

What does not: parameters stay float32 (the master weights the optimizer
updates), everything else runs in bf16 as under ``--mixed-precision bf16``
(autocast, or FSDP2's ``MixedPrecisionPolicy``). The token embedding (a lookup,
not a matrix product), the output head (whose logits feed the loss directly;
torchtitan leaves it out too), the norms and the attention's score and value
products are not converted, nor any linear layer with a width that is not a
multiple of 16 (``torch._scaled_mm``'s requirement).

Composition: under FSDP2 with the tensorwise recipe the weights are
all-gathered already cast to float8 (half the bytes of bf16), with the scales
of all converted layers computed in one pass after each optimizer step
(:func:`precompute_scales`); under tensor parallel the tensorwise recipe uses
torchao's float8 parallel styles, which all-gather the activations in float8
(:mod:`railtrain.trainer.tensor_parallel`). Rowwise gathers in bf16. The
parameter names and shapes do not change, so checkpoints move freely between
bf16 and fp8 runs.

Hardware: FP8 matrix units exist from CUDA compute capability 8.9 (Ada; Hopper
is 9.0). Elsewhere :func:`check_device` refuses fp8 unless ``emulate`` is set,
in which case torchao rounds the operands to float8 and multiplies them in
float32: the numerics of fp8 training without its speed, which is how the CPU
tests run it.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import torch
from torch import nn

from railtrain.crds.precision import FP8_MIN_CAPABILITY, SCALED_MM_MULTIPLE, Float8Recipe

if TYPE_CHECKING:
    from railtrain.trainer.config import TrainConfig

RECIPES = tuple(r.value for r in Float8Recipe)
"""The ``--fp8-recipe`` values (torchao's recipe names)."""

ALIGNMENT = SCALED_MM_MULTIPLE
"""Both widths of a converted layer's (per-shard) weight must be multiples of this (``torch._scaled_mm``); the tokens of
a micro-batch too, which the trainer checks before it builds anything (:func:`railtrain.trainer.dims.check_float8_tokens`)."""

NOT_CONVERTED = ("output",)
"""Linear layers left in bf16 by name: the output head (see the module docstring)."""


@contextmanager
def _quiet_torch_warnings() -> Iterator[None]:
    """Silence torch's one-line deprecation notices that importing torchao prints on every rank."""
    logger = logging.getLogger("torch.utils._pytree")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def device_problem(device: torch.device) -> str | None:
    """Why ``device`` cannot run float8 matrix products natively, or ``None`` when it can.

    Returns:
        ``None`` for a CUDA device of compute capability 8.9 or newer
        (:data:`railtrain.crds.precision.FP8_MIN_CAPABILITY`); else a clause
        naming the device, e.g. ``"this process runs on the CPU"`` or
        ``"cuda:0 (NVIDIA A100-SXM4-80GB) has compute capability 8.0"``.
    """
    if device.type != "cuda":
        return f"this process runs on the {device.type.upper()}"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) >= FP8_MIN_CAPABILITY:
        return None
    return f"{device} ({torch.cuda.get_device_name(device)}) has compute capability {major}.{minor}"


def check_device(device: torch.device, emulate: bool) -> None:
    """Refuse fp8 on a device without FP8 matrix units unless it is emulated.

    Raises:
        ValueError: one sentence naming the device and the way out.
    """
    problem = device_problem(device)
    if problem and not emulate:
        need = ".".join(map(str, FP8_MIN_CAPABILITY))
        raise ValueError(
            f"--mixed-precision fp8 needs a GPU of compute capability {need} or newer, but {problem}; "
            "use bf16, or --fp8-emulate (spec.precision.float8.emulate: true) to emulate float8 without its speed-up"
        )


def convertible(module: nn.Module, fqn: str, tp: int = 1) -> bool:
    """Whether the layer at ``fqn`` is converted to float8.

    Args:
        module: a submodule of the model.
        fqn: its dotted name in the model (e.g. ``layers.0.attention.wq``).
        tp: tensor-parallel degree; each rank's shard of a weight must meet the
            alignment (a layer is split along one of its widths; both are checked).

    Returns:
        True for an ``nn.Linear`` not named in :data:`NOT_CONVERTED` whose
        ``in_features`` and ``out_features``, each divided by ``tp``, are whole
        multiples of :data:`ALIGNMENT`.
    """
    if not isinstance(module, nn.Linear) or fqn.split(".")[-1] in NOT_CONVERTED:
        return False
    return all(width % tp == 0 and (width // tp) % ALIGNMENT == 0 for width in (module.in_features, module.out_features))


def float8_config(recipe: str, emulate: bool, fsdp_float8_all_gather: bool):
    """The ``torchao.float8.Float8LinearConfig`` of ``recipe``.

    Args:
        recipe: ``"tensorwise"`` or ``"rowwise"``.
        emulate: multiply in float32 instead of with ``torch._scaled_mm``.
        fsdp_float8_all_gather: FSDP2 gathers weights in float8 (tensorwise only; ignored for rowwise).

    Raises:
        ValueError: an unknown recipe.
    """
    if recipe not in RECIPES:
        raise ValueError(f"--fp8-recipe must be one of {', '.join(RECIPES)}, got {recipe!r}")
    with _quiet_torch_warnings():
        from torchao.float8 import Float8LinearConfig
    base = Float8LinearConfig.from_recipe_name(recipe)
    gather = fsdp_float8_all_gather and recipe == Float8Recipe.TENSORWISE.value
    return dataclasses.replace(base, emulate=emulate, enable_fsdp_float8_all_gather=gather)


def convert(model: nn.Module, recipe: str, emulate: bool, fsdp: bool, tp: int = 1) -> list[str]:
    """Swap the :func:`convertible` linear layers of ``model`` for ``Float8Linear``, in place.

    Call before tensor parallel and FSDP2 wrap the model (torchtitan's order),
    on the full model or one pipeline stage of it.

    Args:
        model: a :class:`railtrain.trainer.model.Transformer` (or a stage), float32 parameters.
        recipe: ``"tensorwise"`` or ``"rowwise"``.
        emulate: see :func:`float8_config`.
        fsdp: whether FSDP2 will wrap the model (turns on float8 all-gather for tensorwise).
        tp: tensor-parallel degree, for :func:`convertible`.

    Returns:
        The dotted names of the converted layers, in model order.

    Raises:
        ValueError: an unknown recipe.
    """
    config = float8_config(recipe, emulate, fsdp)
    with _quiet_torch_warnings():
        from torchao.float8 import convert_to_float8_training
    converted: list[str] = []

    def keep(module: nn.Module, fqn: str) -> bool:
        ok = convertible(module, fqn, tp)
        if ok:
            converted.append(fqn)
        return ok

    convert_to_float8_training(model, config=config, module_filter_fn=keep)
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    return sorted(converted, key=lambda name: order.get(name, 0))


def uses_float8_all_gather(model: nn.Module) -> bool:
    """Whether any layer of ``model`` is a ``Float8Linear`` whose weight FSDP2 gathers in float8."""
    from torchao.float8.float8_linear import Float8Linear

    return any(isinstance(m, Float8Linear) and m.config.enable_fsdp_float8_all_gather for m in model.modules())


def uses_float8_tensor_parallel(model: nn.Module, device_type: str) -> bool:
    """Whether the tensor-parallel plan can use torchao's float8 styles: on CUDA (NCCL moves float8 tensors; gloo
    refuses them, "Invalid scalar type"), when every linear layer of every block is a tensorwise ``Float8Linear``
    (those styles cast and gather for float8 layers only).

    Rowwise layers, blocks with a layer left in bf16, and CPU runs keep the ordinary styles and gather in bf16
    (torchtitan does the same for rowwise).
    """
    if device_type != "cuda":
        return False
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_linear import Float8Linear

    layers = getattr(model, "layers", None)
    linears = [m for block in (layers.values() if layers is not None else ()) for m in block.modules() if isinstance(m, nn.Linear)]
    return bool(linears) and all(
        isinstance(m, Float8Linear) and m.config.cast_config_input.scaling_granularity is ScalingGranularity.TENSORWISE for m in linears
    )


def precompute_scales(model: nn.Module) -> None:
    """After an optimizer step: compute the float8 scales of every FSDP2-sharded float8 weight in one all-reduce.

    Without it each layer would reduce its own weight's maximum during the
    next forward (torchao's ``precompute_float8_dynamic_scale_for_fsdp``). A
    no-op for models without float8 all-gather.
    """
    if uses_float8_all_gather(model):
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(model)


def describe(model: nn.Module, config: "TrainConfig") -> str:
    """The log's precision word under fp8, e.g. ``fp8/tensorwise/emulated/28-layers`` (recipe, emulation, converted layers)."""
    from torchao.float8.float8_linear import Float8Linear

    layers = sum(isinstance(m, Float8Linear) for m in model.modules())
    return "/".join(["fp8", str(config.fp8_recipe)] + (["emulated"] if config.fp8_emulate else []) + [f"{layers}-layers"])
