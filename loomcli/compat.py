"""Every place loom leans on a dependency's internals, each kept here and nowhere else.

Each one saves measured time or gives a user a better message, and each has a check in
tests/test_compat.py that fails loudly when a new release of the dependency moves it:

- typer's vendored click (`typer._click`, in every typer loom accepts, 0.26 on): its
  exception classes, to turn usage errors into loom's one line, and PacifyFlushWrapper,
  to exit quietly when stderr is closed as typer does;
- typer's registered commands (`Typer.registered_commands`/`registered_groups`,
  `typer.main.get_command_name`): loom hands typer only the command being run, since
  inspecting all fifteen signatures was a third of a short command's start-up;
- Python's regular-expression parser (`re._parser`, `re._constants`): the literals a
  grep pattern requires, for the trigram prefilter (a pattern it cannot read is scanned
  linearly, never answered wrongly);
- uvicorn's h11 protocol class (`uvicorn.protocols.http.h11_impl.H11Protocol`, the
  class uvicorn's own `http="h11"` setting names): subclassed for JSON answers to
  malformed HTTP, a deadline on a connection's first request and a lingering close.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: grep and search start without importing it
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any


def click_exceptions() -> ModuleType:
    """click's exceptions module as typer uses it."""
    from typer._click import exceptions

    return exceptions


def pacify_flush_wrapper() -> type:
    """click's wrapper that swallows a failed flush of a closed stream at exit."""
    from typer._click.utils import PacifyFlushWrapper

    return PacifyFlushWrapper


def narrowed_app(app: Any, name: str) -> Any:
    """A copy of the typer app holding only the command (or group) called `name`; the
    app itself when it has none by that name."""
    import copy

    from typer.main import get_command_name

    commands = [c for c in app.registered_commands
                if (c.name or get_command_name(c.callback.__name__ if c.callback else "")) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    narrowed = copy.copy(app)
    narrowed.registered_commands, narrowed.registered_groups = commands, groups
    return narrowed


def regex_parser() -> tuple[Any, ModuleType]:
    """Python's regular-expression parser: (`parse`, the module of its opcodes)."""
    from re import _constants, _parser  # type: ignore[attr-defined]

    return _parser.parse, _constants


def h11_protocol() -> type:
    """uvicorn's HTTP/1.1 protocol class (h11), to subclass."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return H11Protocol
