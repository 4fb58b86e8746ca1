"""Ranking fair between a short note and a big manual (issue 31): the note about the UPS
someone bought beats the manual that holds every word of the question; acronyms keep
their exact form (also in an index made before they did); hybrid is never worse than
both of its lists. Real `loom` subprocesses over a real folder, the built-in model's
vectors."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loomcli.migrations import words_apart
from loomcli.search import retrieve
from loomcli.store import Store
from tests.conftest import scanned_with_meaning, write

LOOM = [sys.executable, "-m", "loomcli"]
UPS_NOTE = ("# New UPS for the NAS\n\nAfter the power cut in March took the NAS down, I "
            "bought an APC Back-UPS BX950 from the shop on Via Roma. The UPS keeps the NAS "
            "and the router going for about twenty minutes.\n")
UPS_BATTERY = ("# UPS battery\n\nThe UPS beeps every few weeks for its self-test; its "
               "battery should last three to five years.\n")
TOPICS = ["pasta", "bread", "garden", "tomatoes", "bicycle", "train", "holiday", "camera",
          "piano", "chess", "running", "coffee", "tea", "books", "movies", "taxes",
          "insurance", "dentist", "passport", "apartment"]
VERBS = ["tried", "fixed", "planned", "compared", "cleaned", "ordered", "cooked", "read"]


def loom(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=900)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def paths(query: str, *args: str) -> list[str]:
    proc = loom("search", query, "--json", *args, check=None)
    assert proc.returncode in (0, 1), proc.stderr
    return [h["path"] for h in json.loads(proc.stdout)["hits"]]


def manual() -> str:
    """A long router manual (about 100 KB) that holds every word of "which UPS did I
    buy", UPS itself only in passing."""
    parts = ["# Router administration guide\n"]
    for n in range(150):
        parts.append(
            f"\n## Chapter {n}: port settings\n\nWhich settings did I change? The status "
            f"page lists every port and the setting each one uses. If you buy an extra "
            f"switch, connect it to port {n % 4 + 1} and wait for the link light. The "
            f"firewall rules of this chapter apply to every interface unless a rule names "
            f"one; the log keeps the last thousand events.\n")
        if n in (40, 90, 140):
            parts.append("\nKeep the router on a UPS so that a power cut does not corrupt "
                         "its configuration while it writes.\n")
    return "".join(parts)


def folder(base: Path) -> Path:
    """A person's folder: 200 short notes on everyday topics, two notes about a UPS,
    notes that say "up" and "io" in lower case, and one long manual."""
    notes = base / "notes"
    rng = random.Random(31)
    for n in range(200):
        topic, other = rng.sample(TOPICS, 2)
        verb = rng.choice(VERBS)
        write(notes / "daily" / f"{n:03d}-{topic}.md",
              f"# {topic.title()} {n}\n\nToday I {verb} the {topic} again; next week the "
              f"{other}. Did I buy enough? A note to remember which one worked.\n")
    write(notes / "breakfast.md", "# Breakfast\n\nCoffee for me; green tea for guests.\n")
    write(notes / "hardware" / "ups-purchase.md", UPS_NOTE)
    write(notes / "hardware" / "ups-battery.md", UPS_BATTERY)
    write(notes / "moods.md", "# Moods\n\nUps and downs this winter; I set up a routine "
          "and kept my backups of the diary.\n")
    write(notes / "python-io.md", "# Async io\n\nasyncio streams: io without threads.\n")
    write(notes / "phones.md", "# Phones\n\nThe family's iOS devices and the macOS laptop "
          "share one DNS server, the NAS.\n")
    write(notes / "invoices.md", "# Invoices\n\nThe plumber's invoice FT-2026-0123 is paid.\n")
    write(notes / "manuals" / "router-guide.md", manual())
    return notes


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fair")
    home = base / "home"
    notes = folder(base)
    return scanned_with_meaning(home, notes, loom)


@pytest.fixture
def home(indexed: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOOM_HOME", str(indexed))
    return indexed


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
@pytest.mark.parametrize("query", ["which UPS did I buy", "which UPS did I buy?",
                                   "UPS I bought"])
def test_the_note_beats_the_manual_holding_every_word(home, mode, query):
    found = paths(query, "--mode", mode)
    assert set(found[:2]) == {"hardware/ups-purchase.md", "hardware/ups-battery.md"}, found[:5]


def test_ask_sends_the_notes_first(home):
    shown = loom("ask", "which UPS did I buy?", "--show-context").stdout
    sent = re.findall(r"^## \[(\S+)\] ", shown, re.M)
    assert set(sent[:2]) == {"hardware/ups-purchase.md", "hardware/ups-battery.md"}, sent


def test_every_word_still_first_when_no_word_is_rare(home):
    """The preference stays: two common words, the files holding both first."""
    found = paths("coffee tea", "--mode", "bm25", "--limit", "60")
    texts = [(home.parent / "notes" / p).read_text().lower() for p in found]
    both = [bool(re.search(r"\bcoffee\b", t) and re.search(r"\btea\b", t)) for t in texts]
    assert both[0] and not both[-1]
    assert both == sorted(both, reverse=True), list(zip(found, both, strict=True))


@pytest.mark.parametrize("query,expected", [
    ("UPS", {"hardware/ups-purchase.md", "hardware/ups-battery.md",
             "manuals/router-guide.md"}),
    ("iOS", {"phones.md"}), ("macOS", {"phones.md"}), ("DNS", {"phones.md"}),
    ("NAS", {"phones.md", "hardware/ups-purchase.md"}),
    ("FT-2026-0123", {"invoices.md"})])
def test_acronyms_match_only_themselves(home, query, expected):
    """Stemmed, UPS was "up" (the moods note's "set up" and "ups"), iOS "io"."""
    assert set(paths(query, "--mode", "bm25")) == expected
    assert paths("FT-2026-0124", "--mode", "bm25") == []


def test_lower_case_words_are_still_stemmed(home):
    assert "moods.md" in paths("ups", "--mode", "bm25")
    assert "python-io.md" in paths("io", "--mode", "bm25")


def test_a_query_in_capitals_is_not_all_acronyms(home):
    assert set(paths("WHICH UPS DID I BUY", "--mode", "bm25")[:2]) == {
        "hardware/ups-purchase.md", "hardware/ups-battery.md"}


def test_words_apart_holds_acronyms_and_cjk():
    assert words_apart("plain words only") is None
    assert words_apart("UPS and iOS, UPS again, macOS, 0xFF, A, Ab") == \
        "ups0 ups0 ios0 macos0 0xff0"
    assert words_apart("東京 UPS").split("\n") == ["東京", "ups0"]


def _as_before_011(db: Path) -> None:
    """Make an index as loom made it before migration 011: `cjk` with CJK pairs only,
    both BM25 indexes without acronyms, and 011 not recorded."""
    from loomcli.migrations import chunk_texts
    from loomcli.search import scripts

    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM migrations WHERE name = '011_exact_words'")
        conn.execute("DELETE FROM cjk")
        for fid, title, body in conn.execute("SELECT f.id, f.title, d.body FROM files f "
                                             "JOIN docs d ON d.id = f.id").fetchall():
            found = [g for g in (scripts.bigram_text(title), scripts.bigram_text(body)) if g]
            if found:
                conn.execute("INSERT INTO cjk VALUES (?, ?)", (fid, "\n".join(found)))
        conn.execute("INSERT INTO fts (fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO chunks (chunks) VALUES ('delete-all')")
        for fid, spans in conn.execute("SELECT file_id, spans FROM vectors").fetchall():
            (body,) = conn.execute("SELECT CAST(body AS BLOB) FROM docs WHERE id = ?",
                                   (fid,)).fetchone()
            for n, text, _ in chunk_texts(body, spans):
                conn.execute("INSERT INTO chunks (rowid, body, grams) VALUES (?, ?, ?)",
                             (fid + n, text, scripts.bigram_text(text)))
    conn.close()


def test_an_index_made_before_gets_its_acronyms(home, tmp_path, monkeypatch):
    """Migration 011 on an index as today's loom made it: the acronyms of every text
    and every passage indexed, and the index consistent."""
    other = tmp_path / "old"
    other.mkdir()
    db = home / "index.db"
    src = sqlite3.connect(db)
    dst = sqlite3.connect(other / "index.db")
    src.backup(dst)
    src.close()
    dst.close()
    (other / "config.toml").write_text((home / "config.toml").read_text())
    _as_before_011(other / "index.db")
    conn = sqlite3.connect(other / "index.db")
    count = "SELECT count(*) FROM {} WHERE {} MATCH 'grams : \"ups0\"'"
    assert conn.execute(count.format("fts", "fts")).fetchone()[0] == 0
    conn.close()
    monkeypatch.setenv("LOOM_HOME", str(other))
    assert set(paths("UPS", "--mode", "bm25")) == {
        "hardware/ups-purchase.md", "hardware/ups-battery.md", "manuals/router-guide.md"}
    with Store.open(other / "index.db") as store:
        store.check()
        assert store.conn.execute(count.format("fts", "fts")).fetchone()[0] == 3
        assert store.conn.execute(count.format("chunks", "chunks")).fetchone()[0] >= 5
        assert store.conn.execute(
            "SELECT count(*) FROM migrations WHERE name = '011_exact_words'").fetchone()[0]


@pytest.mark.parametrize("query", ["which UPS did I buy", "how long does the UPS battery "
                                   "last", "router port settings", "coffee tea",
                                   "what did I cook", "garden tomatoes", "NAS DNS",
                                   "firewall rules log"])
def test_hybrid_is_never_below_both_lists(home, query):
    """A file BM25 and the vectors both rank in their first three is in hybrid's."""
    by_words = paths(query, "--mode", "bm25")[:3]
    by_meaning = paths(query, "--mode", "semantic")[:3]
    fused = paths(query, "--mode", "hybrid")[:3]
    for path in set(by_words) & set(by_meaning):
        assert path in fused, (path, by_words, by_meaning, fused)


def _ranked(ids: list[int], scores: list[float]) -> list[retrieve.Ranked]:
    return [retrieve.Ranked(f, s, "both") for f, s in zip(ids, scores, strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=30, unique=True),
       st.data())
def test_agreed_files_move_up_to_third_and_nothing_else_moves(ids, data):
    scores = sorted(data.draw(st.lists(st.floats(0, 1), min_size=len(ids),
                                       max_size=len(ids))), reverse=True)
    agreed = data.draw(st.lists(st.sampled_from(ids), max_size=retrieve.AGREED,
                                unique=True))
    fused = _ranked(ids, scores)
    out = retrieve.agreed_first(fused, agreed)
    order = [r.file_id for r in out]
    assert sorted(order) == sorted(ids)
    for fid in agreed:
        assert order.index(fid) < retrieve.AGREED
        assert order.index(fid) <= ids.index(fid)  # never moved down
    assert [f for f in order if f not in agreed] == [f for f in ids if f not in agreed]
    assert [f for f in order if f in agreed] == [f for f in ids if f in agreed]
    shown = [r.score for r in out]
    assert shown == sorted(shown, reverse=True)
