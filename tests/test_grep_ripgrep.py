"""`loom grep` prints what ripgrep prints: Debian's `rg` is the oracle, as git is for
ignore rules. Random patterns (words, prefixes, classes, alternations, fixed strings cut
from the text, several -e, patterns across lines for -U) and random flags (-i -s -S -w
-F -l -c -o -A -B -C -m -v -q -N -t -T --files-without-match -U) over real text (this
project's own docs and the sample notes), compared line for line; loom's extra field (the
byte offset of the match) is compared with `rg -b -o`, which prints the same thing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import FIXTURES, ROOT

RG = shutil.which("rg")
pytestmark = pytest.mark.skipif(RG is None, reason="ripgrep (rg) is not installed; "
                                "Debian: apt-get install ripgrep (.ci/run does)")
EXAMPLES = int(os.environ.get("LOOM_EXAMPLES", "60"))

# Real text, all UTF-8 with short lines: no file has a line loom would trim (1,000 bytes).
SOURCES = ["README.md", "CHANGELOG.md", "LICENSE", "docs/reference.md", "docs/benchmarks.md",
           "packaging/README.md"]
NOTES = ["welcome.md", "journal/2026-03-14.md", "projects/loom-controller.md",
         "recipes/bread.md", "ideas.org", "reference/watchdog.rst", "drafts/keep-this.md"]


def _texts() -> dict[str, str]:
    """Flat names (rg --sort path and loom order a flat folder alike)."""
    out = {}
    for rel in SOURCES:
        name = rel.replace("/", "-") + ("" if "." in rel else ".txt")
        out[name] = (ROOT / rel).read_text(encoding="utf-8")
    for rel in NOTES:
        out["note-" + rel.replace("/", "-")] = (FIXTURES / "notes" / rel).read_text(
            encoding="utf-8")
    return out


TEXTS = _texts()
WORDS = sorted({w for t in TEXTS.values() for w in re.findall(r"[A-Za-z]{3,12}", t)})
LINES = [line for t in TEXTS.values() for line in t.splitlines() if len(line) > 8]


class Corpus:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root, self.env = root, env

    def __repr__(self) -> str:
        return f"Corpus({self.root})"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    base = tmp_path_factory.mktemp("rg")
    root = base / "texts"
    root.mkdir()
    for name, text in TEXTS.items():
        (root / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "LOOM_HOME": str(base / "home"), "NO_COLOR": "1"}
    env.pop("LOOM_CONFIG", None)
    subprocess.run([sys.executable, "-m", "loomcli", "scan", str(root)], env=env,
                   check=True, capture_output=True)
    return Corpus(root, env)


def word_pattern(draw: st.DrawFn) -> str:
    w = draw(st.sampled_from(WORDS))
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return w
    if kind == 1:
        return w[:3]
    if kind == 2:
        return w.lower() if draw(st.booleans()) else w.upper()
    if kind == 3:
        return f"{w}|{draw(st.sampled_from(WORDS))}"
    if kind == 4:
        return f"{w[:3]}[a-z]+"
    if kind == 5:
        return rf"{w[:4]}\w*"
    if kind == 6:
        return rf"[A-Z]{w[1:4].lower()}"
    return rf"{w[:3]}.{{0,6}}\d"


def fixed_pattern(draw: st.DrawFn) -> str:
    """A piece of a real line, punctuation and all."""
    line = draw(st.sampled_from(LINES))
    start = draw(st.integers(0, len(line) - 3))
    return line[start:start + draw(st.integers(2, 12))].strip() or line[:4]


def multiline_pattern(draw: st.DrawFn) -> str:
    """A pattern across a line end: a word at a line's end, then the next line's start."""
    w = draw(st.sampled_from(WORDS))
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return rf"{w[:3]}\w*\n\w"
    if kind == 1:
        return rf"\w+\n{w[:2]}"
    return rf"{w[:3]}[^\n]*\n\n"


TYPE_NAMES = ["md", "txt", "org", "rst", "markdown"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    fixed = draw(st.integers(0, 4)) == 0
    multiline = not fixed and draw(st.integers(0, 5)) == 0
    if multiline:
        patterns = [multiline_pattern(draw)]
    else:
        n = 1 if draw(st.integers(0, 3)) else draw(st.integers(2, 3))  # several -e
        patterns = [fixed_pattern(draw) if fixed else word_pattern(draw) for _ in range(n)]
    flags = [draw(st.sampled_from(["-i", "-s", "-S"]))]
    if fixed:
        flags.append("-F")
    if multiline:
        flags.append("-U")
    if draw(st.integers(0, 3)) == 0:
        flags.append("-w")
    if not multiline and draw(st.integers(0, 4)) == 0:  # ripgrep 13's -U -v -c is empty
        flags.append("-v")
    if draw(st.integers(0, 4)) == 0:
        flags.append("-N")
    chosen = draw(st.sampled_from(TYPE_NAMES)) if draw(st.integers(0, 5)) == 0 else None
    if chosen:
        flags += ["-t", chosen]
    if draw(st.integers(0, 5)) == 0:  # never all the files -t chose (rg: exit 2)
        flags += ["-T", draw(st.sampled_from([n for n in TYPE_NAMES if n != chosen and
                                              {n, chosen} != {"md", "markdown"}]))]
    shapes = ["", "", "-l", "-c", "-q", "--files-without-match"] + ([] if multiline else ["-o"])
    shape = draw(st.sampled_from(shapes))
    if shape:
        flags.append(shape)
    else:
        # -C with -A or -B: ripgrep 13 (Debian's) lets the last one win whole, ripgrep
        # 14 and loom let -A/-B set their side whatever the order; not compared.
        sides = draw(st.sampled_from([[], ["-C"], ["-A"], ["-B"], ["-A", "-B"]]))
        for flag in sides:
            flags += [flag, str(draw(st.integers(0, 3)))]
    if not multiline and draw(st.integers(0, 4)) == 0:  # ripgrep 13's -U -m differs
        flags += ["-m", str(draw(st.integers(1, 3)))]
    return flags, patterns


def _patterns(patterns: str | list[str]) -> list[str]:
    if isinstance(patterns, str):
        return ["--", patterns]
    if len(patterns) == 1:
        return ["--", patterns[0]]
    return [arg for p in patterns for arg in ("-e", p)]


def run_rg(root: Path, flags: list[str], patterns: str | list[str]
           ) -> subprocess.CompletedProcess[str]:
    extra = ["-b"] if "-o" in flags else []
    return subprocess.run([RG or "rg", "--no-heading", "--color", "never", "-n", "--sort",
                           "path", "--no-config", *extra, *flags, *_patterns(patterns)],
                          cwd=root, capture_output=True, text=True)


def run_loom(env: dict[str, str], flags: list[str], patterns: str | list[str]
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loomcli", "grep", "--no-heading",
                           "--color", "never", *flags, *_patterns(patterns)],
                          env=env, capture_output=True, text=True)


_NAMES = "|".join(re.escape(name) for name in sorted(TEXTS, key=len, reverse=True))
_MATCH_LINE = re.compile(rf"^({_NAMES}):(\d+):(\d+):", re.M)
_MATCH_LINE_N = re.compile(rf"^({_NAMES}):(\d+):", re.M)  # -N: no line number


def comparable(loom_out: str, flags: list[str]) -> str:
    """loom's lines as rg prints them: match lines carry the match's byte offset, which
    only `rg -b -o` prints (its -b is the line's offset otherwise)."""
    if "-o" in flags:
        return loom_out
    if "-N" in flags:
        return _MATCH_LINE_N.sub(r"\1:", loom_out)
    return _MATCH_LINE.sub(r"\1:\2:", loom_out)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_grep_prints_what_ripgrep_prints(corpus, case):
    root, env = corpus.root, corpus.env
    flags, pattern = case
    want = run_rg(root, flags, pattern)
    got = run_loom(env, flags, pattern)
    assert want.returncode in (0, 1), want.stderr
    assert (got.returncode, comparable(got.stdout, flags)) == (want.returncode, want.stdout), (
        flags, pattern, got.stderr)


@pytest.mark.parametrize("flags,pattern", [
    (["-i", "-w"], "the"), (["-s", "-o", "-w"], "loom"), (["-S", "-c"], "Loom"),
    (["-F", "-i"], "e.g."), (["-F", "-s"], "(at most"), (["-i", "-C", "2"], "watchdog"),
    (["-s", "-A", "1", "-B", "3", "-m", "2"], "grep"), (["-i", "-l"], "ollama"),
    (["-s", "-A", "3", "-m", "1"], "loom"),  # matches in the last after-context show as such
    (["-i", "-o"], r"[0-9]+ ms"), (["-S", "-w", "-o"], "index|indexes"),
    (["-s", "-v", "-c"], "the"), (["-i", "-v", "-A", "1", "-m", "3"], "e"),
    (["-s", "-v", "-o"], "e"), (["-N", "-i"], "watchdog"), (["-N", "-o", "-s"], "loom"),
    (["-N", "-C", "1", "-s"], "Ollama"), (["-s", "-t", "md", "-l"], "loom"),
    (["-i", "-T", "md", "-c"], "the"), (["-s", "-t", "rst", "-t", "org", "-c"], "e"),
    (["-s", "--files-without-match"], "Ollama"), (["-q", "-i"], "loom"),
    (["-s"], ["warp", "tension"]),
    (["-i", "-c"], ["ollama", "watchdog", "the"]), (["-S", "-w", "-o"], ["Loom", "grep"]),
    (["-F", "-s"], ["(at most", "e.g."]),
    (["-F", "-i", "-w", "-c"], ["lo", "    "]), (["-U", "-s"], r"loom\n\n"),
    (["-U", "-i", "-c"], r"\w\n\n"), (["-U", "-s", "-l"], r"\.\n\n#"),
    (["-U", "-s", "-v"], r"\w\n\n"), (["-U", "-s", "-A", "1", "-B", "1"], r"\w\n\n"),
])
def test_grep_agrees_with_ripgrep_on_chosen_cases(corpus, flags, pattern):
    root, env = corpus.root, corpus.env
    want, got = run_rg(root, flags, pattern), run_loom(env, flags, pattern)
    assert want.returncode == 0, want.stderr  # each case finds something (-q: exit 0)
    assert (got.returncode, comparable(got.stdout, flags)) == (0, want.stdout)
