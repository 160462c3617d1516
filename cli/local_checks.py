"""``railtrain run --local``: what is checked and changed before the gang starts.

* :func:`with_steps`: ``--steps N`` of ``run --local`` becomes the trainer's own
  ``--steps`` in ``spec.args`` (the one place the trainer takes its step count
  from), so the processes see exactly what a pod of the edited manifest would.
* :func:`check_faults`: a ``--fault-*`` flag whose rank is outside the gang,
  or whose step comes after the job's last step, would never fire; it is
  refused before anything starts.
* :func:`size_warning`, :func:`memory_warning`: a gang far bigger than this
  machine is started (the user may know better), after one line with the numbers.

Everything here is pure: plain data in, plain data out.
"""

from __future__ import annotations

from typing import Any

from railtrain.cli.errors import CliError
from railtrain.crds.api import TrainingJob

TRAINER_MODULE = "railtrain.trainer"
OVERSUBSCRIBED = 2
"""Processes per CPU core beyond which :func:`size_warning` warns (each rank wants at least one core)."""
TRAINING_BYTES_PER_PARAM = 16
"""float32 weights, gradients and AdamW's two moments: 4 × 4 bytes per parameter, before activations."""


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` or ``flag=VALUE`` in ``args`` (argparse's last-wins rule), or ``None``."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def runs_trainer(job: TrainingJob) -> bool:
    """Whether ``spec.command``/``spec.args`` start railtrain's trainer (``-m railtrain.trainer``)."""
    argv = [*job.spec.command, *job.spec.args]
    return any(a == "-m" and b == TRAINER_MODULE for a, b in zip(argv, argv[1:])) or f"-m{TRAINER_MODULE}" in argv


def job_steps(job: TrainingJob) -> int | None:
    """The trainer's last step as ``spec.args`` sets it (``--steps N``), or ``None`` when the args do not say."""
    text = flag_value(list(job.spec.args), "--steps")
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def with_steps(job: TrainingJob, steps: int) -> TrainingJob:
    """``job`` whose trainer trains until step ``steps``: every ``--steps`` of ``spec.args`` gets the new value.

    When ``spec.args`` has no ``--steps`` and the command runs railtrain's
    trainer, ``--steps N`` is appended to ``spec.args``.

    Raises:
        CliError: ``steps`` < 1, or the command is not railtrain's trainer and
            its args have no ``--steps`` to change (exit status 2).
    """
    if steps < 1:
        raise CliError(f"--steps must be >= 1 (the step to train until), got {steps}", exit_code=2)
    args, found = [], False
    for i, arg in enumerate(job.spec.args):
        if i > 0 and job.spec.args[i - 1] == "--steps":
            args.append(str(steps))
            found = True
        elif arg.startswith("--steps="):
            args.append(f"--steps={steps}")
            found = True
        else:
            args.append(arg)
    if not found:
        if not runs_trainer(job):
            raise CliError("--steps: spec.args has no --steps to change and spec.command is not railtrain's trainer (-m railtrain.trainer)", exit_code=2)
        args += ["--steps", str(steps)]
    return job.model_copy(update={"spec": job.spec.model_copy(update={"args": args})})


def with_spares(job: TrainingJob, spares: int) -> TrainingJob:
    """``job`` with ``spec.spares`` set to ``spares`` (``run --local --spares N``), checked as the manifest would be.

    Raises:
        CliError: ``spares`` breaks a rule of spec.spares (e.g. without ``spec.runPolicy.restartInPlace``): the
            rule's sentence, naming ``--spares`` (exit status 2).
    """
    from pydantic import ValidationError

    from railtrain.crds.api import TrainingJobSpec

    try:
        spec = TrainingJobSpec.model_validate(job.spec.model_dump() | {"spares": spares})
    except ValidationError as err:
        why = "; ".join(str(e.get("ctx", {}).get("error", e["msg"])) for e in err.errors())
        raise CliError(f"--spares {spares}: {why}", exit_code=2) from None
    return job.model_copy(update={"spec": spec})


def check_faults(faults: dict[str, Any], flags: dict[str, str], world_size: int, last_step: int | None) -> None:
    """Refuse fault flags that could never fire in this job.

    Args:
        faults: fault kind to its parsed fault (:class:`~railtrain.crds.contract.Faults` field values).
        flags: fault kind to its flag name (``--fault-kill``).
        world_size: the job's world size; a fault's ``rank`` must be below it (``-1``: every rank, where allowed).
        last_step: the job's last step (:func:`job_steps`); ``None`` when unknown.

    Raises:
        CliError: one sentence naming the flag, the value and the job's bound (exit status 2).
    """
    for kind, fault in faults.items():
        flag = flags[kind]
        rank = getattr(fault, "rank", None)
        if rank is not None and rank >= world_size:
            raise CliError(f"{flag}: rank={rank} is not in this job: its ranks are 0 to {world_size - 1} (world size {world_size})", exit_code=2)
        key = "from_step" if hasattr(fault, "from_step") else "step"
        step = getattr(fault, key, None)
        if last_step is not None and step is not None and step > last_step:
            raise CliError(f"{flag}: {key}={step} comes after the job's last step {last_step} (--steps in spec.args): it would never fire", exit_code=2)


def size_warning(world_size: int, cores: int | None) -> str | None:
    """One line when the gang has more than :data:`OVERSUBSCRIBED` processes per CPU core of this machine, else ``None``."""
    if not cores or world_size <= OVERSUBSCRIBED * cores:
        return None
    return (
        f"warning: this job starts {world_size} processes on {cores} CPU {'core' if cores == 1 else 'cores'} ({world_size / cores:.0f} per core): "
        "it was sized for a cluster and will be very slow here, if it fits in memory at all (Ctrl-C stops it)"
    )


def model_params(job: TrainingJob) -> tuple[str, int] | None:
    """``(preset, parameters)`` of railtrain's trainer's ``--preset`` in ``spec.args`` (default ``tiny``), or ``None``
    when the command is not railtrain's trainer or the preset is unknown (the trainer then says so itself)."""
    from railtrain.trainer.presets import PRESETS  # torch-free

    if not runs_trainer(job):
        return None
    preset = flag_value(list(job.spec.args), "--preset") or "tiny"
    return (preset, PRESETS[preset].num_params()) if preset in PRESETS else None


def memory_warning(job: TrainingJob, memory_bytes: int | None) -> str | None:
    """One line when the model's training state alone exceeds this machine's memory, else ``None``.

    The state is :data:`TRAINING_BYTES_PER_PARAM` per parameter for each data-parallel
    replica (``spec.parallelism.data``; FSDP, tensor and pipeline parallelism split one
    replica across ranks; without ``spec.parallelism`` every rank is a replica); the
    context-parallel ranks of a ring each hold a replica under plain DDP and share one
    otherwise, as the trainer wraps them (FSDP2 over fsdp × context,
    docs/parallelism.md). Activations and the processes themselves come on top.
    """
    found = model_params(job)
    if not found or not memory_bytes:
        return None
    preset, params = found
    spec = job.spec
    par = spec.parallelism
    if par is None:
        replicas = spec.world_size  # no parallelism: plain DDP
    else:
        replicas = par.data * (par.context if par.fsdp == 1 and par.tensor == 1 else 1)
    need = params * TRAINING_BYTES_PER_PARAM * replicas
    if need <= memory_bytes:
        return None
    return (
        f"warning: the {preset} model ({params / 1e9:.2f} billion parameters) needs about {need / 2**30:.0f} GiB for weights, "
        f"gradients and AdamW state ({TRAINING_BYTES_PER_PARAM} bytes per parameter × {replicas} data-parallel {'replica' if replicas == 1 else 'replicas'}); "
        f"this machine has {memory_bytes / 2**30:.0f} GiB"
    )
