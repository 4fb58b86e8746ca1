"""Docs checked by tests: every command has help and appears in the README."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from loomcli import __version__
from loomcli.cli import app

from .conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def commands() -> list[str]:
    group = typer.main.get_command(app)
    names = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        names += [f"{name} {s}" for s in subs] if subs else [name]
    return sorted(names)


@pytest.mark.parametrize("command", commands())
def test_every_command_has_help_and_is_in_the_readme(command):
    proc = subprocess.run([sys.executable, "-m", "loomcli", *command.split(), "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Usage" in proc.stdout
    top = command.split()[0]
    assert f"loom {top}" in README, f"`loom {top}` is not documented in README.md"


def test_readme_starts_with_the_two_commands():
    lines = README.splitlines()
    assert lines[0] == "```sh" and lines[3] == "```"
    assert "loom scan fixtures/notes" in lines[1]
    assert "pytest" in lines[2]
    ci = (ROOT / ".ci" / "run").read_text()
    assert lines[2] in ci


def test_version():
    proc = subprocess.run([sys.executable, "-m", "loomcli", "--version"], capture_output=True,
                          text=True)
    assert proc.stdout == f"loom {__version__}\n"


@pytest.mark.parametrize("tool,args", [("ruff", ["check", "loomcli", "tests"]),
                                       ("mypy", ["loomcli"])])
def test_lint_and_types(tool, args):
    exe = shutil.which(tool, path=str(Path(sys.executable).parent)) or shutil.which(tool)
    if exe is None:
        pytest.skip(f"{tool} not installed (pip install -e '.[test]')")
    proc = subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
