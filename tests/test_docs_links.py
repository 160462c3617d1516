"""Every relative link and every repository path that README.md and docs/*.md name exists, and none points outside
the repository (issue 26: a new user followed docs to files that had moved, or that only a developer's machine had).

What is checked, per document (fenced code blocks are read as code, not as links):

- Markdown links ``[text](target)``, images ``![alt](target)`` and reference definitions ``[id]: target``: a
  target with a scheme (``https:``, ``mailto:``) or only an anchor (``#section``) is not a file; any other target,
  without its ``#anchor`` or ``?query``, must resolve relative to the document to a path inside the repository
  that exists.
- Paths in code (inline code spans and fenced blocks): each word shaped like a path whose first part is a top-level
  entry of the repository (``operator/job/request.py``, ``crds/``, ``examples/tiny/trainingjob.yaml``, ``./docs/x.md``)
  must exist; a ``*`` glob must match something; ``:123`` line and ``::test`` suffixes are dropped. Words with a
  placeholder (``<job>``, ``{a,b}``, ``$VAR``) and words whose first part is not in the repository (labels such as
  ``kubernetes.io/hostname``, paths of other projects, paths in a pod such as ``/dev/shm``) are not repository
  paths and are left alone.
- Absolute paths of a developer's machine (``/work/...``, ``/home/...``, ``/Users/...``) are refused wherever they
  appear in code: a reader of the repository does not have them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
TOP_LEVEL = {p.name for p in REPO.iterdir() if not p.name.startswith(".")}

FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
PATH_WORD = re.compile(r"^(?:\./|\.\./)*[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-*]*)+$")
MACHINE_ROOTS = ("/work/", "/home/", "/Users/")
"""Where a developer's own files live (a checkout's neighbours, a home folder): absolute paths no reader of the repository
has. Paths in a pod or of the system (``/dev/shm``, ``/var/run/...``, ``/tmp/x.yaml`` in a command) are not refused."""
IGNORED_DIRS = tuple(
    line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines() if line.strip().startswith("/") and line.strip().endswith("/")
)
"""The repository's own output folders (``.gitignore``'s root-anchored folders: ``bench/results``, ``runs``)."""
EDGE_PUNCTUATION = "\"'(),;.:[]"


def _blocks(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The document's prose lines and its fenced code lines, each with its 1-based line number."""
    prose, code, fenced = [], [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        (code if fenced else prose).append((number, line))
    return prose, code


def _inside_repo(path: Path) -> bool:
    try:
        path.resolve().relative_to(REPO)
    except ValueError:
        return False
    return True


def link_problems(doc: Path, prose: list[tuple[int, str]]) -> list[str]:
    """One sentence per link of ``doc`` whose target is missing or outside the repository."""
    out = []
    for number, line in prose:
        bare = CODE_SPAN.sub("", line)  # a link written inside code is code
        targets = [m.group(1) for m in INLINE_LINK.finditer(bare)]
        if (ref := REFERENCE.match(bare)) is not None:
            targets.append(ref.group(1))
        for raw in targets:
            target = raw.strip("<>")
            if not target or target.startswith("#") or SCHEME.match(target) or target.startswith("//"):
                continue
            path_part = re.split(r"[#?]", target, maxsplit=1)[0]
            if not path_part:
                continue
            where = f"{doc.relative_to(REPO)}:{number}"
            if path_part.startswith("/"):
                out.append(f"{where}: link {target} is an absolute path; link inside the repository, relative to the document")
                continue
            resolved = doc.parent / path_part
            if not _inside_repo(resolved):
                out.append(f"{where}: link {target} points outside the repository")
            elif not resolved.exists():
                out.append(f"{where}: link {target} names {resolved.relative_to(REPO) if _inside_repo(resolved) else resolved}, which does not exist")
    return out


def _words(line: str, fenced: bool) -> list[str]:
    """The words of the code on one line: the whole line in a fenced block, else the inline code spans' content."""
    spans = [line] if fenced else [m.group(2) for m in CODE_SPAN.finditer(line)]
    return [w.strip(EDGE_PUNCTUATION) for span in spans for w in re.split(r"[\s=,]+", span) if w]


def repo_path(word: str) -> str | None:
    """``word`` as a path relative to the repository root when it names a repository path, else None."""
    word = word.split("::", 1)[0]
    word = re.sub(r":\d+(?:-\d+)?$", "", word)  # file.py:120, file.py:120-130
    if any(c in word for c in "<>{}$%@|") or not PATH_WORD.match(word):
        return None
    parts = [p for p in word.split("/") if p not in ("", ".")]
    if not parts or parts[0] == ".." or parts[0] not in TOP_LEVEL:
        return None
    return "/".join(parts)


def path_problems(doc: Path, prose: list[tuple[int, str]], code: list[tuple[int, str]]) -> list[str]:
    """One sentence per repository path named in ``doc``'s code that does not exist, or machine path it names."""
    out = []
    for fenced, lines in ((False, prose), (True, code)):
        for number, line in lines:
            where = f"{doc.relative_to(REPO)}:{number}"
            for word in _words(line, fenced):
                if word.startswith("/") and any(word.startswith(r) or word + "/" == r for r in MACHINE_ROOTS):
                    out.append(f"{where}: {word} is a path on a developer's machine, outside the repository")
                    continue
                rel = repo_path(word)
                if rel is None:
                    continue
                if any(rel == d or rel.startswith(d + "/") for d in IGNORED_DIRS):
                    continue  # an output folder (bench records, local runs' checkpoints): never a file of the repository
                if "*" in rel:
                    if not any(REPO.glob(rel)):
                        out.append(f"{where}: {word} matches no file of the repository")
                elif not (REPO / rel).exists() and not python_name_exists(rel):
                    out.append(f"{where}: {word} names {rel}, which does not exist in the repository")
    return out


def python_name_exists(rel: str) -> bool:
    """Whether ``rel`` is ``module/path.name`` (``cli/local.plan_local``): a module of the repository that defines
    ``name`` (a function, class or module-level variable)."""
    module, dot, name = rel.rpartition(".")
    source = REPO / f"{module}.py"
    if not dot or not name.isidentifier() or not source.is_file():
        return False
    return re.search(rf"^(?:(?:async )?def|class) {name}\b|^{name}\s*[:=]", source.read_text(encoding="utf-8"), re.M) is not None


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_link_and_path_a_document_names_exists_in_the_repository(doc):
    prose, code = _blocks(doc.read_text(encoding="utf-8"))
    problems = link_problems(doc, prose) + path_problems(doc, prose, code)
    assert not problems, "\n".join(problems)


def test_the_checker_tells_repository_paths_from_everything_else(tmp_path):
    """The rules themselves, on words and links whose answer is known (so a passing run above means something)."""
    assert repo_path("operator/job/request.py") == "operator/job/request.py"
    assert repo_path("./crds/contract.py:120") == "crds/contract.py"
    assert repo_path("tests/cli/test_validate.py::test_valid_manifest_prints_the_gang") == "tests/cli/test_validate.py"
    assert repo_path("crds/*.yaml") == "crds/*.yaml"
    assert python_name_exists("cli/local.plan_local") and not python_name_exists("cli/local.no_such_function")
    for other in ("kubernetes.io/hostname", "railtrain.dev/gang", "megatron/core/rerun_state_machine.py", "<job>-0", "examples/{a,b}", "/dev/shm", "https://x.io/a", "gang.py"):
        assert repo_path(other) is None, other
    doc = REPO / "docs" / "x.md"
    prose = [(1, "see [a](scheduling.md#admission), [b](https://k8s.io), [c](#top), [d](../README.md), [e](gone.md), [f](../../outside.md), `[g](nope.md)`")]
    found = link_problems(doc, prose)
    assert len(found) == 2 and "gone.md" in found[0] and "outside the repository" in found[1], found
    code = [(2, "railtrain run examples/tiny/trainingjob.yaml --local"), (3, "cat operator/no_such_module.py")]
    found = path_problems(doc, [(1, "in `/work/shared/notes/` and `/dev/shm`, `operator/job/request.py`")], code)
    assert len(found) == 2 and "developer's machine" in found[0] and "operator/no_such_module.py" in found[1], found
