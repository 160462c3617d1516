"""The core/v1 pod types of the Kubernetes release railtrain builds, as structural CRD schemas.

``spec.template`` accepts real Kubernetes pod fields (volumes, containers,
affinity, tolerations ...). Their schemas are not written by hand: they come
from the OpenAPI v3 document of core/v1 that Kubernetes publishes with each
release (``api/openapi-spec/v3/api__v1_openapi.json`` in ``k8s.io/kubernetes``,
the module ``cli/controlplane/install.sh`` builds the control plane from).
:func:`refresh` keeps the definitions the template reaches, minus the in-tree
volume plugins Kubernetes deprecated in favour of CSI, in ``crds/corev1.json``;
:func:`property_schema` turns one PodSpec property into the structural OpenAPI
subset a CRD accepts (refs inlined, int-or-string marked, object defaults
dropped), so the API server type-checks the template exactly as it would a
pod. :func:`check` applies the same schema in Python for ``railtrain
validate``, with the API server's error wording.

Run ``python -m railtrain.crds.corev1 [PATH]`` to regenerate ``crds/corev1.json``
from the release's document (default: the Go module cache).
"""

from __future__ import annotations

import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from railtrain.crds.quantity import NON_NEGATIVE_PATTERN, is_quantity

KUBERNETES_VERSION = "v1.34.4"
"""Release whose core/v1 schema is vendored; the control plane the tests run is built from the same one."""
VENDORED = Path(__file__).with_name("corev1.json")
_PREFIX = "io.k8s.api.core.v1."
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"

POD_SPEC_FIELDS = (
    "affinity", "automountServiceAccountToken", "containers", "dnsConfig", "dnsPolicy", "hostIPC", "hostNetwork",
    "hostname", "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "priorityClassName", "restartPolicy",
    "runtimeClassName", "schedulingGates", "securityContext", "serviceAccountName", "subdomain",
    "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes",
)
"""PodSpec properties the template schema carries (the operator-owned ones only so they can be refused by name)."""

_DROPPED = {
    "Volume": {
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "gitRepo", "glusterfs", "iscsi", "photonPersistentDisk", "portworxVolume", "quobyte",
        "rbd", "scaleIO", "storageos", "vsphereVolume",
    },
}
"""Deprecated in-tree volume plugins (Kubernetes migrated them to CSI drivers); a template uses ``csi`` instead."""

MAX_ITEMS = {"containers": 16, "initContainers": 16, "env": 256, "envFrom": 32, "volumeMounts": 64, "volumes": 64, "ports": 32, "tolerations": 64, "imagePullSecrets": 16, "topologySpreadConstraints": 16}
"""Bounds on the lists railtrain's CEL rules walk: kube-apiserver refuses a rule whose estimated cost over unbounded lists exceeds its budget."""
MAX_LENGTH = {"name": 253, "mountPath": 4096}
"""Bounds on the strings those rules compare, for the same reason."""


def _reachable(schemas: dict[str, Any]) -> dict[str, Any]:
    """The definitions PodSpec's kept properties reach, each trimmed of dropped properties."""
    keep: dict[str, Any] = {}
    pod = schemas[_PREFIX + "PodSpec"]
    root = {**pod, "properties": {k: v for k, v in pod["properties"].items() if k in POD_SPEC_FIELDS}}
    todo = [("PodSpec", root)]
    while todo:
        name, schema = todo.pop()
        if name in keep:
            continue
        dropped = _DROPPED.get(name.removeprefix(_PREFIX), set())
        if dropped:
            schema = {**schema, "properties": {k: v for k, v in schema["properties"].items() if k not in dropped}}
        keep[name] = schema
        for ref in re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(schema)):
            if ref == _PREFIX + "PersistentVolumeClaimTemplate":  # its metadata: only labels and annotations
                tmpl = schemas[ref]
                meta = schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                labels = {k: meta["properties"][k] for k in ("labels", "annotations")}
                tmpl = {**tmpl, "properties": {**tmpl["properties"], "metadata": {"type": "object", "description": meta["description"], "properties": labels}}}
                todo.append((ref, tmpl))
            else:
                todo.append((ref.removeprefix(_PREFIX) if ref.startswith(_PREFIX) else ref, schemas[ref]))
    return {k.removeprefix(_PREFIX): v for k, v in sorted(keep.items())}


def refresh(openapi: Path) -> dict[str, Any]:
    """Trim the release's core/v1 OpenAPI v3 document to what the template needs.

    Args:
        openapi: path of ``api__v1_openapi.json``.

    Returns:
        ``{"source": ..., "schemas": {name: schema}}``, core/v1 names without their package prefix.
    """
    doc = json.loads(openapi.read_text())
    return {"source": f"k8s.io/kubernetes@{KUBERNETES_VERSION} api/openapi-spec/v3/api__v1_openapi.json", "schemas": _reachable(doc["components"]["schemas"])}


@lru_cache(maxsize=1)
def _schemas() -> dict[str, Any]:
    return json.loads(VENDORED.read_text())["schemas"]


DESCRIPTION_CHARS = 300
"""Descriptions keep their first paragraph, whole sentences up to about this many characters: the
full core/v1 text would push the CRD past the 256 KiB a client-side ``kubectl apply`` can store."""


def brief(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """The first paragraph of ``text``, cut after the last whole sentence within ``limit`` characters (at least one sentence)."""
    para = text.split("\n\n")[0].strip()
    if len(para) <= limit:
        return para
    out = ""
    for sentence in re.split(r"(?<=\.)\s+", para):
        if out and len(out) + len(sentence) + 1 > limit:
            break
        out += (" " if out else "") + sentence
    return out


def _structural(node: Any, key: str = "") -> Any:
    """One OpenAPI v3 node as a structural CRD schema node (``key`` is the property name it sits under)."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    if "allOf" in node and len(node["allOf"]) == 1 and "$ref" in node["allOf"][0]:
        rest = {k: v for k, v in node.items() if k != "allOf"}
        return _structural({**node["allOf"][0], **rest}, key)
    if "$ref" in node:
        ref = node["$ref"].split("/")[-1]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        if ref in (_QUANTITY, _INT_OR_STRING):
            out = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
            if ref == _QUANTITY:  # a pod's quantities are never negative (pod validation refuses them later, at pod creation)
                out |= {"pattern": NON_NEGATIVE_PATTERN, "minimum": 0}
            return {**out, **({"description": rest["description"]} if "description" in rest else {})}
        target = _schemas()[ref.removeprefix(_PREFIX)]
        return _structural({**target, **rest}, key)
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k.startswith("x-kubernetes-patch") or k in ("x-kubernetes-unions", "x-kubernetes-group-version-kind"):
            continue
        if k == "default" and (isinstance(v, (dict, list)) or v in ("", 0, False)):
            continue  # object defaults and Go zero values (which would fill a missing required name with "") carry no meaning; e.g. protocol TCP does
        if k == "description":
            out[k] = brief(v)
        elif k == "properties":
            out[k] = {name: _structural(s, name) for name, s in v.items()}
        elif k == "items":
            out[k] = _structural(v)
        else:
            out[k] = _structural(v)
    if "properties" in out:
        out.setdefault("type", "object")
    items = out.get("items", {})
    for k in out.get("x-kubernetes-list-map-keys", []):  # a map key must be required or defaulted
        if k not in items.get("required", []) and "default" not in items["properties"][k]:
            items["properties"][k]["default"] = {"string": "", "integer": 0}[items["properties"][k]["type"]]
    if out.get("type") == "array" and key in MAX_ITEMS:
        out["maxItems"] = MAX_ITEMS[key]
    if out.get("type") == "string" and key in MAX_LENGTH:
        out["maxLength"] = MAX_LENGTH[key]
    return out


def property_schema(name: str) -> dict[str, Any]:
    """The structural schema of PodSpec property ``name`` (one of :data:`POD_SPEC_FIELDS`).

    Raises:
        KeyError: ``name`` is not a kept PodSpec property.
    """
    return _structural(_schemas()["PodSpec"]["properties"][name], name)


_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def _type_error(value: Any, schema: dict[str, Any]) -> str | None:
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return "must be an integer or a string"
        if "pattern" in schema and isinstance(value, str) and not re.match(schema["pattern"], value):
            if is_quantity(value):
                return f"{value!r} is negative (a quantity must be at least 0, e.g. 500m, 4, 64Gi)"
            return f"{value!r} is not a Kubernetes quantity (e.g. 500m, 4, 64Gi)"
        if "minimum" in schema and isinstance(value, int) and value < schema["minimum"]:
            return f"must be at least {schema['minimum']}, not {value}"
        return None
    kind = schema.get("type")
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind in _TYPES:
        ok = isinstance(value, _TYPES[kind])
    else:
        return None
    return None if ok else f"must be of type {kind}, got {_json_type(value)}"


def _json_type(value: Any) -> str:
    """The JSON type of a value as the API server names it (``integer``, ``string``, ``array`` ...), not Python's."""
    if isinstance(value, bool):
        return "boolean"
    for kind, names in (("integer", int), ("number", float), ("string", str), ("array", list), ("object", dict)):
        if isinstance(value, names):
            return kind
    return "null" if value is None else "a value JSON does not have"


def check(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Validate ``value`` against a structural schema as kube-apiserver does (types, required, unknown fields, bounds).

    Args:
        value: plain data (camelCase keys) as read from a manifest.
        schema: a structural schema from :func:`property_schema`.
        path: the field path of ``value``, e.g. ``spec.template.spec.volumes``.

    Returns:
        One ``"<path>: <problem>"`` sentence per problem; empty when valid.
    """
    if value is None:
        return []
    problem = _type_error(value, schema)
    if problem:
        return [f"{path}: {problem}"]
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        for req in schema.get("required", []):
            if req not in value:
                out.append(f"{path}.{req}: required field is missing")
        for k, v in value.items():
            if props is not None and k in props:
                out += check(v, props[k], f"{path}.{k}")
            elif props is not None:
                out.append(f"{path}.{k}: unknown field")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += check(v, schema["additionalProperties"], f"{path}.{k}")  # the API server writes map keys this way
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{path}: must have at most {schema['maxItems']} items")
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            out += check(item, schema.get("items", {}), f"{path}[{i}]")
            if keys and isinstance(item, dict):
                key = tuple(item.get(k) for k in keys)
                if key in seen:
                    out.append(f"{path}[{i}]: duplicate entry with {', '.join(f'{k}={v}' for k, v in zip(keys, key))}")
                seen.add(key)
    elif isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(f"{path}: may not be longer than {schema['maxLength']} characters")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: must be one of {', '.join(map(str, schema['enum']))}")
    return out


def _default_source() -> Path:
    gomodcache = os.environ.get("GOMODCACHE") or str(Path(os.environ.get("GOPATH", Path.home() / "go")) / "pkg" / "mod")
    return Path(gomodcache) / "k8s.io" / f"kubernetes@{KUBERNETES_VERSION}" / "api" / "openapi-spec" / "v3" / "api__v1_openapi.json"


def main(argv: list[str] | None = None) -> int:
    """Regenerate :data:`VENDORED` from the release's OpenAPI document (argument, or the Go module cache)."""
    argv = sys.argv[1:] if argv is None else argv
    source = Path(argv[0]) if argv else _default_source()
    if not source.exists():
        print(f"{source} does not exist: build the control plane (bash cli/controlplane/install.sh) or pass the path", file=sys.stderr)
        return 1
    VENDORED.write_text(json.dumps(refresh(source), indent=1, sort_keys=True) + "\n")
    print(f"wrote {VENDORED} from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
