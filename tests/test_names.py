"""Every name the package's code uses is defined: pyflakes' undefined-name check over every module.

A name used only on a path the tests never run fails in a user's run, not in the suite. Stop 47 met one: a lambda in
trainer/checkpointing.py called ``say(line, sys.stdout)`` in a module that never imported ``sys``; the unit tests
passed, and the first resume of a library user's loop died with ``NameError`` (five tests in a fresh-clone run).
This check reads the code, so it holds on paths no test executes.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pyflakes import checker, messages

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("crds", "operator", "trainer", "cli", "bench", "examples")
"""The package's folders (imported as ``railtrain.*``) and the code shipped beside it."""


def undefined_names(path: Path) -> list[str]:
    """pyflakes' undefined-name findings in ``path``, as ``file:line: message``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = checker.Checker(tree, filename=str(path)).messages
    return [f"{path.relative_to(ROOT)}:{m.lineno}: {m.message % m.message_args}" for m in found
            if isinstance(m, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport))]  # fmt: skip


def test_no_module_uses_an_undefined_name():
    files = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts)
    assert len(files) > 100, f"only {len(files)} modules found under {FOLDERS}"
    problems = [line for path in files for line in undefined_names(path)]
    assert problems == [], "\n".join(problems)
