"""Builders of TrainingJob manifests for the CLI tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml


def job(name: str = "tiny", **spec: Any) -> dict[str, Any]:
    """A valid 2-node × 1-process manifest; keyword arguments replace spec fields (camelCase)."""
    doc: dict[str, Any] = {
        "apiVersion": "railtrain.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "image": "ghcr.io/railtrain/trainer:0.1.0",
            "command": ["python", "-c", "print('hello')"],
            "nodes": 2,
            "procsPerNode": 1,
        },
    }
    doc["spec"].update(copy.deepcopy(spec))
    return doc


def write(path: Path, doc: dict[str, Any] | str) -> Path:
    """Write ``doc`` (a mapping, or raw text) as YAML to ``path`` and return ``path``."""
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path
