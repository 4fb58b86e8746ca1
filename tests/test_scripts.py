"""Every script searchable: Japanese, Chinese, Korean and Thai found by the words people
type, over real text (excerpts of the kernel docs' translations and GNU grep's Thai
messages, fixtures/scripts), through real `loom` subprocesses and a real index."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.search import scripts
from loomcli.search.text import SNIPPET_END, SNIPPET_START, snippet_of
from loomcli.store import quote_fts
from tests.conftest import FIXTURES, write

LOOM = [sys.executable, "-m", "loomcli"]


def loom(*args: str, check: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    dest = tmp_path / "texts"
    shutil.copytree(FIXTURES / "scripts", dest)
    write(dest / "english.md", "# Memory\n\nThe kernel manages memory in pages.\n")
    loom("scan", str(dest))
    return dest


def hits(query: str, *extra: str) -> list[dict]:
    proc = subprocess.run([*LOOM, "search", query, "--json", *extra], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["hits"]


# -- pure: pairs and the query they make ---------------------------------------------------

def test_runs_become_overlapping_pairs_and_thai_marks_are_dropped():
    assert scripts.pairs("メモリ管理") == ["メモ", "モリ", "リ管", "管理"]
    assert scripts.pairs("字") == ["字"]
    assert scripts.pairs("สวัสดี") == ["สว", "วส", "สด"]  # vowel and tone marks dropped
    assert scripts.bigram_text("plain English only") is None
    assert scripts.bigram_text("Linux カーネル と 内存") == "カー ーネ ネル\nと\n内存"


def test_the_marks_dropped_are_exactly_the_combining_marks_of_the_scripts():
    import unicodedata

    inside = [chr(cp) for cp in range(0x110000) if scripts.CHAR.match(chr(cp))]
    marks = {c for c in inside if unicodedata.category(c) == "Mn"}
    assert marks and {c for c in inside if scripts.MARKS.match(c)} == marks
    assert scripts.pairs("か\u3099き") == ["かき"]  # kana's combining voicing mark
    assert scripts.bigram_text("Ünïcödé — but no run") is None


def _pairs_one_run_at_a_time(text: str, cap: int) -> str | None:
    """bigram_text as it was first written: run by run, each without its marks."""
    out, size = [], 0
    for m in re.finditer(f"[{scripts.RANGES}]+", text):
        out.append(" ".join(scripts.pairs(m.group())))
        size += len(m.group())
        if size > cap:
            break
    return "\n".join(out) if out else None


_MIXED = st.text(st.sampled_from("aé —\nメモリ管理字かき\u3099สวัสดี\u0e31\u0e48ກ\u0eb1한국"),
                 max_size=40)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_MIXED, cap=st.sampled_from([3, 10, scripts.PAIRS_MAX_CHARS]))
def test_pairs_of_a_whole_text_are_those_of_its_runs_one_at_a_time(text, cap, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(scripts, "PAIRS_MAX_CHARS", cap)  # past it, only the first runs count
        assert scripts.bigram_text(text) == _pairs_one_run_at_a_time(text, cap)


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(max_codepoint=0x2FFFF), max_size=20)
       | st.sampled_from(["\u0dff\u0e00", "\u0eff\u0f00", "\U0002fa1f", "\U0002fa20", "\ufb01"]))
def test_text_is_told_outside_the_ranges_without_a_pattern(text):
    # scripts.outside() spares a cold search compiling the ranges' patterns.
    found = re.search(f"[{scripts.RANGES}]", text) is not None
    assert scripts.outside(text) == (not found)
    assert scripts.has_runs(text) == found
    assert scripts.runs(text) == re.findall(f"[{scripts.RANGES}]+", text)


def test_a_query_run_is_the_phrase_of_its_pairs():
    assert quote_fts("メモリ") == 'grams : "メモ モリ"'
    assert quote_fts("Linuxカーネル") == '("Linux" AND grams : "カー ーネ ネル")'
    assert quote_fts("字 memory") == 'grams : "字" * AND "memory"'


def test_snippets_mark_a_run_inside_longer_text():
    text = "カーネル内のメモリは、異なった方法で\n配置され得る。"
    got = snippet_of(text, ["メモリ"])
    assert f"{SNIPPET_START}メモリ{SNIPPET_END}" in got
    assert "方法で配置" in got  # a line break inside Japanese text is no space


# -- real text, real index -----------------------------------------------------------------

@pytest.mark.parametrize(("query", "path", "marked"), [
    ("メモリ", "ja_stable_api.txt", "メモリ"),  # katakana inside a longer run
    ("カーネル", "ja_stable_api.txt", "カーネル"),
    ("配置", "ja_stable_api.txt", "配置"),  # kanji
    ("内存", "zh_numa.txt", "内存"),  # Chinese
    ("非统一内存访问", "zh_numa.txt", "非统一内存访问"),
    ("커널", "ko_howto.txt", "커널"),  # Korean, with particles attached in the text
    ("개발자", "ko_howto.txt", "개발자"),
    ("บรรทัด", "th_grep_messages.txt", "บรรทัด"),  # Thai, written without spaces
    ("ข้อความ", "th_grep_messages.txt", "ข้อความ"),
])
def test_words_of_every_script_are_found_with_their_match_highlighted(texts, query, path,
                                                                     marked):
    found = hits(query, "--mode", "bm25")
    assert [h["path"] for h in found] == [path]
    human = loom("search", query, "--mode", "bm25").stdout
    assert human.startswith(path)
    with sqlite3.connect(Path(texts).parent / "loom-home" / "index.db") as conn:
        assert conn.execute("SELECT count(*) FROM cjk").fetchone()[0] == 4
    from loomcli.operations import Corpus

    raw = Corpus.default().search(query, mode="bm25").hits[0].snippet
    assert f"{SNIPPET_START}{marked}" in raw


def test_a_run_that_is_not_in_any_text_is_no_match(texts):
    assert hits("存储器管理器", "--mode", "bm25") == []
    loom("search", "存储器管理器", check=1)
    assert [h["path"] for h in hits("memory kernel")] == ["english.md"]


def test_an_index_made_before_is_migrated_and_finds_japanese(tmp_path, loom_home):
    """An index from before migration 006 (made here by the migrations before it, its
    rows written as that version wrote them) gains the pairs on its first open, keeps
    its text, and finds Japanese."""
    from loomcli import migrations
    from loomcli.store import Store

    text = (FIXTURES / "scripts" / "ja_stable_api.txt").read_text()
    root = tmp_path / "old"
    write(root / "ja.txt", text)
    loom_home.mkdir(parents=True)
    conn = sqlite3.connect(loom_home / "index.db", isolation_level=None)
    saved = migrations.MIGRATIONS
    migrations.MIGRATIONS = [m for m in saved if m[0] < "006"]  # the versions before it
    try:
        migrations.migrate(conn)
    finally:
        migrations.MIGRATIONS = saved
    assert [r[1] for r in conn.execute("PRAGMA table_info(fts)")] == ["title", "body"]
    conn.execute("INSERT INTO roots VALUES (1, ?, 'old')", (str(root),))
    conn.execute("INSERT INTO files (id, root_id, relpath, kind, size, mtime_ns, title, "
                 "content_len, indexed_at) VALUES (1, 1, 'ja.txt', 'note', 1, 1, 'ja', ?, 1)",
                 (len(text.encode()),))
    conn.execute("INSERT INTO docs (id, body) VALUES (1, ?)", (text,))
    conn.execute("INSERT INTO fts (rowid, title, body) VALUES (1, 'ja', ?)", (text,))
    conn.execute("INSERT INTO grams (rowid, body) VALUES (1, ?)", (text,))
    conn.close()
    assert [h["path"] for h in hits("メモリ", "--mode", "bm25")] == ["ja.txt"]
    with Store.open(loom_home / "index.db") as store:
        store.check()
        assert store.conn.execute("SELECT count(*) FROM cjk").fetchone()[0] == 1
