"""grep over a real index: agreement with a naive line scan, offsets, pages, limits."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loomcli import operations
from loomcli.errors import QueryError
from loomcli.extract import Extracted
from loomcli.search import grep
from loomcli.store import Store

from .conftest import FIXTURES, bm25_hits, write

LOOM = [sys.executable, "-m", "loomcli"]
pytestmark = pytest.mark.plain  # also run on a plain install (.ci/run)


def make_store(tmp_path, docs: dict[str, str | Extracted],
               covered: bool | list[bool] = True) -> Store:
    """An index of `docs`; `covered`: which of them are in grep's trigram index already
    (all, none, or one flag per doc; the others wait for it, as after a large scan)."""
    s = Store.open(tmp_path / "index.db", create=True)
    with s.transaction():
        root = s.ensure_root(tmp_path / "notes")
        ids = []
        for i, (path, doc) in enumerate(docs.items()):
            d = doc if isinstance(doc, Extracted) else Extracted(doc, path)
            ids.append(s.add_file(root.id, path, "pdf" if d.pages else "note", 1, 1,
                                  bytes([i]), d))
        flags = [covered] * len(ids) if isinstance(covered, bool) else covered
        s.index_grams([fid for fid, flag in zip(ids, flags, strict=False) if flag])
    return s


def naive(pattern: str, docs: dict[str, str], flags: int) -> list[tuple[str, int, int]]:
    """What grep -n -b would print, computed the slow, obvious way with Python's re."""
    rx = re.compile(pattern, flags)
    out = []
    for path in sorted(docs):
        offset = 0
        for number, line in enumerate(docs[path].split("\n"), start=1):
            if number == docs[path].count("\n") + 1 and line == "":
                break
            m = rx.search(line)
            if m:
                out.append((path, number, offset + len(line[:m.start()].encode())))
            offset += len(line.encode()) + 1
    return out


ALPHABET = "abcAB é\nÉxß-_1"
# Syntax RE2 and Python's re share, with the same meaning on these texts.
PATTERNS = st.sampled_from([
    "a", "ab", "a+b", "é", "É", "x$", "^a", "^$", "[a-c]+", "a|é", "(ab)+", "a.b", "b?c",
    "[^ab]", "1", "-_", "ß", "a{2}", "^.+$", "é+x", r"\d", r"\w+", r"\s", "[éÉ]", "(?i)é",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.text(ALPHABET, max_size=60), min_size=1, max_size=4),
       pattern=PATTERNS, case_sensitive=st.booleans())
def test_agrees_with_a_naive_line_scan(tmp_path_factory, texts, pattern, case_sensitive):
    docs = {f"f{i}.md": t for i, t in enumerate(texts)}
    store = make_store(tmp_path_factory.mktemp("g"), docs)
    got = grep.grep(store, pattern, case_sensitive=case_sensitive, limit=500)
    flags = 0 if case_sensitive else re.IGNORECASE
    assert [(m.path, m.line, m.offset) for m in got.matches] == naive(pattern, docs, flags)
    for m in got.matches:  # every offset starts a match, per loom get
        rest = operations.read_range(store, m.path, m.offset).content
        assert re.match(pattern, rest.split("\n", 1)[0], flags) or re.match(pattern, rest,
                                                                            flags)
    store.close()


def test_catastrophic_pattern_on_a_long_line_returns_at_once(tmp_path):
    store = make_store(tmp_path, {"long.txt": "a" * 200_000 + "!\n"})
    start = time.process_time()  # CPU time: a busy machine does not stretch it
    result = grep.grep(store, "(a+)+$")
    assert time.process_time() - start < 1.0
    assert result.matches == []
    start = time.process_time()  # CPU time: a busy machine does not stretch it
    [m] = grep.grep(store, "(a+)+!").matches
    assert time.process_time() - start < 1.0
    # The match covers the whole line: shown from its start, cut, and marked as cut.
    assert m.trimmed and m.text.startswith("aaa") and m.text.endswith("…")
    assert len(m.text.encode()) <= 1000 + len("…".encode())


def test_long_line_is_trimmed_around_the_match_and_says_so(tmp_path):
    line = "x" * 3000 + " NEEDLE " + "y" * 3000
    store = make_store(tmp_path, {"a.txt": line + "\nshort line\n"})
    [m] = grep.grep(store, "needle").matches
    assert m.trimmed and "NEEDLE" in m.text and m.text.startswith("…") and m.text.endswith("…")
    assert m.offset == 3001
    [short] = grep.grep(store, "short").matches
    assert not short.trimmed and short.text == "short line"


def test_pdf_hits_name_their_page(tmp_path):
    pages = ["first page\n", "second page\nINV-42 here\n", "third\n"]
    text = "".join(pages)
    offsets = [0, len(pages[0].encode()), len((pages[0] + pages[1]).encode())]
    store = make_store(tmp_path, {"doc.pdf": Extracted(text, "Doc", pages=offsets),
                                  "note.md": "INV-42 in a note\n"})
    got = {m.path: m for m in grep.grep(store, r"INV-\d+").matches}
    assert got["doc.pdf"].page == 2 and got["doc.pdf"].line == 3
    assert got["note.md"].page is None


def test_context_limit_and_truncation(tmp_path):
    store = make_store(tmp_path, {"a.md": "\n".join(f"line {i}" for i in range(1, 11)) + "\n"})
    [m] = grep.grep(store, "line 5$", context=2).matches
    assert (m.before, m.text, m.after) == (["line 3", "line 4"], "line 5", ["line 6", "line 7"])
    [first] = grep.grep(store, "line 1$", context=3).matches
    assert first.before == [] and first.after == ["line 2", "line 3", "line 4"]
    cut = grep.grep(store, "line", limit=3)
    assert len(cut.matches) == 3 and cut.truncated
    whole = grep.grep(store, "line", limit=10)
    assert len(whole.matches) == 10 and not whole.truncated
    assert len(grep.grep(store, "line", limit=10_000).matches) == 10  # capped at 500


def test_matches_never_span_lines(tmp_path):
    store = make_store(tmp_path, {"a.md": "foo\nbar foo bar\n"})
    assert [(m.line, m.offset) for m in grep.grep(store, r"foo\s+bar").matches] == [(2, 8)]


def test_unicode_classes_like_grep(tmp_path):
    store = make_store(tmp_path, {"a.md": "un café noir\nnbsp\u00a0here\n"})
    assert grep.grep(store, r"caf\w+").matches[0].text == "un café noir"
    assert [m.line for m in grep.grep(store, r"nbsp\shere").matches] == [2]


def test_bad_pattern_says_why(tmp_path):
    store = make_store(tmp_path, {"a.md": "x"})
    with pytest.raises(QueryError, match=r"invalid pattern '\(a': missing \): \(a"):
        grep.grep(store, "(a")
    with pytest.raises(QueryError, match="invalid escape sequence"):
        grep.grep(store, r"(a)\1")


def test_path_and_glob_select_files(tmp_path):
    store = make_store(tmp_path, {"a/x.md": "hit\n", "a/y.pdf": "hit\n", "b/z.md": "hit\n"})
    assert [m.path for m in grep.grep(store, "hit", path="a/x.md").matches] == ["a/x.md"]
    assert [m.path for m in grep.grep(store, "hit", globs=["*.md"]).matches] == ["a/x.md",
                                                                                 "b/z.md"]
    assert [m.path for m in grep.grep(store, "hit", globs=["a/**"]).matches] == ["a/x.md",
                                                                                 "a/y.pdf"]
    assert [m.path for m in grep.grep(store, "hit", globs=["!*.pdf"]).matches] == ["a/x.md",
                                                                                   "b/z.md"]


# -- through the CLI ------------------------------------------------------------------------

def test_cli_grep_then_get_at_the_offset(tmp_path, loom_home):
    notes = tmp_path / "notes"
    shutil.copytree(FIXTURES / "notes", notes)
    subprocess.run([*LOOM, "scan", str(notes)], check=True, capture_output=True)
    proc = subprocess.run([*LOOM, "grep", "FT-2026-0[0-9]{3}"], capture_output=True,
                          text=True)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [
        "manuals/field-guide.pdf:p4:12:631:Invoice FT-2026-0412 covers the madder root "
        "delivered in March.",
        "projects/loom-controller.md:17:427:Budget: invoice FT-2026-0398 (parts) and "
        "FT-2026-0415 (labour).",
    ]
    data = json.loads(subprocess.run([*LOOM, "grep", "FT-2026-0412", "--json"],
                                     capture_output=True, text=True).stdout)
    assert list(data) == ["matches", "truncated"]
    [m] = data["matches"]
    assert list(m) == ["path", "line", "offset", "page", "text", "before", "after", "trimmed"]
    assert m["page"] == 4
    got = subprocess.run([*LOOM, "get", m["path"], "--offset", str(m["offset"]), "--length",
                          "12"], capture_output=True, text=True).stdout
    assert got == "FT-2026-0412"
    none = subprocess.run([*LOOM, "grep", "no-such-thing-zz"], capture_output=True, text=True)
    assert (none.returncode, none.stdout) == (1, "")
    bad = subprocess.run([*LOOM, "grep", "a[b"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.startswith("loom: invalid pattern 'a[b': missing ]: [b")


def test_cli_grep_context_output_like_grep(tmp_path, loom_home):
    notes = tmp_path / "n"
    write(notes / "a.md", "one\ntwo\nthree\nfour\nfive\n")
    subprocess.run([*LOOM, "scan", str(notes)], check=True, capture_output=True)
    out = subprocess.run([*LOOM, "grep", "-C", "1", "^(two|five)$"], capture_output=True,
                         text=True).stdout
    # Adjacent groups merge as in ripgrep: no `--` between lines 3 and 4.
    assert out == "a.md-1-one\na.md:2:4:two\na.md-3-three\na.md-4-four\na.md:5:19:five\n"


# -- the trigram prefilter: indexed answers equal the linear scan's ------------------------

# Letters whose case folding differs between simple and full Unicode rules (Kelvin sign,
# long s, dotted I, titlecase dž, sharp s), next to their ASCII look-alikes.
TRICKY = "abcKkSsſ\u212aİiǅǆßé É-_1\n"
SPECIAL = set(".^$*+?()[]{}|\\-")
EXAMPLES = int(os.environ.get("LOOM_EXAMPLES", "300"))  # LOOM_EXAMPLES=3000 for a long run


def literal(text: str) -> str:
    return "".join("\\" + ch if ch in SPECIAL else ch for ch in text)


REGEXES = st.recursive(
    st.text(TRICKY.replace("\n", ""), min_size=1, max_size=6).map(literal),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(inner, st.sampled_from(["?", "*", "+", "{1,2}"])).map(
            lambda p: f"(?:{p[0]}){p[1]}"),
        st.tuples(inner, st.sampled_from([".", r"\w", "[abc]", r"\s", "[^a]"]), inner).map(
            "".join),
    ),
    max_leaves=6)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(st.text(TRICKY, max_size=80), min_size=1, max_size=5), pattern=REGEXES,
       case_sensitive=st.booleans(), covered=st.lists(st.booleans(), min_size=5, max_size=5))
def test_indexed_grep_equals_the_linear_scan(tmp_path_factory, texts, pattern, case_sensitive,
                                             covered):
    """Whichever texts are in the trigram index yet (`covered`) — all, after a scan that
    filled it; none or some, while a builder fills it — the answer is the linear scan's."""
    docs = {f"f{i}.md": t for i, t in enumerate(texts)}
    store = make_store(tmp_path_factory.mktemp("t"), docs, covered)
    try:
        fast = grep.grep(store, pattern, case_sensitive=case_sensitive, limit=500)
        slow = grep.grep(store, pattern, case_sensitive=case_sensitive, limit=500,
                         indexed=False)
    finally:
        store.close()
    assert fast == slow


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(st.text(TRICKY, max_size=160), min_size=1, max_size=4), pattern=REGEXES,
       case_sensitive=st.booleans(), block=st.integers(1, 24),
       start=st.sampled_from(["", "^", r"\A", "(?s)", "(?-m)^", r"\b"]),
       end=st.sampled_from(["", "$", r"\z", r"\b"]),
       covered=st.lists(st.booleans(), min_size=4, max_size=4))
@example(texts=["xyz\nabc\n"], pattern="abc", case_sensitive=False, block=1, start=r"\A",
         end="", covered=[True] * 4)  # `\A` at the start of a later block: not the start
def test_grep_by_blocks_equals_the_linear_scan(tmp_path_factory, texts, pattern,
                                               case_sensitive, block, start, end, covered):
    """Long texts are indexed in blocks cut after newlines (here a few characters long,
    so that every text has many); the answer is still the linear scan's."""
    from unittest import mock

    from loomcli.store import sqlite as store_mod

    docs = {f"f{i}.md": t for i, t in enumerate(texts)}
    with mock.patch.object(store_mod, "GREP_BLOCK_CHARS", block):
        store = make_store(tmp_path_factory.mktemp("t"), docs, covered)
    pattern = start + pattern + end
    try:
        fast = grep.grep(store, pattern, case_sensitive=case_sensitive, limit=500)
        slow = grep.grep(store, pattern, case_sensitive=case_sensitive, limit=500,
                         indexed=False)
        store.check()
    finally:
        store.close()
    assert fast == slow


def test_a_long_text_is_read_only_in_its_candidate_blocks(tmp_path, monkeypatch):
    from loomcli.store import sqlite as store_mod

    filler = "".join(f"line {i} of routine words\n" for i in range(4000))  # ~100 KB
    text = filler + "the flag IRQF_ONESHOT is set\n" + filler
    store = make_store(tmp_path, {"long.md": text})
    read: list[int] = []
    real = store_mod.Store._read_runs

    def counted(self, file_id, runs):
        for piece in real(self, file_id, runs):
            read.append(len(piece[2]))
            yield piece

    monkeypatch.setattr(store_mod.Store, "_read_runs", counted)
    try:
        starts = store.block_starts(1)
        assert starts is not None and len(starts) > 3
        (m,) = grep.grep(store, "irqf_oneshot").matches
        assert (m.line, m.offset) == (4001, len(filler) + 9)
        assert len(read) == 1 and read[0] < 40_000  # one block of about 32 KB
        read.clear()  # a pattern without a literal reads every block, in one run here
        assert len(grep.grep(store, "I.Q._O.E.H.T").matches) == 1
        assert read == [len(text)]
        store.check()
        with store.transaction():  # a change takes every block out, then puts the new in
            store.replace_content(1, 1, 2, b"h", Extracted(filler * 2, "long"))
        store.check()
        assert store.block_starts(1) is None  # waiting for grep's index: read whole
        assert grep.grep(store, "irqf_oneshot").matches == []
        with store.transaction():
            store.index_grams([1])
        store.check()
        assert grep.grep(store, "irqf_oneshot").matches == []
        assert store.block_starts(1) not in (None, starts)
    finally:
        store.close()


def test_indexed_grep_reads_only_the_candidates(tmp_path):
    docs = {f"n{i}.md": f"# Note {i}\nroutine words\n" for i in range(200)}
    docs["hit.md"] = "# Hit\nthe flag IRQF_ONESHOT is set\n"
    store = make_store(tmp_path, docs)
    try:
        from loomcli.search.trigrams import required

        need = required("IRQF_ONESHOT")
        assert need == ("lit", "IRQF_ONESHOT")  # a literal, not a backend's query syntax
        assert len(store.candidates(need)) == 1
        result = grep.grep(store, "irqf_oneshot")  # case-insensitive by default
        assert [(m.path, m.line) for m in result.matches] == [("hit.md", 2)]
    finally:
        store.close()


def test_an_index_made_before_the_trigram_table_gets_one(tmp_path):
    import sqlite3

    from loomcli import migrations

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    real = migrations.MIGRATIONS
    try:
        migrations.MIGRATIONS = real[:1]  # what loom 0.1 created
        migrations.migrate(conn)
        conn.execute("INSERT INTO roots VALUES (1, '/n', 'n')")
        conn.execute("INSERT INTO files (id, root_id, relpath, kind, size, mtime_ns, title, "
                     "content_len, indexed_at) VALUES (1, 1, 'a.md', 'note', 1, 1, 'A', 22, 1)")
        conn.execute("INSERT INTO docs VALUES (1, 'the code is FT-2026-0042', NULL)")
        conn.execute("INSERT INTO fts (rowid, title, body) VALUES (1, 'A', "
                     "'the code is FT-2026-0042')")
    finally:
        migrations.MIGRATIONS = real
        conn.close()
    store = Store.open(db)
    try:
        assert grep.grep(store, "FT-2026-[0-9]{4}").matches[0].offset == 12
        store.check()
    finally:
        store.close()


def test_an_index_with_whole_file_trigrams_moves_to_blocks(tmp_path):
    from loomcli import migrations

    real = migrations.MIGRATIONS
    try:
        # the trigram table of the previous stop (the later migrations: today's store)
        migrations.MIGRATIONS = [m for m in real if m[0] != "004_grams_blocks"]
        store = make_store(tmp_path, {"a.md": "the code is FT-2026-0042\n"})
        store.close()
    finally:
        migrations.MIGRATIONS = real
    store = Store.open(tmp_path / "index.db")
    try:
        assert grep.grep(store, "FT-2026-[0-9]{4}").matches[0].offset == 12
        long = "".join(f"line {i}\n" for i in range(10_000)) + "FT-2026-0043\n"
        with store.transaction():
            store.replace_content(1, 1, 2, b"h", Extracted(long, "a"))
            store.index_grams([1])
        store.check()
        (m,) = grep.grep(store, "FT-2026-[0-9]{4}").matches
        assert m.line == 10_001 and store.block_starts(1)
    finally:
        store.close()


# -- ripgrep's flags (tests/test_grep_ripgrep.py compares them with rg itself) -------------

@pytest.mark.parametrize("pattern,upper", [
    ("taskgroup", False), ("TaskGroup", True), (r"\W+\S", False), (r"\p{Lu}x", False),
    (r"\x41b", False), (r"\Qa.B\E", True), ("[[:upper:]]a", False), ("(?P<Name>a)", False),
    ("é", False), ("É", True),
])
def test_smart_case_reads_upper_case_literals_only(pattern, upper):
    assert grep.has_uppercase(pattern) is upper


def test_case_word_fixed_and_max_count(tmp_path):
    store = make_store(tmp_path, {"a.md": "TaskGroup here\ntaskgroup there\nsubtaskgroups\n"
                                  "a.b and axb\n"})

    def lines(pattern, **kw):
        return [m.line for m in grep.matches(store, pattern, **kw)]

    assert lines("taskgroup", case="smart") == [1, 2, 3]
    assert lines("TaskGroup", case="smart") == [1]
    assert lines("TaskGroup", case="ignore") == [1, 2, 3]
    assert lines("taskgroup", case="sensitive") == [2, 3]
    assert lines("taskgroup", word=True) == [1, 2]
    assert lines("a.b") == [4] and lines("a.b", fixed=True) == [4]
    [m] = grep.matches(store, "a.b", fixed=True, every=True)
    assert m.parts == [(len("TaskGroup here\ntaskgroup there\nsubtaskgroups\n"), "a.b")]
    assert lines("task", max_count=2) == [1, 2]
    with pytest.raises(QueryError, match="invalid pattern"):
        list(grep.matches(store, "(a", word=True))


def cli_store(tmp_path, text: str) -> None:
    notes = tmp_path / "n"
    write(notes / "a.md", text)
    subprocess.run([*LOOM, "scan", str(notes)], check=True, capture_output=True)


def test_cli_grep_prints_every_line_without_a_limit(tmp_path, loom_home):
    cli_store(tmp_path, "".join(f"line {i}\n" for i in range(2000)))
    out = subprocess.run([*LOOM, "grep", "line"], capture_output=True, text=True)
    assert (out.returncode, len(out.stdout.splitlines()), out.stderr) == (0, 2000, "")
    cut = subprocess.run([*LOOM, "grep", "line", "--limit", "3"], capture_output=True,
                         text=True)
    assert cut.stdout.splitlines() == ["a.md:1:0:line 0", "a.md:2:7:line 1", "a.md:3:14:line 2"]
    assert cut.stderr == "loom: stopped after 3 matching lines (--limit 3)\n"
    data = json.loads(subprocess.run([*LOOM, "grep", "line", "--json"], capture_output=True,
                                     text=True).stdout)
    assert len(data["matches"]) == 2000 and data["truncated"] is False


def test_cli_grep_stops_quietly_when_its_reader_goes(tmp_path, loom_home):
    cli_store(tmp_path, "".join(f"line {i}\n" for i in range(200_000)))
    proc = subprocess.Popen([*LOOM, "grep", "line"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"a.md:1:0:line 0\n"
    proc.stdout.close()  # like `| head -1`
    assert proc.wait() == 0
    assert proc.stderr.read() == b""


def test_cli_grep_colour_heading_and_shapes(tmp_path, loom_home, monkeypatch):
    cli_store(tmp_path, "one foo foo\ntwo\n")

    def run(*args, **env):
        return subprocess.run([*LOOM, "grep", *args], capture_output=True, text=True,
                              env={**os.environ, **env}).stdout

    assert run("--color", "always", "foo") == (
        "\x1b[35ma.md\x1b[0m:\x1b[32m1\x1b[0m:4:one \x1b[1m\x1b[31mfoo\x1b[0m "
        "\x1b[1m\x1b[31mfoo\x1b[0m\n")
    assert run("--color", "auto", "foo") == "a.md:1:4:one foo foo\n"  # not a terminal
    assert run("foo", NO_COLOR="1") == "a.md:1:4:one foo foo\n"
    assert run("--heading", "foo") == "a.md\n1:4:one foo foo\n"
    assert run("-o", "foo") == "a.md:1:4:foo\na.md:1:8:foo\n"
    assert run("-c", "o") == "a.md:2\n" and run("-l", "o") == "a.md\n"
    assert run("-n", "two") == "a.md:2:12:two\n"  # -n: line numbers, as always


def test_search_hits_name_the_page_of_their_snippet(tmp_path):
    pages = ["first page\n", "second page\nthe madder root\n", "third\n"]
    offsets = [0, len(pages[0]), len(pages[0] + pages[1])]
    store = make_store(tmp_path, {"doc.pdf": Extracted("".join(pages), "Doc", pages=offsets),
                                  "note.md": "madder in a note\n"})
    hits = {h.path: h for h in bm25_hits(store, "madder", 10)}
    assert hits["doc.pdf"].page == 2 and hits["note.md"].page is None


def test_a_pattern_of_white_space_is_searched_for_as_ripgrep_does(tmp_path, loom_home):
    write(tmp_path / "n" / "a.md", "two  spaces\none space\n")
    subprocess.run([*LOOM, "scan", str(tmp_path / "n")], check=True, capture_output=True)
    found = subprocess.run([*LOOM, "grep", "-F", "  "], capture_output=True, text=True)
    assert (found.returncode, found.stdout) == (0, "a.md:1:3:two  spaces\n")
    empty = subprocess.run([*LOOM, "grep", ""], capture_output=True, text=True)
    assert (empty.returncode, empty.stderr) == (2, "loom: pattern must not be empty\n")
