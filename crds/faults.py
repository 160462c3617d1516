"""Fault-injection variables: tests, benchmarks and drills make a rank fail on purpose.

Part of the pod-environment contract (re-exported by :mod:`railtrain.crds.contract`,
which callers import). Every variable is off by default; each (except the plain-integer
:data:`ENV_FAULT_HOLD_CHECKPOINT_STEP`) holds comma-separated ``key=value`` pairs, e.g.
``RAILTRAIN_FAULT_BITFLIP="rank=1,step=20,mode=once"``, parsed into :class:`Faults` by
:func:`read_faults` and rendered by :func:`fault_env`. This module imports neither kopf
nor torch.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

from railtrain.crds.contract_errors import ContractError, coerce

ENV_FAULT_HOLD_CHECKPOINT_STEP = "RAILTRAIN_FAULT_HOLD_CHECKPOINT_STEP"
"""Fault injection, for tests only: the background writer of this step's checkpoint stops
after writing its data, before any manifest, and never finishes (the process is then killed)."""
ENV_FAULT_BITFLIP = "RAILTRAIN_FAULT_BITFLIP"
"""Flip bit ``bit`` of element ``index`` of the parameters (``target=param``, flattened in
``named_parameters`` order of the rank's local shard; the first parameter) or of the model's
output (``target=activation``, the step's first forward only) on ``rank`` at ``step``;
``mode=once`` (a transient fault) or ``persistent`` (the device stays bad: from ``step`` on the
activation flip repeats in every forward and the rank's known-answer test is corrupted too).
With replica groups (``spec.faultTolerance``), ``group=G`` limits it to replica group ``G``'s ``rank``
(default ``-1``: that rank of every group, whose copies then stay alike)."""
ENV_FAULT_SLOW = "RAILTRAIN_FAULT_SLOW"
"""Make ``rank``'s compute ``factor`` times slower from ``from_step`` on (a straggler)."""
ENV_FAULT_HANG = "RAILTRAIN_FAULT_HANG"
"""Hang ``rank`` at ``step``: ``kind=compute`` sleeps forever inside the step's compute,
``kind=collective`` never enters the step's next collective (the others wait in it),
``kind=init`` never joins the process group (the others wait in its set-up; ``step`` is ignored, give 0)."""
ENV_FAULT_KILL = "RAILTRAIN_FAULT_KILL"
"""``rank`` kills itself (SIGKILL) at ``step``, after the step's compute."""
ENV_FAULT_BAD_BATCH = "RAILTRAIN_FAULT_BAD_BATCH"
"""The batch of ``step`` on ``rank`` is poisoned: its loss is not finite, every time it is
computed (a data problem, not hardware). ``rank=-1``: on every rank."""
FAULT_VARIABLES = (ENV_FAULT_BITFLIP, ENV_FAULT_SLOW, ENV_FAULT_HANG, ENV_FAULT_KILL, ENV_FAULT_BAD_BATCH, ENV_FAULT_HOLD_CHECKPOINT_STEP)


@dataclass(frozen=True)
class BitFlipFault:
    """See :data:`ENV_FAULT_BITFLIP`."""

    rank: int
    step: int
    mode: str = "once"
    bit: int = 0
    index: int = 0
    target: str = "param"
    group: int = -1


@dataclass(frozen=True)
class SlowFault:
    """See :data:`ENV_FAULT_SLOW`."""

    rank: int
    factor: float
    from_step: int = 1


@dataclass(frozen=True)
class HangFault:
    """See :data:`ENV_FAULT_HANG`."""

    rank: int
    step: int
    kind: str = "compute"


@dataclass(frozen=True)
class KillFault:
    """See :data:`ENV_FAULT_KILL`."""

    rank: int
    step: int


@dataclass(frozen=True)
class BadBatchFault:
    """See :data:`ENV_FAULT_BAD_BATCH`."""

    step: int
    rank: int = -1


@dataclass(frozen=True)
class Faults:
    """Every injected fault of a run; ``None`` fields are off.

    ``hold_checkpoint_step`` is :data:`ENV_FAULT_HOLD_CHECKPOINT_STEP` (a plain integer,
    kept for compatibility); the others are parsed from their key=value variables.
    """

    bitflip: BitFlipFault | None = None
    slow: SlowFault | None = None
    hang: HangFault | None = None
    kill: KillFault | None = None
    bad_batch: BadBatchFault | None = None
    hold_checkpoint_step: int | None = None

    def any(self) -> bool:
        """Whether any fault is set."""
        return any(getattr(self, f.name) is not None for f in fields(self))


_FAULT_KINDS: dict[str, tuple[str, type]] = {
    "bitflip": (ENV_FAULT_BITFLIP, BitFlipFault),
    "slow": (ENV_FAULT_SLOW, SlowFault),
    "hang": (ENV_FAULT_HANG, HangFault),
    "kill": (ENV_FAULT_KILL, KillFault),
    "bad_batch": (ENV_FAULT_BAD_BATCH, BadBatchFault),
}
_FAULT_CHOICES = {"mode": ("once", "persistent"), "target": ("param", "activation"), "kind": ("compute", "collective", "init")}


def format_fault(fault: Any) -> str:
    """A fault dataclass as its variable's value, ``key=value,...`` (every field)."""
    return ",".join(f"{f.name}={getattr(fault, f.name)}" for f in fields(fault))


def parse_fault(kind: str, text: str) -> Any:
    """Parse one fault variable's value into the dataclass of ``kind`` (a :class:`Faults` field).

    Raises:
        ContractError: an unknown key, a missing required key, a bad value; names the variable.
    """
    variable, cls = _FAULT_KINDS[kind]
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, raw = (x.strip() for x in part.partition("="))
        if not sep or key not in known:
            raise ContractError(f"{variable} must be comma-separated key=value pairs of {', '.join(known)}, got {text!r}")
        values[key] = coerce(known[key].type, raw, f"{variable} {key}")
        if key in _FAULT_CHOICES and values[key] not in _FAULT_CHOICES[key]:
            raise ContractError(f"{variable} {key} must be one of {', '.join(_FAULT_CHOICES[key])}, got {raw!r}")
    missing = [n for n, f in known.items() if f.default is MISSING and n not in values]
    if missing:
        raise ContractError(f"{variable} needs {', '.join(missing)}, got {text!r}")
    fault = cls(**values)
    if any(isinstance(getattr(fault, n), int) and getattr(fault, n) < (-1 if (n == "rank" and kind == "bad_batch") or n == "group" else 0) for n in known):
        raise ContractError(f"{variable}: integers must be >= 0, got {text!r}")
    if kind == "slow" and fault.factor < 1:
        raise ContractError(f"{variable} factor must be >= 1, got {fault.factor}")
    return fault


def fault_env(faults: Faults) -> dict[str, str]:
    """The variables of the faults that are set."""
    out = {variable: format_fault(getattr(faults, kind)) for kind, (variable, _) in _FAULT_KINDS.items() if getattr(faults, kind) is not None}
    if faults.hold_checkpoint_step is not None:
        out[ENV_FAULT_HOLD_CHECKPOINT_STEP] = str(faults.hold_checkpoint_step)
    return out


def read_faults(environ: Mapping[str, str]) -> Faults:
    """Parse every fault variable present in ``environ`` (empty values count as absent).

    Raises:
        ContractError: a malformed value; the message names the variable.
    """
    kwargs: dict[str, Any] = {kind: parse_fault(kind, environ[var]) for kind, (var, _) in _FAULT_KINDS.items() if environ.get(var)}
    hold = environ.get(ENV_FAULT_HOLD_CHECKPOINT_STEP)
    if hold:
        kwargs["hold_checkpoint_step"] = coerce(int, hold, ENV_FAULT_HOLD_CHECKPOINT_STEP)
    return Faults(**kwargs)


def spent_faults(env: Mapping[str, str], messages: list[str | None]) -> set[str]:
    """The fault variables of ``env`` that a failed attempt has met: step ≤ its verdict's step, or all without a step.

    A fault is an event, not a property of the job: a restarted attempt that met it again at the same step
    would never finish. ``railtrain run --local`` drops these for its next gangs, the pod-side supervisor for
    its next in-place attempts.

    Args:
        env: a node's environment.
        messages: the failed attempt's termination messages (None: none written).
    """
    from railtrain.crds.verdicts import parse_termination_message

    steps = [v["step"] for m in messages if (v := parse_termination_message(m)) and v["step"] is not None]
    present = {k for k in env if k in FAULT_VARIABLES}
    if not steps:
        return present
    kind_of = {variable: kind for kind, (variable, _) in _FAULT_KINDS.items()}
    reached, out = max(steps), set()
    for variable in present:
        kind = kind_of.get(variable)
        try:
            fault = parse_fault(kind, env[variable]) if kind else None
        except ContractError:
            fault = None
        at = getattr(fault, "step", getattr(fault, "from_step", None)) if fault is not None else None
        if at is None or at <= reached:
            out.add(variable)
    return out


@dataclass(frozen=True)
class KillGroupFault:
    """A whole replica group killed at a step (``railtrain run --local --fault-kill-group group=G,step=S``; spec.faultTolerance).

    Local runs only, no variable of its own: once the group's rank 0 has logged step ``step`` or a later one (its
    first launch; steps are logged every ``--log-every`` steps) and every other group has logged ``step − 1`` or a
    later one (they are training too), the runner SIGKILLs every process of the group at once, as when the
    group's machines are lost, and replaces the group; its replacement gets no fault.
    """

    group: int
    step: int


def parse_kill_group(text: str, flag: str = "--fault-kill-group") -> KillGroupFault:
    """Parse ``group=G,step=S`` (both whole numbers ≥ 0; ``step`` ≥ 1).

    Raises:
        ContractError: an unknown or missing key, or a bad value; the message names ``flag``.
    """
    return KillGroupFault(**_where_and_step(text, flag, "group"))


def _where_and_step(text: str, flag: str, where: str) -> dict[str, int]:
    """``<where>=W,step=S`` as ``{where: W, "step": S}`` (``W`` ≥ 0, ``S`` ≥ 1).

    Raises:
        ContractError: an unknown or missing key, or a bad value; the message names ``flag``.
    """
    values: dict[str, int] = {}
    for part in text.split(","):
        key, sep, raw = (x.strip() for x in part.partition("="))
        if not sep or key not in (where, "step"):
            raise ContractError(f"{flag} must be comma-separated key=value pairs of {where}, step, got {text!r}")
        values[key] = coerce(int, raw, f"{flag} {key}")
    if set(values) != {where, "step"}:
        raise ContractError(f"{flag} needs {where} and step, got {text!r}")
    if values[where] < 0 or values["step"] < 1:
        raise ContractError(f"{flag}: {where} must be >= 0 and step >= 1, got {text!r}")
    return values


@dataclass(frozen=True)
class LoseNodeFault:
    """A node of the gang lost at a step (``railtrain run --local --fault-lose-node node=K,step=S``; ``spec.spares``).

    Local runs only, no variable of its own: once node rank 0 has logged step ``step`` or a later one (the first
    gang; steps are logged every ``--log-every`` steps), the runner SIGKILLs every process of local node ``node``
    (its supervisor and workers) at once, as when its machine is lost. A hot spare takes its rank; without one
    the gang restarts.
    """

    node: int
    step: int


def parse_lose_node(text: str, flag: str = "--fault-lose-node") -> LoseNodeFault:
    """Parse ``node=K,step=S`` (``node`` ≥ 0, ``step`` ≥ 1).

    Raises:
        ContractError: an unknown or missing key, or a bad value; the message names ``flag``.
    """
    return LoseNodeFault(**_where_and_step(text, flag, "node"))
