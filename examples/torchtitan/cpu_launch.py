"""Run torchtitan 0.3.0's trainer on CPU (gloo), for the CPU test of the railtrain wiring: ``torchrun cpu_launch.py ...``.

torchtitan 0.3.0 assumes an accelerator: ``torchtitan.tools.utils`` picks ``device_type = ... or "cuda"`` at import, so
on a machine without one it sets a CUDA device and asks NCCL for a process group. Before torchtitan is imported,
this points that module's ``device_type``/``device_module`` at the CPU (with the few memory-monitor calls torchtitan
makes answered for a CPU), then runs ``torchtitan.train`` unchanged. :func:`llama3_debugmodel_cpu` is
``railtrain_titan.llama3_debugmodel`` with plain causal SDPA attention, because the debugmodel's FlexAttention has no
backward on CPU (torch 2.15: "FlexAttention does not support backward on CPU"). On a GPU none of this is used.
"""

from __future__ import annotations

import runpy
import types

import torch


def _cpu_device_module() -> types.SimpleNamespace:
    """``torch.cpu`` plus the calls torchtitan makes of a device module (name, properties, memory stats)."""
    cpu = types.SimpleNamespace(**{name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("__")})
    cpu.get_device_name = lambda *args: "cpu"
    cpu.get_device_properties = lambda *args: types.SimpleNamespace(total_memory=16 << 30, name="cpu")
    cpu.memory_stats = lambda *args: {}
    cpu.current_device = lambda: 0  # torchtitan passes it as a barrier's device id
    cpu.reset_peak_memory_stats = cpu.empty_cache = lambda *args: None
    return cpu


def llama3_debugmodel_cpu():
    """The wired debugmodel config with FlexAttention replaced by causal SDPA (torchtitan's ``ScaledDotProductAttention``)."""
    from railtrain_titan import llama3_debugmodel
    from torchtitan.models.common.attention import (
        FlexAttention,
        ScaledDotProductAttention,
    )

    config = llama3_debugmodel()
    for _, _, parent, attr in list(config.model_spec.model.traverse(FlexAttention.Config)):
        setattr(parent, attr, ScaledDotProductAttention.Config())
    return config


if __name__ == "__main__":
    import torchtitan.tools.utils as titan_utils

    titan_utils.device_type, titan_utils.device_module = "cpu", _cpu_device_module()
    runpy.run_module("torchtitan.train", run_name="__main__")
