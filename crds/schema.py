"""Generate the TrainingJob CustomResourceDefinition from the pydantic models.

pydantic's JSON Schema is not a Kubernetes *structural* schema: it uses
``$ref``/``$defs``, ``anyOf [X, null]`` for optionals and ``title`` keys, and it
knows nothing of CEL. :func:`structural_schema` rewrites it into the OpenAPI v3
subset kube-apiserver accepts (see "Specifying a structural schema" in the
Kubernetes CRD documentation): every node typed, refs inlined, optionals
expressed by absence from ``required``.

Run ``python -m railtrain.crds`` to rewrite ``crds/trainingjob.yaml``; a test
fails when the committed file is stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from railtrain.crds import contract, corev1, mutability
from railtrain.crds.api import DNS_1035, LIST_MAP_KEYS, MAX_NAME_LENGTH, SPEC_RULES, TrainingJobSpec, TrainingJobStatus
from railtrain.crds.podtemplate import CORE_V1, TEMPLATE_RULES

CRD_PATH = Path(__file__).with_name("trainingjob.yaml")
HELM_CRD_PATH = Path(__file__).resolve().parents[1] / "helm" / "railtrain" / "files" / "trainingjob.yaml"
"""The Helm chart's copy (Helm installs CRDs from a chart's crds/ folder); present in a source checkout."""

_DROP = {"title"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline ``$ref``s, collapse ``anyOf [X, null]`` and drop keys Kubernetes rejects."""
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if CORE_V1 in node:  # a pod field: the Kubernetes release's own schema (railtrain.crds.corev1)
        out = corev1.property_schema(node[CORE_V1])
        return {**out, "description": node["description"]} if "description" in node else out
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            merged = {**_resolve(options[0], defs), **_resolve(rest, defs)}
            # A null default says "absent": Kubernetes has no null defaults.
            if merged.get("default", 0) is None:
                merged.pop("default")
            return merged
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: _resolve(v, defs) for name, v in value.items()}
        else:
            out[key] = _resolve(value, defs)
    if out.get("additionalProperties") is False:  # not structural; pruning does this
        out.pop("additionalProperties")
    if "const" in out:  # OpenAPI v3.0 has no const
        out["enum"] = [out.pop("const")]
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("format") == "date-time":
        out["type"] = "string"
    return out


STATUS_COUNTERS = ("restarts", "jobRestarts", "infrastructureRestarts")
"""Status fields that keep their default (0) in the CRD: counters shown as printer columns."""


def _strip_defaults(node: Any) -> Any:
    """Remove defaults from status schemas: the operator, not the server, fills status."""
    if isinstance(node, dict):
        return {k: _strip_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_strip_defaults(n) for n in node]
    return node


def structural_schema(model: type) -> dict[str, Any]:
    """Return the structural OpenAPI v3 schema of a pydantic model (by alias).

    Args:
        model: a pydantic model class.

    Returns:
        A dict with no ``$ref``, ``anyOf`` or ``title`` keys, suitable for
        ``openAPIV3Schema`` in a CRD version.
    """
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.get("$defs", {})
    return _resolve(raw, defs)


def _integers_only(node: Any, path: str) -> None:
    """Add ``type(self) == int`` to every integer field under ``node``.

    kube-apiserver's schema check accepts a number with an integral value
    (``2.0``) for ``type: integer``, but a CEL rule reading it then fails with
    "expected int, got float64": whether ``2.0`` passes would depend on which
    rules read the field. This rule makes every integer field refuse it, so the
    server and ``railtrain validate`` (pydantic strict mode) agree.
    """
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        node.setdefault("x-kubernetes-validations", []).append(
            {"rule": "type(self) == int", "message": f"{path} must be an integer", "reason": "FieldValueInvalid"}
        )
    for name, child in (node.get("properties") or {}).items():
        _integers_only(child, f"{path}.{name}")
    if "items" in node:
        _integers_only(node["items"], f"{path}[*]")


def _list_map(schema: dict[str, Any], key: str) -> None:
    schema["x-kubernetes-list-type"] = "map"
    schema["x-kubernetes-list-map-keys"] = [key]


def spec_schema() -> dict[str, Any]:
    """The structural schema of ``spec``: :class:`~railtrain.crds.api.TrainingJobSpec` with its CEL rules
    (:data:`railtrain.crds.api.SPEC_RULES` and the pod template's), integers kept integers, list-map keys, and
    ``{}`` defaults on the nested objects so the server fills their own defaults."""
    spec = structural_schema(TrainingJobSpec)
    spec["x-kubernetes-validations"] = [
        {"rule": r.cel, "message": r.message, "fieldPath": r.field_path, "reason": "FieldValueInvalid"} for r in (*SPEC_RULES, *TEMPLATE_RULES)
    ]
    spec["required"] = sorted(set(spec.get("required", [])) | {"image"})
    _integers_only(spec, "spec")
    for name, key in LIST_MAP_KEYS.items():
        _list_map(spec["properties"][name], key)
    # Default nested objects to {} so the server fills their own defaults and
    # CEL rules can read e.g. self.resources.gpus when the user omitted it.
    for name in ("resources", "topology", "checkpoint", "runPolicy"):
        spec["properties"][name]["default"] = {}
    return spec


def status_schema() -> dict[str, Any]:
    """The structural schema of ``status``: :class:`~railtrain.crds.api.TrainingJobStatus` without defaults, except
    the restart counters (0, so the printer columns show 0 rather than a blank), with conditions and placement as
    list-maps keyed by ``type`` and ``rank``."""
    status = _strip_defaults(structural_schema(TrainingJobStatus))
    # The restart counters are the printer columns' RESTARTS and INFRA-RESTARTS: a job whose status the
    # operator has written shows 0 there, not a blank (the server fills these defaults on every read and write).
    for name in STATUS_COUNTERS:
        status["properties"][name]["default"] = 0
    _list_map(status["properties"]["conditions"], "type")
    _list_map(status["properties"]["placement"], "rank")
    return status


def crd() -> dict[str, Any]:
    """Build the complete ``apiextensions.k8s.io/v1`` CustomResourceDefinition.

    Returns:
        The CRD as a dict: structural schema with descriptions, CEL rules from
        :data:`railtrain.crds.api.SPEC_RULES`, the status subresource and
        printer columns (Phase, Nodes, Restarts (job), Infra-Restarts, Age).
    """
    root = {
        "type": "object",
        "description": "TrainingJob runs one distributed training program as an all-or-nothing, topology-aware gang of pods.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            *mutability.cel_rules(),
            {
                "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{DNS_1035}')",
                "message": f"metadata.name must be a DNS-1035 label (lower-case letters, digits, '-', starting with a letter) of at most {MAX_NAME_LENGTH} characters",
                "reason": "FieldValueInvalid",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{contract.PLURAL}.{contract.API_GROUP}"},
        "spec": {
            "group": contract.API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": contract.KIND,
                "listKind": f"{contract.KIND}List",
                "plural": contract.PLURAL,
                "singular": contract.SINGULAR,
                "shortNames": list(contract.SHORT_NAMES),
                "categories": ["all", "railtrain"],
            },
            "versions": [
                {
                    "name": contract.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Nodes", "type": "integer", "jsonPath": ".spec.nodes"},
                        {"name": "Procs", "type": "integer", "jsonPath": ".spec.procsPerNode", "priority": 1},
                        {"name": "Restarts", "type": "integer", "jsonPath": ".status.jobRestarts"},
                        {"name": "Infra-Restarts", "type": "integer", "jsonPath": ".status.infrastructureRestarts"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render() -> str:
    """Return the CRD as the YAML text committed in ``crds/trainingjob.yaml``."""
    header = "# Generated by `python -m railtrain.crds` from railtrain/crds/api.py. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)
