"""Docs checked by tests: every command has help and appears in the README."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


def _first_block() -> list[str]:
    lines = README.splitlines()
    start = lines.index("```sh")
    return lines[start + 1:lines.index("```", start)]


def test_readme_says_what_loom_is_then_gives_the_two_commands():
    lines = README.splitlines()
    assert lines[0] == "# loom"
    start = lines.index("```sh")
    said = " ".join(lines[1:start]).strip()
    assert said.startswith("loom ") and said.endswith(".") and "```" not in said
    demo, suite = _first_block()
    assert "loom scan fixtures/notes" in demo and "pytest" in suite
    ci = (ROOT / ".ci" / "run").read_text()
    assert suite in ci  # what CI runs


def test_readme_points_nowhere_outside_the_repository():
    for text in (README, *(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))):
        assert "SPEC" not in text and "../shared" not in text
    for target in re.findall(r"\]\(([^)#]+)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def _shown_commands() -> list[list[str]]:
    """Every `loom …` command of the README's sh blocks (comments and prompts cut)."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        for line in block.splitlines():
            for part in re.split(r"\s&&\s", line.split("  #")[0]):
                words = shlex.split(part)
                if words[:1] == ["loom"]:
                    found.append(words[1:])
    return found


def test_the_readme_shows_the_everyday_commands():
    shown = {words[0] for words in _shown_commands() if words}
    assert {"scan", "search", "grep", "get", "ask", "config"} <= shown


@pytest.mark.parametrize("words", _shown_commands(), ids=" ".join)
def test_every_command_in_the_readme_parses(words):
    """A dry run: typer parses the command line as it would run it (the command and its
    options exist, values have their types), without running it."""
    group = typer.main.get_command(app)
    ctx = group.make_context("loom", list(words))
    cmd: Any = group
    rest = _left(ctx)
    while rest and hasattr(cmd, "resolve_command"):
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, list(rest), parent=ctx)
        rest = _left(ctx)
    assert cmd is not group and not rest, words


def _left(ctx: Any) -> list[str]:
    """A group's words after its options: the command's name, then its own words."""
    protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
    return [*(protected or []), *ctx.args]


@pytest.mark.parametrize("words", [w for w in _shown_commands() if w[:1] in (
    ["search"], ["grep"], ["get"], ["files"], ["status"])], ids=" ".join)
def test_the_readme_s_read_commands_run_on_the_sample_notes(words, scanned_notes):
    """The README's examples are about the sample notes: each finds something there."""
    proc = subprocess.run([sys.executable, "-m", "loomcli", *words], capture_output=True,
                          text=True, cwd=scanned_notes)
    assert proc.returncode == 0 and proc.stdout.strip(), (words, proc.stderr)


def test_the_other_commands_in_the_readme_name_real_files():
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        for target in re.findall(r"\s(\./[^\s)]+|packaging/[^\s)]+)", block):
            assert (ROOT / target).exists(), target


def test_config_get_agrees_with_what_init_writes(loom_home):
    run = [sys.executable, "-m", "loomcli"]
    subprocess.run([*run, "init"], check=True, capture_output=True)
    import tomllib

    written = tomllib.loads((loom_home / "config.toml").read_text(encoding="utf-8"))
    for table, keys in written.items():
        for key, value in (keys.items() if isinstance(keys, dict) else [(None, keys)]):
            name = table if key is None else f"{table}.{key}"
            got = subprocess.run([*run, "config", "get", name], capture_output=True,
                                 text=True)
            shown = value if isinstance(value, str) else json.dumps(value)
            assert got.stdout.strip() == shown, name
    got = subprocess.run([*run, "config", "get", "llm.model"], capture_output=True, text=True)
    assert "llm.model" in written.get("llm", {}) or got.returncode == 2


@pytest.mark.slow
def test_a_fresh_clone_runs_the_readme_s_first_command(tmp_path):
    """The README's first command in a clone of this repository: set-up and demo, in
    under a minute on an idle machine."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "loom"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    demo = _first_block()[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "VIRTUAL_ENV"))}
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", demo], cwd=clone, capture_output=True, text=True,
                          env=env, timeout=900)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warp" in proc.stdout.lower() and (clone / ".loom-demo" / "index.db").exists()
    if os.getloadavg()[0] < (os.cpu_count() or 1):  # a busy machine's figure says nothing
        assert took < 60, f"the README's first command took {took:.0f} s"


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
