"""Package layout rules: import boundaries, and the top-level ``operator/`` folder never hides the standard library."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def imported_modules(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement,forbidden",
    [
        ("import railtrain.crds.api, railtrain.crds.contract, railtrain.crds.validation, railtrain.crds.schema, railtrain.crds.recovery", {"torch", "kopf"}),
        ("import railtrain.operator.main, railtrain.operator.handlers", {"torch", "typer"}),
        ("import railtrain.operator.settings", {"torch", "kopf", "typer"}),
        ("import railtrain.trainer.train", {"kopf"}),
        ("import railtrain.cli.main", {"torch", "kopf"}),
    ],
)
def test_import_boundaries(statement, forbidden):
    assert imported_modules(statement) & forbidden == set()


@pytest.mark.parametrize("flags", [[], ["-S"]])
def test_repo_root_on_sys_path_keeps_the_stdlib_operator(flags):
    """``python -m venv`` / ``-m pytest`` from the checkout put the root first on sys.path."""
    code = "import collections, operator; assert operator.eq(1, 1) and operator.__file__.endswith('operator.py'); print(operator.__file__)"
    out = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert str(REPO) not in out.stdout


def test_every_subpackage_is_in_the_wheel():
    """pyproject lists packages explicitly: a new folder with __init__.py must be listed, or wheels (and so images) lack it."""
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    dirs = {name: Path(folder) for name, folder in cfg["package-dir"].items()}
    found = set()
    for name, folder in dirs.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found <= listed, sorted(found - listed)
