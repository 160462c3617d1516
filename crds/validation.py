"""Loading TrainingJob manifests from YAML with errors a person can act on.

Every error names the field path (``spec.parallelism.tensor``) and what is
allowed, one sentence each, collected together as the Kubernetes API
conventions ask (all errors at once, not the first one).
"""

from __future__ import annotations

import datetime
import difflib
import functools
import json
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from railtrain.crds.api import TrainingJob
from railtrain.crds.meta import ObjectMeta


class ManifestError(ValueError):
    """A manifest that cannot become a TrainingJob; ``str()`` is the user-facing text.

    Attributes:
        errors: one sentence per problem, each starting with the field path.
    """

    def __init__(self, errors: list[str], source: str = "manifest"):
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: " + "; ".join(errors))


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(root)"


_TYPE_NAMES = {
    "int_type": "an integer", "int_from_float": "an integer", "bool_type": "true or false", "string_type": "a string",
    "list_type": "a list", "model_type": "an object (a mapping)", "dict_type": "an object (a mapping)",
    "model_attributes_type": "an object (a mapping)",
}
"""pydantic strict-mode type errors and the JSON type the CRD asks for."""


def _json_kind(value: Any) -> str:
    """How a JSON value reads in an error: ``the string "5"``, ``true``, ``the number 2.0``, ``a list``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else type(value).__name__


PATTERN_WORDS = {
    r"^[a-z]([-a-z0-9]*[a-z0-9])?$": "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit (a DNS-1035 label)",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": "lowercase letters, digits and '-', starting and ending with a letter or digit (a DNS-1123 label)",
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$": "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (a DNS-1123 subdomain)",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "letters, digits and '_', not starting with a digit (a C identifier)",
    r"^/": "an absolute path (starting with '/')",
}
"""The API's string patterns in words, for error sentences (the pattern itself stays in the CRD)."""


def _bound(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def _sentence(kind: str, ctx: dict[str, Any], value: Any) -> str | None:
    """The project's wording of one pydantic error type: what is allowed, then what was given; None when not one of these types."""
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        word = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most", "less_than": "less than"}[kind]
        limit = ctx.get({"greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt"}[kind])
        return f"must be {word} {limit}, not {_bound(value)}"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must have at least {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return f"must have at most {ctx.get('max_length')} characters, not {len(value) if isinstance(value, str) else '?'}"
    if kind == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(ctx.get("pattern", ""), f"text matching {ctx.get('pattern')}")
        return f"{_bound(value)} is not allowed; use {words}"
    if kind in ("too_short", "too_long"):
        word = "at least" if kind == "too_short" else "at most"
        limit = ctx.get("min_length" if kind == "too_short" else "max_length")
        return f"must have {word} {limit} item{'s' if limit != 1 else ''}"
    if kind in ("enum", "literal_error") and ctx.get("expected"):
        return f"must be {ctx['expected']}, not {_json_kind(value)}"
    return None


def _field_model(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model :class:`TrainingJob` expects at the field path ``loc``, or None when it is not one model."""
    model: Any = TrainingJob
    for part in loc:
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        name = next((n for n, f in model.model_fields.items() if part in (n, f.alias)), None)  # a path names fields by their JSON (alias) names
        if name is None:
            return None
        annotation = model.model_fields[name].annotation
        options = [a for a in typing.get_args(annotation) if a is not type(None)] if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
        model = options[0] if len(options) == 1 else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _near(loc: tuple[Any, ...]) -> str:
    """``"; did you mean <path>?"`` naming the field of the same object closest to the unknown one at ``loc`` (difflib,
    ratio ≥ 0.75: a typo, not another word), else ``""``."""
    parent = _field_model(loc[:-1]) if loc else None
    if parent is None:
        return ""
    near = difflib.get_close_matches(str(loc[-1]), [f.alias or n for n, f in parent.model_fields.items()], n=1, cutoff=0.75)
    return f"; did you mean {_path((*loc[:-1], near[0]))}?" if near else ""


def _mapping_example(loc: tuple[Any, ...]) -> str | None:
    """The required fields of the model at ``loc`` as a flow mapping, enums spelled out: ``{compute: bf16|fp8|fp32}``."""
    model = _field_model(loc)
    if model is None:
        return None
    parts = []
    for name, field in model.model_fields.items():
        if not field.is_required():
            continue
        kind = field.annotation
        shown = "|".join(str(m.value) for m in kind) if isinstance(kind, type) and issubclass(kind, Enum) else "..."
        parts.append(f"{field.alias or name}: {shown}")
    return "{" + ", ".join(parts) + "}" if parts else None


def format_validation_error(err: ValidationError) -> list[str]:
    """Turn a pydantic ValidationError on :class:`TrainingJob` into sentences.

    pydantic's stock phrases ("Input should be greater than or equal to 1")
    are replaced by the project's: the field path, what is allowed (a bound,
    a pattern in words) and what was given.

    Returns:
        One string per error, ``"<field path>: <what is wrong / allowed>"``.
    """
    out = []
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        # Discriminator noise: pydantic inserts function names for model validators.
        loc = tuple(p for p in loc if p not in ("function-after[_cross_field_rules(), TrainingJobSpec]",))
        msg = e.get("msg", "invalid")
        kind = e.get("type", "")
        if kind == "extra_forbidden":
            out.append(f"{_path(loc)}: unknown field" + _near(loc))
            continue
        if kind in ("model_type", "model_attributes_type") and not isinstance(e.get("input"), dict) and (shape := _mapping_example(loc)):
            out.append(f"{_path(loc)}: must be a mapping such as {shape}, not {_json_kind(e.get('input'))}")
            continue
        if kind in _TYPE_NAMES:
            out.append(f"{_path(loc)}: must be {_TYPE_NAMES[kind]}, not {_json_kind(e.get('input'))}")
            continue
        if kind == "missing":
            out.append(f"{_path(loc)}: required field is missing")
            continue
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
            # Cross-field rules already start with their own field path.
            if msg.startswith(("spec.", "metadata.")):
                out.extend(m.strip() for m in msg.split("; "))
                continue
        else:
            msg = _sentence(kind, e.get("ctx") or {}, e.get("input")) or msg
        out.append(f"{_path(loc)}: {msg}")
    return out


def prune_nulls(value: Any, schema: dict[str, Any] | None = None) -> Any:
    """Drop the null values of known fields, at any depth, as kube-apiserver does.

    A structural schema's fields are not ``nullable``, and the API server
    prunes a null value of such a field before defaulting, so ``gpus: ~``
    means "unset" (Kubernetes CRD documentation, "Defaulting and Nullable").
    An unknown field is refused by strict field validation before that, null
    or not, so it is kept (and refused as unknown). Nulls inside lists are kept
    (the server refuses them as the wrong type).

    Args:
        value: the manifest (or a part of it).
        schema: the CRD's structural schema of ``value``; default: the whole
            TrainingJob's (:func:`railtrain.crds.schema.crd`).
    """
    if schema is None:
        schema = _root_schema()
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        return {k: prune_nulls(v, props.get(k, {})) for k, v in value.items() if not (v is None and k in props)}
    if isinstance(value, list):
        return [prune_nulls(v, schema.get("items") or {}) for v in value]
    return value


def apply_defaults(value: Any, schema: dict[str, Any] | None = None) -> Any:
    """Fill the structural schema's defaults into absent fields, at any depth, as kube-apiserver's defaulting does.

    Args:
        value: a manifest or a part of it (already :func:`prune_nulls`-ed).
        schema: its structural schema; default: the whole TrainingJob's.

    Returns:
        A new value; a default that is itself an object gets its own fields' defaults.
    """
    if schema is None:
        schema = _root_schema()
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out = {k: apply_defaults(v, props.get(k, {})) for k, v in value.items()}
        for name, sub in props.items():
            if name not in out and "default" in sub:
                out[name] = apply_defaults(json.loads(json.dumps(sub["default"])), sub)
        return out
    if isinstance(value, list):
        return [apply_defaults(v, schema.get("items") or {}) for v in value]
    return value


def server_view(data: dict[str, Any]) -> dict[str, Any]:
    """A manifest as kube-apiserver stores it: nulls of known fields pruned, then defaults applied."""
    return apply_defaults(prune_nulls(data))


def check_update(old: Any, new: Any, source: str = "manifest") -> TrainingJob:
    """Validate ``new`` as an update of the stored object ``old``, the way kube-apiserver does.

    Args:
        old: the object as stored (e.g. ``kubectl get tj NAME -o yaml``), with its status.
        new: the updated manifest.

    Returns:
        The parsed ``new`` job.

    Raises:
        ManifestError: ``new`` is invalid on its own, ``old`` is not a
            TrainingJob, the names differ, or a gang-defining field changed
            while that is not allowed (:mod:`railtrain.crds.mutability`).
    """
    from railtrain.crds import mutability

    job = parse_manifest(new, source)
    if not isinstance(old, dict):
        raise ManifestError(["--old: the old object must be a TrainingJob mapping"], source)
    try:
        TrainingJob.model_validate_json(json.dumps(prune_nulls(_decode_metadata({k: v for k, v in old.items() if k != "status"})), default=_yaml_scalar))
    except ValidationError as err:
        raise ManifestError([f"--old: {e}" for e in format_validation_error(err)], source) from None
    old_name = (old.get("metadata") or {}).get("name")
    if old_name != job.metadata.name:
        raise ManifestError([f"metadata.name: the old object is {old_name}; an update keeps the name"], source)
    errors = mutability.update_errors(server_view(old), server_view(new))
    if errors:
        raise ManifestError(errors, source)
    return job


@functools.cache
def _root_schema() -> dict[str, Any]:
    from railtrain.crds.schema import crd

    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _decode_metadata(data: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` as Go's JSON decoder reads it into ObjectMeta: a null field is its zero value (absent),
    and a null label or annotation value is the empty string."""
    meta = data.get("metadata")
    if not isinstance(meta, dict):
        return data
    known = {f.alias or n for n, f in ObjectMeta.model_fields.items()}
    out = {k: v for k, v in meta.items() if v is not None or k not in known}  # an unknown key is refused, null or not
    for key in ("labels", "annotations"):
        if isinstance(out.get(key), dict):
            out[key] = {k: "" if v is None else v for k, v in out[key].items()}
    return {**data, "metadata": out}


_TYPE_META = {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob"}


def parse_manifest(data: Any, source: str = "manifest") -> TrainingJob:
    """Validate one already-parsed manifest object the way kube-apiserver validates it.

    The manifest is sent through JSON, as ``kubectl`` and ``railtrain submit``
    send it, and validated in pydantic's strict mode, which has the CRD's
    type rules: an integer field takes only a JSON integer (not ``true`` or
    ``"5"``), a boolean only ``true``/``false``, a string only a string.
    Nulls and integral numbers are first read as the server reads them
    (:func:`decode_like_the_server`).

    Raises:
        ManifestError: it is not a mapping or does not match the API.
    """
    if not isinstance(data, dict):
        raise ManifestError(["(root): a TrainingJob manifest must be a YAML mapping with apiVersion, kind, metadata and spec"], source)
    kind, api_version = data.get("kind"), data.get("apiVersion")
    if isinstance(kind, str) and kind and kind != _TYPE_META["kind"]:  # another kind of object: its fields mean nothing here
        what = f"{api_version} {kind}" if isinstance(api_version, str) and api_version else kind
        raise ManifestError([f"kind: this is a {what}, not a TrainingJob (apiVersion {_TYPE_META['apiVersion']}, kind TrainingJob)"], source)
    missing = [f"{key}: required field is missing (it must be {value})" for key, value in _TYPE_META.items() if data.get(key) is None]
    if missing:  # the server needs both to know what the object is, before any schema
        raise ManifestError(missing, source)
    problems = json_problems(data)
    if problems:
        raise ManifestError(problems, source)
    try:
        text = json.dumps(prune_nulls(_decode_metadata(data)), default=_yaml_scalar)
    except (TypeError, ValueError) as err:
        raise ManifestError([f"(root): not representable as JSON: {err}"], source) from None
    try:
        return TrainingJob.model_validate_json(text, strict=True)
    except ValidationError as err:
        raise ManifestError(format_validation_error(err), source) from None


INT64 = (-(2**63), 2**63 - 1)
"""Kubernetes integers are 64-bit: a JSON number outside this range is not an integer to the API server."""
_NOT_JSON = {bytes: "binary data (!!binary)", set: "a set (!!set)", tuple: "a pair list (!!pairs / !!omap)"}


def json_problems(value: Any, path: str = "") -> list[str]:
    """What in a parsed YAML document has no Kubernetes JSON form, one sentence each with its field path.

    YAML can express what JSON and the API server cannot: an alias to a
    mapping that contains it (a cycle), binary data, sets, and integers beyond
    64 bits. Shared (acyclic) aliases and merge keys are fine.

    Args:
        value: the parsed document (or a part of it).
        path: the field path of ``value`` (empty at the root).

    Returns:
        One ``"<path>: <problem>"`` sentence per problem; empty when the document is plain JSON data.
    """
    out: list[str] = []

    def walk(node: Any, where: str, stack: set[int]) -> None:
        shown = where or "(root)"
        if isinstance(node, (dict, list)):
            if id(node) in stack:
                out.append(f"{shown}: a YAML alias refers to a mapping or list that contains it; a manifest must be a tree")
                return
            stack = stack | {id(node)}
            items = node.items() if isinstance(node, dict) else ((f"[{i}]", v) for i, v in enumerate(node))
            for key, child in items:
                sub = key if isinstance(node, list) else (f"{where}.{key}" if where else str(key))
                walk(child, f"{where}{sub}" if isinstance(node, list) else sub, stack)
        elif type(node) in _NOT_JSON:
            out.append(f"{shown}: {_NOT_JSON[type(node)]} has no JSON form; the API server takes strings, numbers, booleans, lists and mappings")
        elif isinstance(node, int) and not isinstance(node, bool) and not INT64[0] <= node <= INT64[1]:
            out.append(f"{shown}: {node} is out of range; Kubernetes integers are 64-bit (at most {INT64[1]})")

    walk(value, path, set())
    return out


def _yaml_scalar(value: Any) -> str:
    """YAML timestamps (``2026-01-01``) become strings, as kubectl's YAML-to-JSON conversion makes them."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def load_manifest(path: str | Path) -> TrainingJob:
    """Read and validate a single-document TrainingJob YAML file.

    Raises:
        ManifestError: the file cannot be read, is not UTF-8 YAML, holds more
            or fewer than one document, or does not match the API.
    """
    return parse_manifest(read_manifest_data(path), str(path))


def read_manifest_data(path: str | Path) -> Any:
    """Read the one YAML document of a manifest file, unvalidated.

    Raises:
        ManifestError: the file is missing, a directory or otherwise
            unreadable, not UTF-8 YAML, or holds more or fewer than one document.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ManifestError(["no such file"], str(p)) from None
    except IsADirectoryError:
        raise ManifestError(["is a directory; give the path of one manifest file"], str(p)) from None
    except NotADirectoryError:
        raise ManifestError(["no such file (a part of the path before its name is a file, not a directory)"], str(p)) from None
    except PermissionError:
        raise ManifestError(["cannot read it: permission denied"], str(p)) from None
    except OSError as err:
        raise ManifestError([f"cannot read it: {err.strerror or 'input/output error'}"], str(p)) from None
    return manifest_document(raw, str(p))


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping of a manifest holds one key twice (:class:`UniqueKeyLoader`)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a mapping holding a key twice.

    YAML 1.2 requires mapping keys to be unique, and kube-apiserver's strict
    field validation refuses a duplicate field; PyYAML alone keeps the last
    value silently (``nodes: 1 ... nodes: 3`` gave 3 nodes). Merge keys
    (``<<``) may still override, as YAML's merge rule says. Only manifests
    read from YAML go through here; the operator reads JSON from the API server.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                first, again = seen[key].start_mark, key_node.start_mark
                where = f"line {first.line + 1}" if first.line != again.line else f"column {first.column + 1}"
                raise DuplicateKeyError(None, None, f"key {key} appears twice in one mapping (first at {where})", again)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", UniqueKeyLoader.construct_yaml_map)


def yaml_cause(err: yaml.YAMLError) -> str:
    """Where and why the YAML parser stopped: `` at line 3, column 1: expected ',' or ']', but got ':' (while parsing a flow sequence
    started at line 1, column 4)``, PyYAML's own problem and context text; "" when it gave neither. Every reader of
    YAML a person wrote (manifests, kubeconfigs, snapshots) says it this way."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = " ".join(str(getattr(err, "problem", None) or "").split())
    if not problem:
        return where
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and start is not None and (mark is None or (start.line, start.column) != (mark.line, mark.column)):
        problem += f" ({' '.join(str(context).split())} started at line {start.line + 1}, column {start.column + 1})"
    return f"{where}: {problem}"


def manifest_document(raw: bytes, source: str = "manifest") -> Any:
    """The one YAML document of a manifest's bytes, unvalidated.

    Manifests are UTF-8 text (a leading byte-order mark is allowed), as
    Kubernetes reads them. One manifest holds exactly one TrainingJob: a
    stream of several documents is refused rather than partly applied.

    Args:
        raw: the manifest's bytes (a file's content, or standard input).
        source: how errors name the input (a path, or ``<stdin>``).

    Returns:
        The parsed document (any YAML value; :func:`parse_manifest` checks it).

    Raises:
        ManifestError: not UTF-8, not valid YAML (a mapping holding a key twice
            included), or not exactly one document.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ManifestError([f"not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); a manifest is YAML text"], source) from None
    try:
        docs = [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d is not None]
    except DuplicateKeyError as err:
        mark = err.problem_mark
        raise ManifestError([f"line {mark.line + 1}, column {mark.column + 1}: {err.problem}; each key may appear once (YAML keeps only the last value)"], source) from None
    except yaml.YAMLError as err:
        raise ManifestError([f"not valid YAML{yaml_cause(err)}"], source) from None
    if not docs:
        raise ManifestError(["holds no YAML document (it is empty or only comments); expected exactly one TrainingJob"], source)
    if len(docs) > 1:
        raise ManifestError(
            [f"holds {len(docs)} YAML documents; railtrain reads exactly one TrainingJob per manifest "
             "(run one command per document, or 'kubectl apply -f' for several objects)"],
            source,
        )
    return docs[0]
