"""Loading TrainingJob manifests from YAML with errors a person can act on.

Every error names the field path (``spec.parallelism.tensor``) and what is
allowed, one sentence each, collected together as the Kubernetes API
conventions ask (all errors at once, not the first one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from railtrain.crds.api import TrainingJob


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


def format_validation_error(err: ValidationError) -> list[str]:
    """Turn a pydantic ValidationError on :class:`TrainingJob` into sentences.

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
            out.append(f"{_path(loc)}: unknown field")
            continue
        if kind == "missing":
            out.append(f"{_path(loc)}: required field is missing")
            continue
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
            # Cross-field rules already start with their own field path.
            if msg.startswith("spec."):
                out.extend(m.strip() for m in msg.split("; "))
                continue
        if kind == "literal_error" and e.get("ctx"):
            msg = f"must be {e['ctx'].get('expected')}"
        out.append(f"{_path(loc)}: {msg}")
    return out


def parse_manifest(data: Any, source: str = "manifest") -> TrainingJob:
    """Validate one already-parsed manifest object.

    Raises:
        ManifestError: it is not a mapping or does not match the API.
    """
    if not isinstance(data, dict):
        raise ManifestError(["(root): a TrainingJob manifest must be a YAML mapping with apiVersion, kind, metadata and spec"], source)
    try:
        return TrainingJob.model_validate(data)
    except ValidationError as err:
        raise ManifestError(format_validation_error(err), source) from None


def load_manifest(path: str | Path) -> TrainingJob:
    """Read and validate a single-document TrainingJob YAML file.

    Raises:
        ManifestError: the file is missing, is not YAML, holds more or fewer
            than one document, or does not match the API.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ManifestError([f"file {p} does not exist"], str(p)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise ManifestError([f"cannot read {p}: {err.__class__.__name__}"], str(p)) from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ManifestError([f"not valid YAML{where}"], str(p)) from None
    if len(docs) != 1:
        raise ManifestError([f"expected exactly one TrainingJob document, found {len(docs)}"], str(p))
    return parse_manifest(docs[0], str(p))
