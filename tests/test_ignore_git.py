"""The ignore matcher against git's own verdict, on generated trees and patterns."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.errors import IgnorePatternError
from loomcli.index import discover, ignore

from .conftest import git_unignored, write

EXTS = frozenset({"md", "txt"})
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed")

NAMES = ["a", "b", "ab", "doc", "x y", "é", "a[1]", "star*", "q?", "back\\s", "#h", "!n", "sp "]
FILES = ["a.md", "b.txt", "ab.md", "c.MD", "é.md", "x y.txt", "a[1].md", "#h.md", "!n.md",
         "star*.md", "q?.txt", "sp .md", "back\\s.md", "n.pdf"]


def loom_files(root: Path, extra: list[str] | None = None) -> set[str]:
    patterns = discover.load_patterns(root, extra or [], "config.toml")
    return {f.relpath for f in discover.walk(root, patterns, EXTS).files}


def visible(paths: set[str]) -> set[str]:
    """git's list less what loom skips by design: hidden names and unsupported types."""
    keep = set()
    for p in paths:
        parts = p.split("/")
        if any(part.startswith(".") for part in parts):
            continue
        if discover.kind_of(parts[-1], EXTS) is None:
            continue
        keep.add(p)
    return keep


def make_tree(root: Path, paths: list[str]) -> None:
    for p in paths:
        with contextlib.suppress(IsADirectoryError, NotADirectoryError, FileExistsError):
            write(root / p, "x")


segment = st.lists(
    st.one_of(
        st.sampled_from(NAMES + ["*", "**", "?", "[ab]", "[!a]", "[^b]", "[a-c]", "*.md",
                                 "a*", "*b", "\\*", "\\[1]", "[[:alpha:]]*", "d?c",
                                 "[]a]", "[a-]*", "\\!n*", "\\#h*", "*.MD", "x\\ y*",
                                 "**b", "a**", "[[:space:]]", "[é]*", "?.md", "sp\\ *"]),
    ),
    min_size=1, max_size=3,
).map("/".join)
pattern_line = st.tuples(
    st.booleans(), st.booleans(), st.sampled_from(["", "/", "**/"]), segment,
    st.booleans(), st.sampled_from(["", " ", "  ", "\t"]),
).map(lambda t: ("!" if t[0] else "") + (t[2] if t[1] else "") + t[3]
      + ("/" if t[4] else "") + t[5])
tree_path = st.lists(st.sampled_from(NAMES), min_size=0, max_size=3).flatmap(
    lambda dirs: st.sampled_from(FILES).map(lambda f: "/".join([*dirs, f]))
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    paths=st.lists(tree_path, min_size=1, max_size=25, unique=True),
    root_lines=st.lists(pattern_line, min_size=1, max_size=6),
    nested_lines=st.lists(pattern_line, max_size=3),
    config_lines=st.lists(pattern_line, max_size=2),
)
def test_matches_git_on_random_trees(paths, root_lines, nested_lines, config_lines):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        make_tree(root, paths)
        write(root / ".loomignore", "\n".join(root_lines) + "\n")
        if nested_lines and (root / "a").is_dir():
            write(root / "a" / ".loomignore", "\n".join(nested_lines) + "\n")
        try:
            ours = loom_files(root, config_lines)
        except IgnorePatternError:
            return  # git would silently never match such a line; loom refuses it
        assert ours == visible(git_unignored(root, config_lines))


CASES = [
    # (ignore file, files in the tree)
    ("*.md\n!keep.md\n", ["keep.md", "a.md", "sub/keep.md", "sub/b.txt"]),
    ("sub/\n!sub/keep.md\n", ["sub/keep.md", "sub/x.md", "other/sub/y.md", "sub.md"]),
    ("sub/*\n!sub/keep/\n", ["sub/keep/a.md", "sub/drop/a.md", "sub/z.md"]),
    ("/top.md\n", ["top.md", "d/top.md"]),
    ("a/**/b.md\n", ["a/b.md", "a/x/b.md", "a/x/y/b.md", "b.md", "c/a/b.md"]),
    ("**/logs\n", ["logs/a.md", "x/logs/b.md", "x/logs.md"]),
    ("docs/**\n!docs/**/\n!docs/keep.md\n", ["docs/keep.md", "docs/a.md", "docs/s/keep.md"]),
    ("foo**/bar.md\n", ["foo/bar.md", "fooz/q/bar.md", "foo/a/b/bar.md"]),
    ("\\#x.md\n\\!y.md\nsp\\ \n", ["#x.md", "!y.md", "sp .md", "sp "]),
    ("trail.md   \n", ["trail.md"]),
    ("[[:upper:]]*.md\n", ["Abc.md", "abc.md"]),
    ("*.MD\n", ["a.MD", "a.md"]),
    ("caf?.md\n", ["café.md", "cafe.md"]),
    ("d/\n", ["d/x.md", "e/d/y.md", "d.md"]),
    ("d\n!d/x.md\n", ["d/x.md"]),
]


@pytest.mark.parametrize("ignore_text,tree", CASES)
def test_known_cases_match_git(tmp_path, ignore_text, tree):
    root = tmp_path / "root"
    root.mkdir()
    make_tree(root, tree)
    write(root / ".loomignore", ignore_text)
    assert loom_files(root) == visible(git_unignored(root))


def test_config_patterns_rank_below_loomignore(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a.md", "b.md", "c.md"])
    write(root / ".loomignore", "!a.md\nc.md\n")
    config = ["*.md"]
    assert loom_files(root, config) == {"a.md"} == visible(git_unignored(root, config))


@pytest.mark.parametrize("line,why", [
    ("[ab", "unterminated ["),
    ("x[!]", "unterminated ["),
    ("[[:nope:]]", "unknown character class"),
    ("trail\\", "trailing backslash"),
])
def test_malformed_pattern_names_source_and_line(line, why):
    with pytest.raises(IgnorePatternError) as info:
        ignore.parse_file_bytes(f"# comment\nok.md\n{line}\n".encode(), source=".loomignore")
    message = str(info.value)
    assert message.startswith(f'.loomignore:3: invalid pattern {line!r}: ')
    assert why in message


def test_crlf_and_bom_are_handled_like_git(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a.md", "b.md"])
    write(root / ".loomignore", b"\xef\xbb\xbfa.md\r\n")
    assert loom_files(root) == {"b.md"} == visible(git_unignored(root))
