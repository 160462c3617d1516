"""``spec.precision``: the number formats a job trains in (API models and their rules, pure).

Three choices of ``compute``, the format of the matrix products:

- ``bf16``: bfloat16 compute, float32 master weights and optimizer state,
  gradients reduced in float32 (the usual mixed precision).
- ``fp8``: as ``bf16``, but the matrix products of the transformer blocks'
  linear layers run in float8 (torchao's float8 training: e4m3 forward
  operands, dynamic scales computed from each tensor's absolute maximum at
  every step; Micikevicius et al. 2022, "FP8 Formats for Deep Learning").
  Hopper-class GPUs run these at about twice the bf16 rate.
- ``fp32``: float32 throughout.

Omitted, the trainer picks bf16 on GPUs and fp32 on CPUs. The pod contract
carries the choice as ``RAILTRAIN_PRECISION``, ``RAILTRAIN_FLOAT8_RECIPE`` and
``RAILTRAIN_FLOAT8_EMULATE`` (:mod:`railtrain.crds.contract`).

The rules below are written once here and enforced by ``railtrain validate``
and, as CEL, by the API server (:data:`railtrain.crds.api.SPEC_RULES`). Which
GPU a pod lands on is unknown here, so the compute capability (8.9 or newer
for FP8) is checked by the trainer at start.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import Field

from railtrain.crds.base import Model

FP8_MIN_CAPABILITY = (8, 9)
"""The oldest CUDA compute capability with FP8 tensor cores (Ada Lovelace; Hopper is 9.0)."""

SCALED_MM_MULTIPLE = 16
"""``torch._scaled_mm`` (the FP8 matrix product on CUDA) needs its operands ``(M, K) @ (K, N)`` with ``K`` and ``N``
multiples of this (torch's checks: "Expected trailing dimension of mat1 to be divisible by 16", "mat2 shape ... must be
divisible by 16"). Of a float8 linear layer's three products, the output and the input gradient contract over its
widths, the weight gradient over the tokens: so both widths of a converted layer and the tokens of every micro-batch
on every rank must be multiples of it (``railtrain.trainer.float8``, ``railtrain.trainer.dims.check_float8_tokens``)."""


class Compute(str, Enum):
    """The number format of the matrix products."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP32 = "fp32"


class Float8Recipe(str, Enum):
    """How float8 scales are computed (torchao's recipe names)."""

    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"


class Float8(Model):
    """Settings of fp8 training: the scaling recipe and whether the float8 matrix products are emulated."""

    recipe: Float8Recipe = Field(
        Float8Recipe.TENSORWISE,
        description="tensorwise: one dynamic scale per tensor (fastest; under FSDP2 the weights are all-gathered in float8); "
        "rowwise: one dynamic power-of-two scale per row (more accurate, slower; weights all-gathered in bf16).",
    )
    emulate: bool = Field(
        False,
        description="Emulate the float8 matrix products in high precision (values rounded to float8, multiplied in float32), so fp8 runs "
        "on devices without FP8 support (CPUs, GPUs below compute capability 8.9); for tests, with no speed-up. Without it the trainer "
        "refuses fp8 on such a device at start.",
    )


class Precision(Model):
    """Number formats of the training run; omitted means bf16 on GPUs and fp32 on CPUs."""

    compute: Compute = Field(
        description="bf16: bfloat16 compute with float32 master weights; fp8: as bf16, with the transformer blocks' linear layers "
        "multiplying in float8 (dynamic scaling; the embedding, the output head and layers whose widths are not multiples of 16 "
        "stay in bf16); fp32: float32 throughout."
    )
    float8: Float8 | None = Field(None, description="Settings of compute fp8; omitted means recipe tensorwise, not emulated.")


FLOAT8_ONLY_WITH_FP8 = (
    "!has(self.precision) || !has(self.precision.float8) || self.precision.compute == 'fp8'",
    "spec.precision.float8 applies only when spec.precision.compute is fp8",
    ".precision.float8",
)
"""(CEL, message, field path) of the rule that float8 settings come with fp8 compute."""

FP8_NEEDS_GPUS = (
    "!has(self.precision) || self.precision.compute != 'fp8' || self.resources.gpus > 0 "
    "|| (has(self.precision.float8) && self.precision.float8.emulate)",
    "spec.precision.compute fp8 needs GPUs (spec.resources.gpus > 0, compute capability 8.9 or newer) "
    "unless spec.precision.float8.emulate is true",
    ".precision.compute",
)
"""(CEL, message, field path) of the rule that fp8 runs on GPUs, or emulated."""


def float8_only_with_fp8(spec: Any) -> bool:
    """Python side of :data:`FLOAT8_ONLY_WITH_FP8` over a ``TrainingJobSpec``: True when valid."""
    p = spec.precision
    return p is None or p.float8 is None or p.compute == Compute.FP8.value


def fp8_has_gpus(spec: Any) -> bool:
    """Python side of :data:`FP8_NEEDS_GPUS` over a ``TrainingJobSpec``: True when valid."""
    p = spec.precision
    if p is None or p.compute != Compute.FP8.value:
        return True
    return spec.resources.gpus > 0 or (p.float8 is not None and p.float8.emulate)


def contract_values(precision: Precision | None) -> dict[str, str]:
    """The pod contract's precision values of a spec.

    Returns:
        ``{"precision": "", "float8_recipe": "", "float8_emulate": ""}`` when
        omitted (the trainer's own default); else the compute format, and for
        fp8 the recipe and ``"1"``/``"0"`` for emulation (the fields of
        :class:`railtrain.crds.contract.PodEnvironment`).
    """
    if precision is None:
        return {"precision": "", "float8_recipe": "", "float8_emulate": ""}
    compute = Compute(precision.compute).value
    if compute != Compute.FP8.value:
        return {"precision": compute, "float8_recipe": "", "float8_emulate": ""}
    f8 = precision.float8 or Float8()
    return {"precision": compute, "float8_recipe": Float8Recipe(f8.recipe).value, "float8_emulate": "1" if f8.emulate else "0"}
