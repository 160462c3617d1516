"""Kubernetes resource quantities (``resource.Quantity``): the one parser railtrain has.

A quantity is a decimal number with an optional suffix: a binary SI suffix
(``Ki Mi Gi Ti Pi Ei``), a decimal SI suffix (``n u m k M G T P E``) or a
decimal exponent (``e3``, ``E-2``). The grammar is k8s.io/apimachinery's
``pkg/api/resource`` (the regular expression controller-gen emits for CRDs);
``2GB`` or ``lots`` are not quantities. In JSON a quantity field is
int-or-string: ``cpu: 4`` and ``cpu: "4"`` mean the same.

The API server applies the same rule to a TrainingJob with CEL's Kubernetes
quantity library (``isQuantity``, ``quantity(...).isLessThan``; Kubernetes ≥ 1.29),
see :func:`cel_rule`. The API models declare such fields with :data:`CpuQuantity` or
:data:`BytesQuantity` and :func:`quantity_field`.

Imports: the standard library and pydantic; nothing of railtrain.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import Field, PlainValidator, WithJsonSchema

QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
"""The resource.Quantity grammar (as controller-gen emits it for CRDs)."""
NON_NEGATIVE_PATTERN = "^\\+?" + QUANTITY_PATTERN.removeprefix("^(\\+|-)?")
"""The grammar without a minus sign: the quantities of a pod (resources, emptyDir sizeLimit) are never negative."""
_QUANTITY = re.compile(QUANTITY_PATTERN)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
MAX_LENGTH = 64
"""Longest quantity string a TrainingJob field takes (bounds the CEL cost of the server's check)."""


def is_quantity(value: Any) -> bool:
    """True when ``value`` is a Kubernetes quantity: an integer (not a boolean) or a string of the quantity grammar."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and _QUANTITY.match(value) is not None


def parse_quantity(text: str | int | float) -> float:
    """Parse a Kubernetes resource quantity (``"8"``, ``"500m"``, ``"64Gi"``, ``"1e3"``, ``4``) to a float.

    Args:
        text: a quantity string, or a number (as node status or a manifest may carry it).

    Returns:
        The amount in base units (cores, bytes, devices).

    Raises:
        ValueError: the text is not a quantity.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    s = str(text).strip()
    if not _QUANTITY.match(s):
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    if s[-1] in _DECIMAL:
        return float(s[:-1]) * _DECIMAL[s[-1]]
    return float(s)


def quantity_problem(value: Any, example: str) -> str | None:
    """Why ``value`` is not a non-negative quantity, as the part of a sentence after the field path; None when it is one.

    Args:
        value: the manifest's value (an integer or a string; anything else is refused).
        example: what to write instead, e.g. ``2Gi, 2G or 2000M``.
    """
    if isinstance(value, str) and len(value) > MAX_LENGTH:
        return f"may not be longer than {MAX_LENGTH} characters; use a Kubernetes quantity, e.g. {example}"
    if not is_quantity(value):
        shown = json.dumps(value) if isinstance(value, (str, float, bool)) or value is None else "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else repr(value)
        return f"{shown} is not a Kubernetes quantity; use e.g. {example}"
    if parse_quantity(value) < 0:
        return f"{value} is negative; use a quantity of at least 0, e.g. {example}"
    return None


def cel_rule(field: str, example: str) -> dict[str, str]:
    """The ``x-kubernetes-validations`` entry that makes kube-apiserver apply :func:`quantity_error`'s rule.

    ``self`` is the int-or-string field: an integer must be at least 0, a string
    must be a quantity (CEL ``isQuantity``) that is not negative.
    """
    return {
        "rule": "type(self) == int ? self >= 0 : (type(self) == string && isQuantity(self) && !quantity(self).isLessThan(quantity('0')))",
        "message": f"{field} must be a non-negative Kubernetes quantity, e.g. {example}",
        "reason": "FieldValueInvalid",
    }


CPU_EXAMPLE = "4, 500m or 1.5"
BYTES_EXAMPLE = "2Gi, 2G or 2000M"


def quantity_type(example: str) -> Any:
    """An int-or-string Kubernetes quantity field type that is at least 0 (:func:`quantity_problem` names ``example``)."""

    def check(value: Any) -> int | str:
        problem = quantity_problem(value, example)
        if problem:
            raise ValueError(problem)
        return value

    schema = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True, "maxLength": MAX_LENGTH}
    return Annotated[int | str, PlainValidator(check), WithJsonSchema(schema)]


CpuQuantity = quantity_type(CPU_EXAMPLE)
BytesQuantity = quantity_type(BYTES_EXAMPLE)


def quantity_field(path: str, example: str, description: str) -> Any:
    """A quantity field: absent by default, its CEL rule naming ``path`` (the server's sentence)."""
    return Field(None, description=description, json_schema_extra={"x-kubernetes-validations": [cel_rule(path, example)]})
