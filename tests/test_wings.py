"""The operator's wings and what each may import, read from the source (ast), so a new import that crosses a
boundary fails here rather than in review.

The rule (docs/architecture.md): ``railtrain.crds`` is the floor and imports no other railtrain package, kopf, the
kubernetes client or torch; ``operator/scheduling`` is pure and imports only ``crds`` and itself;
``operator/job`` is pure and imports ``crds``, ``scheduling`` and itself; ``operator/kube`` (the API edge)
imports ``crds``, itself and the kubernetes client, never kopf or a domain wing; the runtime modules at the top
of ``operator/`` may import any wing and kopf, never the kubernetes client (only the edge talks to the API
server). Nothing in the operator imports torch; nothing in the trainer imports
kopf. The kubernetes client's ``ApiException`` is caught only in the API edge and ``cli/k8s*``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY_ALWAYS_FORBIDDEN = {"torch", "torchao"}

# wing folder -> (railtrain packages it may import, third-party roots it must not import)
RULES: dict[str, tuple[tuple[str, ...], set[str]]] = {
    "crds": (("railtrain.crds",), {"kopf", "kubernetes", "torch"}),
    "operator/scheduling": (("railtrain.crds", "railtrain.operator.scheduling"), {"kopf", "kubernetes", "torch"}),
    "operator/job": (("railtrain.crds", "railtrain.operator.scheduling", "railtrain.operator.job"), {"kopf", "kubernetes", "torch"}),
    "operator/kube": (("railtrain.crds", "railtrain.operator.kube"), {"kopf", "torch"}),
}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every absolute module name ``path`` imports, with its line: ``import a.b`` gives ``a.b``, ``from a.b
    import c`` gives ``a.b.c`` (so a submodule imported by name counts as that submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def violations(folder: str, allowed: tuple[str, ...], forbidden: set[str]) -> list[str]:
    """The lines of ``folder``'s modules that import a railtrain package outside ``allowed`` or a third-party root
    in ``forbidden``, as ``path:line: name``."""
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, name in imports_of(path):
            root = name.split(".")[0]
            inside = name.startswith("railtrain.")
            if (inside and not any(name == a or name.startswith(a + ".") or a == "railtrain" for a in allowed)) or root in forbidden:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    return bad


@pytest.mark.parametrize("folder", sorted(RULES))
def test_each_wing_imports_only_what_sits_below_it(folder):
    allowed, forbidden = RULES[folder]
    assert violations(folder, allowed, forbidden) == []


def test_the_operator_never_imports_torch_and_the_trainer_never_imports_kopf():
    assert violations("operator", ("railtrain",), {"torch", "torchao"}) == []
    assert violations("trainer", ("railtrain",), {"kopf"}) == []


def test_the_kubernetes_client_is_imported_only_by_the_api_edge():
    """Outside ``operator/kube/`` no operator module imports the kubernetes client (the one API edge)."""
    bad = [v for v in violations("operator", ("railtrain",), {"kubernetes"}) if not v.startswith("operator/kube/")]
    assert bad == []


def test_api_exception_is_caught_only_at_the_api_edge():
    """``ApiException`` (the kubernetes client's error) is named only in ``operator/kube/`` and ``cli/k8s*``:
    everywhere else sees the edge's typed errors."""
    named = []
    for folder in ("operator", "cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("operator/kube/") or rel.startswith("cli/k8s"):
                continue
            if "ApiException" in path.read_text():
                named.append(rel)
    assert named == []


def test_the_rules_catch_a_crossing(tmp_path):
    """The checker itself, on a module whose answer is known: a scheduling module importing the job wing."""
    wing = tmp_path / "operator" / "scheduling"
    wing.mkdir(parents=True)
    (wing / "bad.py").write_text("from railtrain.operator.job import planner\nimport kubernetes\n")
    globals()["ROOT"], saved = tmp_path, ROOT
    try:
        bad = violations("operator/scheduling", *RULES["operator/scheduling"])
    finally:
        globals()["ROOT"] = saved
    assert bad == ["operator/scheduling/bad.py:1: railtrain.operator.job.planner", "operator/scheduling/bad.py:2: kubernetes"]
