"""torchrun's own restarts in a railtrain job: refused by one rule pair (pure; no torch).

torchrun (``torch.distributed.run``) can restart its node's worker group by
itself, ``--max-restarts N`` times (flag or the ``PET_MAX_RESTARTS`` variable
its parser reads in place of the flag). In a railtrain gang that is a hang, not
a recovery: the agent of one node restarts its workers and waits for new peers
at the rendezvous while the other nodes' ranks sit in their collective
("Gloo connectFullMesh failed" for the whole ``gangTimeoutSeconds`` or longer),
and the operator never sees a failed rank to restart the gang for. Restarts are
the operator's: it restarts the whole gang on every node, bounded by
``spec.runPolicy.backoffLimit`` (and ``spec.runPolicy.failurePolicy``), or,
with ``spec.runPolicy.restartInPlace``, railtrain's own pod-side supervisor
restarts every rank's processes in place by the same rule
(:data:`SUPERVISOR`, :mod:`railtrain.crds.supervisor`). So a nonzero torchrun restart count is
refused by ``railtrain validate`` and ``submit`` and by the operator (a job
created with kubectl: phase Failed, reason InvalidSpec, the same sentence), from
:data:`railtrain.crds.api.MODEL_RULES`. The API server does not check the flag:
a CEL regular expression over every word of command and args exceeds the CRD's
estimated cost budget (10^7 per rule, 10^8 for the CRD, which the pod template's
rules nearly fill) unless both lists are bounded far below what a pod accepts
(measured: about 20 units per character, 2.2 x the limit at 1 M characters).
``PET_MAX_RESTARTS`` in ``spec.env`` is cheap to check and is refused by CEL too
(:data:`railtrain.crds.api.SPEC_RULES`).

What counts as torchrun's restart flag (:data:`RESTART_FLAG`, one regular
expression, kept in the subset RE2 also reads should CEL check it one day):
the command and args joined by spaces (so a shell ``-c`` string is read too)
name the launcher (``torchrun``, ``python -m torch.distributed.run`` or
``-m torch.distributed.launch``) and, anywhere after it, ``--max-restarts`` or
``--max_restarts`` (or a prefix of either, which torchrun's argparse also
accepts), with ``=`` or a separate value that is not all zeros (``0`` is
torchrun's default and allowed). A training script's own option of that name
after the script is refused too: the rule does not parse torchrun's options, so
name the script's option otherwise.
"""

from __future__ import annotations

import re
from typing import Any

LAUNCHER = r"""(?:(?:^|[\s/;&|('"])torchrun|-m\s*torch\.distributed\.(?:run|launch))(?:\s|$)"""
"""torchrun by name or path, or the launcher modules through ``python -m``."""

FLAG = r"""['"]?(?P<flag>--max(?:[-_](?:r(?:e(?:s(?:t(?:a(?:r(?:t(?:s)?)?)?)?)?)?)?)?)?(?:=|['"]?\s+)['"]?0*[^0\s'"])"""
"""``--max-restarts``/``--max_restarts`` or a prefix argparse accepts (never ``--max-steps`` and the like), then a value that is not all zeros."""

RESTART_FLAG = rf"(?s){LAUNCHER}(?:.*?\s)?{FLAG}"
"""The whole rule over ``" ".join(command + args)``: the launcher, then a nonzero restart flag after it."""

RESTART_ENV = "PET_MAX_RESTARTS"
"""The variable torchrun reads for ``--max-restarts`` when the flag is not given (torch.distributed.argparse_util.env)."""

NO_RESTARTS = ("", "0")
"""The ``PET_MAX_RESTARTS`` values allowed: unset (empty) or torchrun's default 0."""

MAX_ENV_ITEMS = 256
"""Bound of ``spec.env`` (the bound of a pod template container's env, :data:`railtrain.crds.corev1.MAX_ITEMS`), so
the CEL rule over it stays cheap in kube-apiserver's cost estimate."""

FLAG_MESSAGE = (
    "spec.command and spec.args must not give torchrun a nonzero --max-restarts (or --max_restarts): restarts are the operator's, "
    "which restarts the whole gang on every node within spec.runPolicy.backoffLimit, while torchrun's own restart of one node's "
    "workers leaves the other nodes waiting (the gang hangs); remove the flag or set it to 0"
)
ENV_MESSAGE = (
    f"spec.env may set {RESTART_ENV} (torchrun's --max-restarts) only to 0: restarts are the operator's, "
    "which restarts the whole gang on every node within spec.runPolicy.backoffLimit; remove it or set it to 0"
)

_FLAG = re.compile(RESTART_FLAG, re.ASCII)  # \s as RE2 reads it


def restart_flag(command: list[str], args: list[str]) -> str | None:
    """The torchrun restart flag (with its value) that ``command`` and ``args`` pass, or None.

    Args:
        command: ``spec.command`` (the container's entrypoint).
        args: ``spec.args``.

    Returns:
        The text of the flag and its value as written (e.g. ``--max-restarts=2``),
        when :data:`RESTART_FLAG` matches the joined words; else None.
    """
    if not command:
        return None  # the image's ENTRYPOINT, not known here
    joined = " ".join(command) + (" " + " ".join(args) if args else "")
    match = _FLAG.search(joined)
    if match is None:
        return None
    rest = re.match(r"\S*", joined[match.end():]).group(0)  # the value's remaining characters
    return (joined[match.start("flag"):match.end()] + rest).replace("'", "").replace('"', "")


def no_torchrun_restarts(spec: Any) -> bool:
    """The rule over a :class:`railtrain.crds.api.TrainingJobSpec`: True when command and args give torchrun no nonzero restart count."""
    return restart_flag(list(spec.command), list(spec.args)) is None


def no_restart_env(spec: Any) -> bool:
    """The rule over a spec's ``env``: True unless :data:`RESTART_ENV` is set to a value that is not all zeros."""
    return not any(e.name == RESTART_ENV and e.value not in NO_RESTARTS for e in spec.env)


def flag_detail(spec: Any) -> str:
    """The flag a refused spec passes, quoted for ``railtrain validate``'s sentence."""
    return f"found {restart_flag(list(spec.command), list(spec.args))!r}"


def env_detail(spec: Any) -> str:
    """The value a refused spec gives :data:`RESTART_ENV`."""
    value = next(e.value for e in spec.env if e.name == RESTART_ENV and e.value not in NO_RESTARTS)
    return f"{RESTART_ENV}={value!r}"


ENV_CEL = f"!has(self.env) || self.env.all(e, e.name != '{RESTART_ENV}' || !has(e.value) || e.value in {list(NO_RESTARTS)!r})"
"""The environment rule as CEL."""


SUPERVISOR = ("python", "-m", "railtrain.crds.supervisor", "--")
"""The entry of a gang pod whose job restarts in place (``spec.runPolicy.restartInPlace``): the pod-side supervisor
(:mod:`railtrain.crds.supervisor`) runs ``spec.command`` + ``spec.args`` after it, and restarts them in the running pod
when the one rule says so. It needs ``python`` with railtrain installed in the image, as ``railtrain.trainer`` does."""


def entry_command(spec: Any) -> list[str]:
    """The training container's ``command`` for a :class:`railtrain.crds.api.TrainingJobSpec`: ``spec.command``, behind
    :data:`SUPERVISOR` when ``spec.runPolicy.restartInPlace`` is true (``[]``: the image's ENTRYPOINT, never supervised)."""
    command = list(spec.command)
    return [*SUPERVISOR, *command] if command and spec.run_policy.restart_in_place else command


def supervised(command: list[str]) -> tuple[list[str], list[str]]:
    """``(supervisor prefix, the command it runs)`` of a container command; the prefix is ``[]`` when not supervised."""
    n = len(SUPERVISOR)
    return (list(SUPERVISOR), command[n:]) if tuple(command[:n]) == SUPERVISOR else ([], command)


IN_PLACE_CEL = "!has(self.runPolicy) || !has(self.runPolicy.restartInPlace) || !self.runPolicy.restartInPlace || (has(self.command) && size(self.command) > 0)"
"""``spec.runPolicy.restartInPlace`` needs ``spec.command``: the supervisor runs it (the image's ENTRYPOINT is not known)."""
IN_PLACE_MESSAGE = (
    "spec.runPolicy.restartInPlace needs spec.command: the pod-side supervisor (python -m railtrain.crds.supervisor) runs the "
    "command and restarts it in place, and the image's ENTRYPOINT is not known to it; set spec.command or restartInPlace: false"
)


def in_place_has_command(spec: Any) -> bool:
    """The rule over a :class:`railtrain.crds.api.TrainingJobSpec`: True unless ``restartInPlace`` is set without ``command``."""
    return not spec.run_policy.restart_in_place or bool(spec.command)


SPARES_CEL = "!has(self.spares) || self.spares == 0 || (has(self.runPolicy) && has(self.runPolicy.restartInPlace) && self.runPolicy.restartInPlace)"
"""``spec.spares`` needs ``spec.runPolicy.restartInPlace``: a spare takes a lost rank's place through the gang's
coordinator, which the pod-side supervisor serves (:mod:`railtrain.crds.coordinator`)."""
SPARES_MESSAGE = (
    "spec.spares needs spec.runPolicy.restartInPlace: true: a hot spare takes a lost node's rank through the pod-side "
    "supervisor's coordinator, which runs only when the job restarts in place; set restartInPlace: true or spares: 0"
)
SPARES_GROUPS_CEL = "!has(self.spares) || self.spares == 0 || !has(self.faultTolerance)"
"""``spec.spares`` and replica groups do not combine: a lost group's node is replaced with its group (crds/replica_groups.py)."""
SPARES_GROUPS_MESSAGE = (
    "spec.spares and spec.faultTolerance cannot be combined: with replica groups a lost node's group is replaced alone "
    "while the others train on; set spares: 0 or drop faultTolerance"
)


def spares_restart_in_place(spec: Any) -> bool:
    """The rule over a :class:`railtrain.crds.api.TrainingJobSpec`: True unless ``spares`` > 0 without ``restartInPlace``."""
    return not spec.spares or spec.run_policy.restart_in_place


def spares_without_groups(spec: Any) -> bool:
    """The rule over a :class:`railtrain.crds.api.TrainingJobSpec`: True unless ``spares`` > 0 with ``faultTolerance``."""
    return not spec.spares or spec.fault_tolerance is None
