"""How ``railtrain ... --help`` names the values of arguments and options.

typer (0.29) fills the help's type column with Python annotations
(``<bool>``, ``<str>``, ``<list[str]>``, ``<float range>``) and wraps a
required argument in braces in the usage line (``run [OPTIONS] {FILE}``);
both read as internals. :func:`plain_placeholders` makes the help read like
other command-line tools (click's own convention): a flag shows no value, an
option shows its metavar (``SECONDS``, ``NAME``, ``SPEC``) or, without one, the
value's kind in capitals (``TEXT``, ``INTEGER``, ``PATH``), an argument is
named once by its metavar, and a required argument appears bare in the usage
line (``run [OPTIONS] FILE``), an optional one in brackets.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption

HELP_OPTIONS = ["-h", "--help"]
"""Both spellings print the help (``context_settings={"help_option_names": ...}`` on the app; sub-commands inherit it)."""

_KINDS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "bool": "BOOLEAN", "Path": "PATH"}


def _option_type(self: TyperOption, ctx: Any) -> str | None:
    if self.is_flag or self.count:
        return None
    if self.metavar is not None:
        return self.metavar
    label = self.display_type(ctx).strip("<>")
    kind = label.removesuffix(" range").removeprefix("list[").removesuffix("]")
    if "|" in label:  # a choice: typer lists the values
        return label
    return _KINDS.get(kind, kind.upper()) + ("..." if self.multiple or label.startswith("list[") else "")


def _argument_type(self: TyperArgument, ctx: Any) -> str | None:
    return None  # the name column already shows the metavar (FILE, NAME)


def _argument_usage(self: TyperArgument) -> str:
    name = self.display_name_raw + ("..." if self.nargs != 1 else "")
    return name if self.required else f"[{name}]"


def plain_placeholders() -> None:
    """Make typer's help show FILE, SECONDS, TEXT ... instead of ``{file}``, ``<str>``, ``<bool>`` (see the module docstring).

    Changes typer's parameter classes for this process, which runs only the
    ``railtrain`` command line; parsing is untouched (these methods only render help).
    """
    TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign]
    TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
