"""How the README's test command (``pytest -n 3 --dist loadscope --no-loadscope-reorder``) splits the suite over its workers.

pytest-xdist's ``loadscope`` sends each scope to one worker as a whole;
:class:`ModuleScheduling` (installed by the ``pytest_xdist_make_scheduler``
hooks in ``tests/conftest.py`` and ``e2e/conftest.py``) makes the scopes:

- the kind end-to-end tests (``e2e/test_kind*.py``, every test there marked
  ``kind``) are one scope, ``kind``: one worker runs the whole kind session
  (one kind cluster, its tests in file order, the node-loss case last) while
  the others work through the rest, so on 2 cores the kind tests' waiting
  (images loading, pods starting, gangs restarting) overlaps the CPU-bound
  trainer tests;
- every other test is scoped by its module (not by class, as plain
  ``loadscope`` does), so a module-scoped fixture (a torchrun run shared by a
  module's parametrized cases) runs once, on one worker, as without xdist.

:func:`kind_first` orders the collection heaviest first (the kind tests, then
the modules that start torch processes, the control-plane modules, the pure
ones) and ``--no-loadscope-reorder`` keeps that order (xdist would otherwise
send the scopes with the most tests first), so the longest scopes start first. Without
``-n`` only the order changes. (xdist's own ``xdist_group`` mark is not used:
its ``loadgroup`` mode renames node ids in a way pytest 9 no longer honours.)
Imports pytest; pytest-xdist only inside :func:`make_scheduler`.
"""

from __future__ import annotations

from typing import Any

import pytest

KIND_SCOPE = "kind"
KIND_FILES = "e2e/test_kind"
"""Node-id prefix of the kind tests' files (the scheduler sees node ids, not marks)."""


def scope_of(nodeid: str) -> str:
    """The xdist scope of a test: :data:`KIND_SCOPE` for a kind test, else its module's path (``tests/x/test_y.py``)."""
    return KIND_SCOPE if nodeid.startswith(KIND_FILES) else nodeid.split("::", 1)[0]


HEAVY = ("tests/trainer/", "tests/bench/", "tests/cli/test_local", "tests/cli/test_own_loop", "tests/cli/test_torchtitan", "e2e/")
"""Node-id prefixes of the modules that start torch processes (torchrun gangs, ``run --local``, bench scripts):
minutes each on these machines."""


def weight(nodeid: str) -> int:
    """The order class of a test's module, heaviest first: 0 the kind tests, 1 the modules that start torch processes
    (:data:`HEAVY`), 2 the control-plane tests (``*_cluster.py``, ``tests/kueue/``), 3 the rest (pure, seconds)."""
    if nodeid.startswith(KIND_FILES):
        return 0
    path = nodeid.split("::", 1)[0]
    if path.startswith(HEAVY):
        return 1
    if path.endswith("_cluster.py") or path.startswith("tests/kueue/"):
        return 2
    return 3


def kind_first(items: list[pytest.Item]) -> None:
    """Order the collection heaviest first (:func:`weight`: the kind tests, then the torch-starting modules, the
    control-plane modules, the pure ones), keeping file order within each class (a stable sort; idempotent).

    xdist hands the scopes out in this order as workers free up, so the longest ones start early and the
    seconds-long pure modules fill the workers' last minutes (longest-first list scheduling) instead of a
    minutes-long trainer module running alone at the end, as in alphabetical order.
    """
    items.sort(key=lambda item: weight(item.nodeid))


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A :class:`ModuleScheduling` for ``--dist loadscope``; None (xdist's own choice) for any other ``--dist``."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """``loadscope`` with :func:`scope_of` as its scopes."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ModuleScheduling(config, log)
