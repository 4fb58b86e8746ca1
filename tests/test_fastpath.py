"""`loom search`, `grep`, `get` and `scan` start without typer (fastpath.py); every
command line prints the same and exits the same as when typer parses it (cli.main).

Each command line runs twice as a real process: `python -m loomcli` (the fast path, the
console entry) and `cli.main` (typer always); stdout, stderr and the exit code must be
equal. The fast path must also have been taken where it should (parse() gave a call)
and refused what it must leave to typer (help, completion, malformed options).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli import fastpath
from tests.conftest import FIXTURES, imported

FAST = [sys.executable, "-m", "loomcli"]
TYPER = [sys.executable, "-c", "from loomcli.cli import main; main()"]

# The typer side's command lines run in children forked from one process that imported
# typer and loom's commands once (~200 lines; each process spent most of its time in
# those imports). A child is a process of its own: its own cwd, environment, argv, stdin
# (/dev/null), stdout and stderr (files), exit code; nothing ran in the parent before
# the fork but the imports. It can only make typer's side differ, never hide a fast
# path that differs from typer: the fast path still starts as a process of its own.
_FORKER = r"""
import base64, json, os, sys, tempfile, traceback
from loomcli.cli import main
for line in sys.stdin:
    req = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdin = open(0, closefd=False)
                os.chdir(req["cwd"])
                os.environ.clear()
                os.environ.update(req["env"])
                sys.argv = ["-c", *req["args"]]
                try:
                    main()
                    code = 0
                except SystemExit as exc:
                    if exc.code is None or isinstance(exc.code, int):
                        code = exc.code or 0
                    else:
                        print(exc.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        got = []
        for f in (out, err):
            f.seek(0)
            got.append(base64.b64encode(f.read()).decode())
        print(json.dumps([*got, os.waitstatus_to_exitcode(status)]), flush=True)
"""


class TyperForker:
    """Runs `loom ARGS` through cli.main in a child of a process that imported it once."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def run(self, args: list[str], env: dict[str, str], cwd: Path) -> tuple[str, str, int]:
        import base64
        import json
        import locale

        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", _FORKER], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True, errors="surrogateescape")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd)}) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        assert reply, "the typer forker stopped"
        out, err, code = json.loads(reply)
        encoding = locale.getpreferredencoding(False)

        def text(data: str) -> str:  # as subprocess.run(text=True) decodes
            got = base64.b64decode(data).decode(encoding, "surrogateescape")
            return got.replace("\r\n", "\n").replace("\r", "\n")

        return text(out), text(err), code

    def stop(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.proc = None


_TYPER = TyperForker()


@pytest.fixture(scope="module", autouse=True)
def typer_forker() -> Any:
    yield _TYPER
    _TYPER.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """fixtures/notes indexed once for the module, a config file with an unknown key
    (its warning line must be the same both ways), and an empty home."""
    base = tmp_path_factory.mktemp("fastpath")
    notes = base / "notes"
    shutil.copytree(FIXTURES / "notes", notes)
    home = base / "home"
    env = {**os.environ, "LOOM_HOME": str(home)}
    subprocess.run([*FAST, "scan", str(notes)], env=env, check=True, capture_output=True)
    config = base / "config.toml"
    config.write_text(f'db_path = "{home / "index.db"}"\nmodle = "x"\n', encoding="utf-8")
    return {"notes": notes, "home": home, "config": config, "empty": base / "empty-home"}


def run(cmd: list[str], args: list[str], corpus: dict[str, Path], cwd: Path | None = None,
        home: Path | None = None, env: dict[str, str] | None = None) -> tuple[str, str, int]:
    env = {**{k: v for k, v in os.environ.items()
              if k not in ("LOOM_CONFIG", "LOOM_DEBUG", "NO_COLOR", "_LOOM_COMPLETE")},
           **(env or {})}
    env["LOOM_HOME"] = str(home or corpus["home"])
    env["COLUMNS"] = "100"  # typer's help is laid out for the terminal's width
    if cmd is TYPER:
        return _TYPER.run(args, env, cwd or corpus["notes"])
    proc = subprocess.run([*cmd, *args], env=env, cwd=cwd or corpus["notes"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="surrogateescape")
    return proc.stdout, proc.stderr, proc.returncode


def same(args: list[str], corpus: dict[str, Path], **kw: Any) -> tuple[str, str, int]:
    fast = run(FAST, args, corpus, **kw)
    typer = run(TYPER, args, corpus, **kw)
    assert fast == typer, f"loom {args!r}: fast path {fast!r} != typer {typer!r}"
    return fast


def understood(args: list[str]) -> bool:
    return fastpath.parse(list(args)) is not None


# Every option of the three commands, in click's spellings, and the library's errors.
FAST_LINES = [
    ["grep", "warp"],
    ["grep", "-i", "WARP"], ["grep", "--ignore-case", "WARP"],
    ["grep", "-s", "Warp"], ["grep", "--case-sensitive", "warp"],
    ["grep", "-S", "Warp"], ["grep", "--smart-case", "warp"],
    ["grep", "-s", "-i", "WARP"], ["grep", "-i", "-s", "WARP"],
    ["grep", "-i", "-s", "-i", "WARP"],  # click: the first -i's position counts, -s wins
    ["grep", "-s", "-i", "-s", "WARP"], ["grep", "-si", "WARP"], ["grep", "-is", "WARP"],
    ["grep", "-F", "FT-2026-0[0-9]"], ["grep", "--fixed-strings", "(E-4471"],
    ["grep", "-w", "warp"], ["grep", "--word-regexp", "war"],
    ["grep", "-l", "warp"], ["grep", "--files-with-matches", "warp"],
    ["grep", "-c", "warp"], ["grep", "--count", "-i", "warp"],
    ["grep", "-o", "w[a-z]+"], ["grep", "--only-matching", "tension"],
    ["grep", "-A", "1", "tension"], ["grep", "-A1", "tension"],
    ["grep", "--after-context", "2", "tension"], ["grep", "--after-context=2", "tension"],
    ["grep", "-B", "1", "tension"], ["grep", "--before-context", "1", "tension"],
    ["grep", "-C", "1", "tension"], ["grep", "-C2", "tension"], ["grep", "--context=1", "warp"],
    ["grep", "-m", "1", "warp"], ["grep", "--max-count", "1", "-i", "the"],
    ["grep", "-m", "0", "warp"],
    ["grep", "--color", "always", "warp"], ["grep", "--color=always", "-o", "warp"],
    ["grep", "--color", "never", "warp"], ["grep", "--color", "auto", "warp"],
    ["grep", "--heading", "warp"], ["grep", "--no-heading", "warp"],
    ["grep", "--heading", "--no-heading", "warp"], ["grep", "--no-heading", "--heading", "warp"],
    ["grep", "-n", "warp"], ["grep", "--line-number", "warp"],
    ["grep", "--limit", "1", "warp"], ["grep", "--limit=2", "-i", "the"],
    ["grep", "--here", "warp"],
    ["grep", "--json", "warp"], ["grep", "--json", "-C", "1", "--limit", "1", "warp"],
    ["grep", "-g", "*.md", "warp"], ["grep", "-g", "!*.pdf", "-g", "*.md", "warp"],
    ["grep", "--glob", "*.rst", "watchdog"], ["grep", "--glob=manuals/**", "warp"],
    ["grep", "-g*.md", "warp"], ["grep", "-ig", "*.md", "WARP"],
    ["grep", "--path", "welcome.md", "warp"], ["grep", "--path=manuals", "warp"],
    ["grep", "--path", "nope.md", "warp"],
    ["grep", "warp", "-i"], ["grep", "-i", "warp", "-c"],  # options after the pattern
    ["grep", "--", "-x"], ["grep", "-i", "--", "--json"], ["grep", "-", "-c"],
    ["grep", "-iwC1", "warp"], ["grep", "-ic", "warp"],
    ["grep", "-l", "-c", "warp"], ["grep", "-c", "--json", "warp"],  # loom's own errors
    ["grep", "[unclosed"], ["grep", ""], ["grep", " "], ["grep", "nothing-matches-this"],
    ["grep", "--path", "-i", "warp"],  # click takes the word after --path as its value
    ["grep", "-v", "-c", "warp"], ["grep", "-q", "warp"], ["grep", "-q", "zzz-nothing"],
    ["grep", "-e", "warp", "-e", "tension"], ["grep", "-e", "warp", "tension"],
    ["grep", "--regexp=warp", "-c"], ["grep", "-N", "warp"], ["grep", "-vN", "warp"],
    ["grep", "--no-line-number", "-C1", "warp"], ["grep", "-t", "md", "warp"],
    ["grep", "-T", "pdf", "-c", "warp"], ["grep", "--type=nope", "warp"],
    ["grep", "--files-without-match", "warp"], ["grep", "-U", "-c", r"warp\s+\w"],
    ["grep", "-te", "x"],  # -t takes "e" as its value
    ["--config", "CONFIG", "grep", "warp"], ["--config=CONFIG", "grep", "-c", "warp"],
    ["--config", "MISSING", "grep", "warp"],
    ["--config", "CONFIG", "--config", "MISSING", "grep", "warp"],
    ["search", "warp", "tension"], ["search", "warp tension"], ["search", '"warp tension"'],
    ["search", "--limit", "1", "warp"], ["search", "--limit=1", "warp"],
    ["search", "--limit", "0", "warp"], ["search", "--limit", "501", "warp"],
    ["search", "--json", "warp"], ["search", "warp", "--json", "--limit", "2"],
    ["search", "--mode", "bm25", "warp"], ["search", "--mode", "semantic", "warp"],
    ["search", "--mode=nonsense", "warp"], ["search", "-g", "*.pdf", "warp"],
    ["search", "--glob", "!*.pdf", "warp"], ["search", "--path", "manuals", "warp"],
    ["search", "--path", "welcome.md", "warp"], ["search", "--here", "warp"],
    ["search", "zzyzx-nothing"], ["search", ""], ["search", "--", "-warp"],
    ["search", "warp", "--mode", "bm25", "--mode", "auto"],
    ["search", "--tag", "idea", "warp"], ["search", "--tag=a", "--tag", "b/c", "warp"],
    ["search", "#idea"],
    ["--config", "CONFIG", "search", "warp"],
    ["get", "welcome.md"], ["get", "welcome.md", "--offset", "10", "--length", "20"],
    ["get", "--offset=5", "--length=3", "welcome.md"], ["get", "--json", "welcome.md"],
    ["get", "manuals/field-guide.pdf", "--length", "100"], ["get", "nope.md"],
    ["get", "welcome.md", "--offset", "100000"], ["get", "./welcome.md", "--length", "5"],
    ["get", "--", "welcome.md"], ["--config", "CONFIG", "get", "welcome.md", "--length", "9"],
    ["get", "welcome.md:3"], ["get", "welcome.md:2-4"], ["get", "welcome.md:99"],
    ["get", "welcome.md", "--lines", "2:4"], ["get", "welcome.md", "--lines=x"],
    ["get", "--lines", "3:", "welcome.md", "--json"],
    ["--version"], ["--config", "CONFIG", "--version"],
]

# What the fast path leaves to typer: help, other commands, anything malformed.
TYPER_LINES = [
    [], ["--help"], ["-h"], ["files"], ["status"], ["grep"], ["search"],
    ["search", "warp", "--tag"],
    ["get"], ["grep", "--help"], ["grep", "-h"], ["grep", "warp", "-h"], ["grep", "-ih", "x"],
    ["search", "--help"], ["get", "--help"], ["grep", "x", "y"], ["get", "a", "b"],
    ["scan", "--help"], ["scan", "-v", "-h"], ["scan", "--bogus"], ["scan", "--json=1"],
    ["scan", "-x"], ["scan", "-vx"], ["--config", "CONFIG", "scan", "--bogu"],
    ["grep", "--bogus", "x"], ["grep", "-e"], ["grep", "-e", "x", "y", "z"],
    ["grep", "--lim", "1", "x"], ["grep", "--type"], ["grep", "-N=1", "x"],
    ["grep", "--limit", "0", "x"], ["grep", "--limit", "-1", "x"], ["grep", "--limit", "x", "y"],
    ["grep", "--limit"], ["grep", "-C"], ["grep", "-C=1", "x"], ["grep", "-A", "+1", "x"],
    ["grep", "--json=1", "x"], ["grep", "--no-heading=1", "x"], ["grep", "--color", "bogus", "x"],
    ["grep", "--color=", "x"], ["search", "--limit", " 1", "x"], ["search", "--limit", "1_0", "x"],
    ["search", "--bogus", "x"], ["get", "--offset", "-1", "x"], ["get", "--length", "1e3", "x"],
    ["--config"], ["--config", "CONFIG"], ["--bogus", "grep", "x"], ["--", "grep", "x"],
    ["-h", "grep", "x"], ["grep", "--install-completion", "x"], ["grp", "x"],
    ["--config", "CONFIG", "files"], ["--version", "--bogus"], ["-h", "--version"],
    ["--version", "grep", "x"],
]


def _with_paths(args: list[str], corpus: dict[str, Path]) -> list[str]:
    names = {"CONFIG": str(corpus["config"]), "MISSING": str(corpus["config"]) + ".missing"}
    return [names.get(a, a) for a in args]


@pytest.mark.parametrize("args", FAST_LINES, ids=" ".join)
def test_fast_path_prints_what_typer_prints(args: list[str], corpus: dict[str, Path]) -> None:
    args = _with_paths(args, corpus)
    assert understood(args), f"the fast path should run loom {args!r}"
    same(args, corpus)


@pytest.mark.parametrize("args", TYPER_LINES, ids=lambda a: " ".join(a) or "(none)")
def test_what_the_fast_path_leaves_to_typer(args: list[str], corpus: dict[str, Path]) -> None:
    args = _with_paths(args, corpus)
    assert not understood(args), f"typer should run loom {args!r}"
    same(args, corpus)


def test_the_fast_commands_answer_without_importing_typer(corpus: dict[str, Path]) -> None:
    for args in (["grep", "warp"], ["search", "warp"], ["get", "welcome.md"],
                 ["scan", str(corpus["notes"])]):  # a rescan: nothing changed
        out, err, code = run([sys.executable, "-X", "importtime", "-m", "loomcli"], args,
                             corpus)
        assert code == 0, err
        modules = imported(err)
        assert {"loomcli.reading", "loomcli.scanning"} & modules
        assert not {m for m in modules if m.split(".")[0] in ("typer", "click", "rich")}
        # Nor typing and dataclasses (with inspect and ast): over half of what a cold
        # grep executed (loomcli/records.py).
        assert not modules & {"typing", "dataclasses", "inspect", "ast"}, args
        if args[0] != "scan":  # a read takes no lock, and only grep needs trigrams
            assert "loomcli.store.locks" not in modules, args
            assert ("loomcli.search.trigrams" in modules) == (args[0] == "grep"), args
    out, err, code = run([sys.executable, "-X", "importtime", "-m", "loomcli"],
                         ["grep", "--help"], corpus)
    assert code == 0 and "typer" in err  # help is typer's


# `loom scan`: each way in a home of its own, from the same start (nothing indexed, or
# the notes indexed, then one changed, one added and one deleted); durations are masked.
SCAN_LINES = [
    (["scan", "NOTES"], True), (["scan", "--json", "NOTES"], True),
    (["scan", "-v", "NOTES"], True), (["scan", "--verbose", "NOTES", "--force"], True),
    (["scan"], True), (["scan", "--rebuild", "NOTES"], False), (["scan"], False),
    (["scan", "--", "NOTES"], False), (["scan", "NOTES", "NOTES/manuals"], False),
    (["scan", "NOTES/nope"], False), (["scan", "NOTES/welcome.md"], False),
    (["scan", "-v", "--json", "NOTES"], False), (["--config", "CONFIG", "scan", "NOTES"], False),
    (["scan", "--force", "--force", "NOTES"], False),
]
_DURATION = re.compile(r'in \d+\.\d+s|"duration_ms": \d+')


@pytest.mark.parametrize("args,indexed", SCAN_LINES,
                         ids=lambda a: " ".join(a) if isinstance(a, list) else f"indexed={a}")
def test_scan_prints_what_typer_prints(args: list[str], indexed: bool,
                                       corpus: dict[str, Path], tmp_path: Path) -> None:
    assert understood(args)
    got = []
    for way, cmd in (("fast", FAST), ("typer", TYPER)):
        home, notes = tmp_path / way / "home", tmp_path / way / "notes"
        shutil.copytree(corpus["notes"], notes)
        if indexed:
            subprocess.run([*FAST, "scan", str(notes)], env={**os.environ, "LOOM_HOME": str(home)},
                           check=True, capture_output=True)
            (notes / "welcome.md").write_text("changed since the scan\n", encoding="utf-8")
            (notes / "added.md").write_text("new since the scan\n", encoding="utf-8")
            (notes / "scratch-1.md").unlink()
        config = tmp_path / way / "config.toml"
        config.write_text(f'db_path = "{home / "index.db"}"\n', encoding="utf-8")
        names = {"NOTES": str(notes), "CONFIG": str(config)}
        line = [names[a.split("/")[0]] + a[len(a.split("/")[0]):] if a.split("/")[0] in names
                else a for a in args]
        out, err, code = run(cmd, line, corpus, home=home, cwd=tmp_path / way)
        got.append((_DURATION.sub("in D", out.replace(str(tmp_path / way), "T")),
                    _DURATION.sub("in D", err.replace(str(tmp_path / way), "T")), code))
    assert got[0] == got[1], f"loom {args!r}: fast path {got[0]!r} != typer {got[1]!r}"
    assert got[0][2] in (0, 1, 2), got[0]


def test_paths_on_disk_and_here_from_inside_a_folder(corpus: dict[str, Path]) -> None:
    manuals = corpus["notes"] / "manuals"
    for args in (["grep", "--here", "-c", "warp"], ["search", "--here", "warp"],
                 ["get", "field-guide.pdf", "--length", "40"],
                 ["grep", "--path", str(manuals / "field-guide.pdf"), "warp"],
                 ["search", "--path", "../welcome.md", "warp"]):
        assert understood(args)
        same(args, corpus, cwd=manuals)


def test_no_index_yet(corpus: dict[str, Path]) -> None:
    for args in (["grep", "warp"], ["search", "warp"], ["get", "welcome.md"]):
        out, err, code = same(args, corpus, home=corpus["empty"])
        assert (out, code) == ("", 2) and err.startswith("loom: no index")


def test_completion_is_typer_s(corpus: dict[str, Path]) -> None:
    completing = {"_LOOM_COMPLETE": "complete_bash", "COMP_WORDS": "loom gr", "COMP_CWORD": "1"}
    out, err, code = same(["grep", "warp"], corpus, env=completing)
    assert "grep" in out and code == 0


# -- any mix of the options, well-formed or not ----------------------------------------

GREP_WORDS = ["-i", "-s", "-S", "-F", "-w", "-l", "-c", "-o", "-n", "--json", "--here",
              "--heading", "--no-heading", "--ignore-case", "--case-sensitive",
              "--smart-case", "-iw", "-sc", "-Fo", "-h", "--help", "-x", "--bogus", "--"]
GREP_VALUED = ["-A", "-B", "-C", "-m", "--limit", "--color", "-g", "--glob", "--path",
               "--after-context", "--max-count"]
SEARCH_WORDS = ["--json", "--here", "--", "-h", "--bogus", "-i"]
SEARCH_VALUED = ["--limit", "--mode", "-g", "--glob", "--path"]
GET_WORDS = ["--json", "--", "-h", "-c"]
GET_VALUED = ["--offset", "--length"]
VALUES = ["0", "1", "2", "12", "-1", "x", "", "auto", "always", "never", "bm25", "*.md",
          "!*.pdf", "manuals", "welcome.md", "1_0", "=1"]
ARGUMENTS = ["warp", "WARP", "tension", "-", "[a", "the", "w.rp", "welcome.md",
             "manuals/field-guide.pdf", "nope"]

COMMANDS = {"grep": (GREP_WORDS, GREP_VALUED), "search": (SEARCH_WORDS, SEARCH_VALUED),
            "get": (GET_WORDS, GET_VALUED)}


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    words, valued = COMMANDS[command]
    pieces: list[list[str]] = [[draw(st.sampled_from(ARGUMENTS))]
                               for _ in range(draw(st.integers(0, 2)))]
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            pieces.append([draw(st.sampled_from(words))])
        else:
            name, value = draw(st.sampled_from(valued)), draw(st.sampled_from(VALUES))
            spelling = draw(st.sampled_from(["apart", "joined", "missing"]))
            if spelling == "apart":
                pieces.append([name, value])
            elif spelling == "missing":
                pieces.append([name])
            else:
                pieces.append([f"{name}={value}" if name.startswith("--") else name + value])
    order = draw(st.permutations(range(len(pieces))))
    config = draw(st.sampled_from([[], ["--config", "CONFIG"], ["--config=MISSING"]]))
    return [*config, command, *[w for i in order for w in pieces[i]]]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=command_lines())
def test_any_command_line_prints_the_same_both_ways(args: list[str],
                                                    corpus: dict[str, Path]) -> None:
    same(_with_paths(args, corpus), corpus)


@pytest.mark.parametrize("name,options,defaults", [
    ("grep", fastpath._GREP_OPTIONS, fastpath._GREP_DEFAULTS),
    ("search", fastpath._SEARCH_OPTIONS, fastpath._SEARCH_DEFAULTS),
    ("get", fastpath._GET_OPTIONS, fastpath._GET_DEFAULTS),
    ("scan", fastpath._SCAN_OPTIONS, fastpath._SCAN_DEFAULTS),
])
def test_the_fast_path_knows_exactly_typer_s_options_and_defaults(name, options, defaults):
    """An option added to cli.py, or a default changed there, without the fast path's
    tables following fails here (an unknown option would only fall back to typer; a
    changed default would silently differ)."""
    import typer
    from typer.core import TyperOption

    from loomcli.cli import app

    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    typer_names = set()
    for param in command.params:
        if not isinstance(param, TyperOption) or "--help" in param.opts:
            continue
        names = [*param.opts, *param.secondary_opts]
        typer_names.update(names)
        dests = {options[n][0] for n in names if n in options}
        assert len(dests) == 1, f"{name} {names}: the fast path has {dests}"
        dest = dests.pop()
        if options[names[0]][1] != "off":
            assert defaults[dest] == param.default, f"{name} {names}: default differs"
    assert set(options) == typer_names


def test_version_answers_without_importing_typer(corpus: dict[str, Path]) -> None:
    from loomcli import __version__

    out, err, code = run([sys.executable, "-X", "importtime", "-m", "loomcli"],
                         ["--version"], corpus)
    assert (out, code) == (f"loom {__version__}\n", 0)
    modules = imported(err)
    assert not {m for m in modules if m.split(".")[0] in ("typer", "click", "rich")}
