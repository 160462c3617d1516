"""Errors and value coercion shared by the pod-environment contract's parsers.

:class:`ContractError` is what every ``read_*``/``parse_*`` function of
:mod:`railtrain.crds.contract` (and its parts :mod:`~railtrain.crds.verdicts`,
:mod:`~railtrain.crds.health_settings`, :mod:`~railtrain.crds.faults`) raises for a
missing or malformed value. This module imports neither kopf nor torch.
"""

from __future__ import annotations

from typing import Any


class ContractError(ValueError):
    """Raised when the environment lacks a variable or holds a malformed one."""


def coerce(kind: Any, raw: Any, where: str) -> Any:
    """Convert ``raw`` (a string from the environment, or a JSON value) to the type ``kind``.

    Args:
        kind: ``int``, ``float``, ``bool`` or ``str``, as a type or its name (a dataclass
            field's ``type`` under ``from __future__ import annotations``).
        raw: the value to convert; ``bool`` accepts ``1/true/yes`` and ``0/false/no``, ``int``
            rejects booleans and non-integral floats.
        where: the variable or field named in the error message.

    Returns:
        The converted value (``str(raw)`` for any other kind).

    Raises:
        ContractError: ``raw`` cannot be converted; the message names ``where``.
    """
    name = kind if isinstance(kind, str) else kind.__name__
    try:
        if name == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw)
        if name == "float":
            return float(raw)
        if name == "bool":
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes"):
                return True
            if str(raw).lower() in ("0", "false", "no"):
                return False
            raise ValueError
    except (TypeError, ValueError):
        raise ContractError(f"{where} must be {'an' if name == 'int' else 'a'} {name}, got {raw!r}") from None
    return str(raw)
