"""The trainer's own checks on a TrainingJob's command line, run before any pod starts (torch-free).

``railtrain validate``, ``submit`` and ``run --local`` call :func:`problems`
when ``spec.command``/``spec.args`` start ``-m railtrain.trainer``. It parses
the arguments with the trainer's own parser (:func:`railtrain.trainer.config.parse_args`),
fills what the pod contract would (the parallel degrees the operator renders
from ``spec.parallelism``, the NVLink domain of ``spec.topology``, the precision of
``spec.precision``) and applies the trainer's own checks on the degrees
against the preset and the batch, and under fp8 on the tokens per micro-batch
(:mod:`railtrain.trainer.dims`): the same
code the trainer runs at start, so a typo in a flag fails in a second on the
submitting machine instead of after the gang was placed and its pods pulled
their images.

What needs the pod (the dataset's contents, the devices, the checkpoint
directories) is not checked here.
"""

from __future__ import annotations

from typing import Sequence

from railtrain.crds.api import TrainingJobSpec
from railtrain.crds.precision import contract_values
from railtrain.trainer.config import LaunchContext, apply_launch_context, model_shape, parse_args
from railtrain.trainer.dims import FLAG_OF_FIELD, auto_microbatches, check_float8_tokens, check_model_fits, resolve_dims

TRAINER_MODULE = "railtrain.trainer"
SPEC_DEGREE_NAMES = {field: f"spec.parallelism.{field}" for field in FLAG_OF_FIELD}
"""How a sentence names a degree that came from the manifest's ``spec.parallelism`` (no degree flag in ``spec.args``)."""


def trainer_argv(command: Sequence[str], args: Sequence[str]) -> list[str] | None:
    """The trainer's own arguments: what follows ``-m railtrain.trainer`` in ``command + args``.

    Returns:
        The list (possibly empty), or ``None`` when the command does not run
        railtrain's trainer, or when an argument holds a ``$(VAR)`` reference
        (Kubernetes expands it in the pod; its value is unknown here).
    """
    argv = [*command, *args]
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] == TRAINER_MODULE:
            rest = argv[i + 2 :]
        elif arg == f"-m{TRAINER_MODULE}":
            rest = argv[i + 1 :]
        else:
            continue
        return None if any("$(" in a for a in rest) else rest
    return None


def problems(spec: TrainingJobSpec) -> list[str]:
    """Every problem the trainer would find in its command line and degrees at start, one sentence each.

    Args:
        spec: a validated TrainingJob spec.

    Returns:
        Sentences naming the field the user wrote: ``spec.args:`` (e.g. ``spec.args: unrecognized
        arguments: --stesp 5 ...``, ``spec.args: --tp 3 must divide the model's
        n_heads (4)``), or the ``spec.parallelism`` degree when the degrees came from
        there (``spec.parallelism.tensor=3 must divide the model's hidden_dim (512)``); empty when the command is not railtrain's trainer, or
        when the trainer would accept it. The trainer stops at its first
        problem, and so does this check.
    """
    argv = trainer_argv(spec.command, spec.args)
    if argv is None:
        return []
    try:
        flags = parse_args(argv)
    except SystemExit:  # --help: the trainer prints it and exits 0
        return []
    except ValueError as err:
        return [f"spec.args: {err}"]
    sizes = spec.node_counts() if spec.elastic is not None else [spec.nodes]
    for nodes in sizes:
        par = spec.effective_parallelism(nodes)
        degrees = {"data": par.data, "fsdp": par.fsdp, "tensor": par.tensor, "pipeline": par.pipeline, "context": par.context}
        world = nodes * spec.procs_per_node
        where = f" (with {nodes} of the elastic gang's nodes)" if len(sizes) > 1 else ""
        try:
            config = apply_launch_context(flags, LaunchContext(parallelism=degrees))
            dims = resolve_dims(config.parallel, degrees, world, spec.procs_per_node, config.tp, config.pp, config.cp, spec.topology.nvlink_domain)
            if config.batch_size % dims.dp_degree:
                d = dims.degrees
                raise ValueError(
                    f"--batch-size {config.batch_size} is not divisible by the data-parallel degree {dims.dp_degree} "
                    f"(data {d.data} × fsdp {d.fsdp}: the ranks that each get a different slice of the batch)"
                )
            local_batch = config.batch_size // dims.dp_degree
            per_part = local_batch // config.grad_accum_steps
            micro = (config.pp_microbatches or auto_microbatches(max(per_part, 1), dims.pp)) if dims.pp > 1 else 1
            flagged = bool(config.parallel or config.tp or config.pp or config.cp)  # the flags decide (resolve_dims)
            names = FLAG_OF_FIELD if flagged else SPEC_DEGREE_NAMES
            check_model_fits(dims, model_shape(config), config.seq_len, local_batch, config.grad_accum_steps, micro, names)
            if (flags.mixed_precision or contract_values(spec.precision)["precision"]) == "fp8":
                source = "--mixed-precision fp8" if flags.mixed_precision else "spec.precision.compute fp8"
                check_float8_tokens(dims, config.seq_len, local_batch, config.grad_accum_steps, micro, source)
        except ValueError as err:
            said = str(err)  # a sentence that starts with the manifest's own field names it; the rest are spec.args'
            return [f"{said}{where}" if said.startswith("spec.") else f"spec.args: {said}{where}"]
    return []
