"""The dependencies' internals loom uses (all in loomcli/compat.py) are still there and
still behave as loom relies on: a release that moves one fails here, by name, rather
than as a user's odd error."""

from __future__ import annotations

import errno
import inspect

import pytest

from loomcli import compat


def test_clicks_exceptions_are_those_typer_raises():
    import typer

    errors = compat.click_exceptions()
    for name in ("UsageError", "NoArgsIsHelpError", "ClickException"):
        assert isinstance(getattr(errors, name), type), name
    assert issubclass(errors.UsageError, errors.ClickException)
    # The class typer itself raises for a bad option is the one loom catches.
    app = typer.Typer()

    @app.command()
    def run(n: int = 1) -> None:  # pragma: no cover - never reached
        pass

    with pytest.raises(errors.UsageError):
        typer.main.get_command(app)(["--n", "x"], standalone_mode=False)


def test_pacify_flush_wrapper_swallows_a_closed_stream():
    class Closed:
        def flush(self) -> None:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    compat.pacify_flush_wrapper()(Closed()).flush()  # no error


def test_narrowed_app_keeps_only_the_command_run():
    from loomcli.cli import app

    narrowed = compat.narrowed_app(app, "grep")
    assert narrowed is not app
    assert [c.callback.__name__ for c in narrowed.registered_commands] == ["grep"]
    assert narrowed.registered_groups == []
    assert compat.narrowed_app(app, "config").registered_groups[0].name == "config"
    assert compat.narrowed_app(app, "no-such-command") is app
    assert len(app.registered_commands) > 10  # the app itself is untouched


def test_the_regex_parser_gives_the_opcodes_trigrams_reads():
    parse, c = compat.regex_parser()
    items = list(parse("ab(c|d)e{2}"))
    ops = [op for op, _ in items]
    assert ops[:2] == [c.LITERAL, c.LITERAL] and c.SUBPATTERN in ops and c.MAX_REPEAT in ops
    for name in ("LITERAL", "SUBPATTERN", "BRANCH", "MAX_REPEAT", "MIN_REPEAT", "IN", "AT",
                 "ANY", "NOT_LITERAL", "CATEGORY", "POSSESSIVE_REPEAT", "ATOMIC_GROUP"):
        assert hasattr(c, name), name


def test_uvicorns_h11_protocol_has_the_hooks_loom_overrides():
    protocol = compat.h11_protocol()
    for name in ("connection_made", "data_received", "connection_lost", "send_400_response",
                 "timeout_keep_alive_handler"):
        assert callable(getattr(protocol, name, None)), name
    # and the state those hooks read, made by its constructor
    made = inspect.getsource(protocol.__init__)
    for name in ("self.conn", "self.loop", "self.timeout_keep_alive"):
        assert name in made, name
    from uvicorn.config import Config

    assert Config(app=None, http=protocol).http is protocol  # uvicorn takes the class


def test_every_package_loom_imports_is_declared():
    """Every third-party module imported anywhere in loomcli (inside functions too) comes
    from a distribution pyproject.toml declares: a dependency, or the extra whose feature
    imports it. Arriving through another package's dependencies is not enough."""
    import ast
    import re
    import sys
    import tomllib
    from importlib.metadata import packages_distributions
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower().replace("_", "-")
                for d in project["dependencies"] + [
                    d for name, deps in project["optional-dependencies"].items()
                    if name != "test" for d in deps]}
    imported: dict[str, str] = {}
    for path in (root / "loomcli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("loomcli", "__future__"):
                    imported.setdefault(top, str(path.relative_to(root)))
    owners = packages_distributions()
    undeclared = {top: where for top, where in imported.items()
                  if not {d.lower().replace("_", "-") for d in owners.get(top, [top])}
                  & declared}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    assert {"starlette", "uvicorn", "anyio", "h11", "typer", "re2", "numpy"} <= set(imported)
