"""The library surface ``railtrain.trainer`` (docs/library.md) as an API: a public name that disappears or changes
its signature fails here against the committed snapshot ``tests/trainer/library_api.json``.

A deliberate change: regenerate the snapshot with
``python -m tests.trainer.test_library_api > tests/trainer/library_api.json``, update docs/library.md, and say in
the commit message what changed for users.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import railtrain.trainer as rt

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "library_api.json"
DOC = HERE.parents[1] / "docs" / "library.md"


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except ValueError:  # a builtin exception's constructor
        return "(*args)"


def surface() -> dict[str, str]:
    """``{name or Class.member: signature}`` of every public name in ``railtrain.trainer.__all__`` (properties as ``property``)."""
    out: dict[str, str] = {}
    for name in rt.__all__:
        obj = getattr(rt, name)
        out[name] = _signature(obj)
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        for attr, member in sorted(vars(obj).items()):
            if attr.startswith("_") or not (isinstance(member, property) or callable(member)):
                continue  # a dataclass field's default: the field is in the class's signature
            out[f"{name}.{attr}"] = "property" if isinstance(member, property) else _signature(member)
    return out


def test_the_surface_matches_the_snapshot():
    assert surface() == json.loads(SNAPSHOT.read_text())


def test_every_public_name_has_a_docstring_and_a_line_in_docs_library():
    doc = DOC.read_text()
    for name in surface():
        obj = getattr(rt, name.split(".")[0])
        member = getattr(obj, name.split(".")[1]) if "." in name else obj
        assert inspect.getdoc(member), f"{name} has no docstring"
        assert f"`{name}" in doc, f"docs/library.md does not list {name}"


def test_importing_the_package_does_not_import_torch():
    code = "import sys, railtrain.trainer as rt; rt.read_contract({}); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")


if __name__ == "__main__":
    print(json.dumps(surface(), indent=1, sort_keys=True))
