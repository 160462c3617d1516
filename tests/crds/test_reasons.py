"""crds/reasons.py: each reason named once, CamelCase, with its sentence, and in the docs a user reads (issue 27)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from railtrain.crds import reasons

ROOT = Path(__file__).resolve().parents[2]


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(reasons).items() if name.isupper() and isinstance(value, str)}


def test_every_reason_is_one_camel_case_word_spelled_once():
    values = list(_constants().values())
    assert values and all(re.fullmatch(r"[A-Z][A-Za-z]*", v) for v in values), values
    assert len(values) == len(set(values)), sorted(v for v in values if values.count(v) > 1)


def test_every_reason_has_its_sentence():
    body = ast.parse((ROOT / "crds" / "reasons.py").read_text()).body
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            after = body[i + 1] if i + 1 < len(body) else None
            name = node.targets[0].id  # type: ignore[attr-defined]
            assert isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str), name


def test_every_reason_is_in_the_docs():
    docs = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    assert [v for v in _constants().values() if v not in docs] == []
