"""Logseq graphs as Logseq shows them, and daily notes: page properties (`alias::`,
`title::`, `tags::`) name the page for `[[links]]`, a journal is titled by its date, and
block properties and block references stay out of snippets and of what `ask` sends.
On a real graph layout (logseq/config.edn, pages/, journals/), through real `loom`
processes, real SQLite files and a real PostgreSQL where one can be started."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from loomcli.extract import markdown
from loomcli.store import Store

from .conftest import FIXTURES, write
from .llm_server import FakeLLM
from .test_notes import _context, _sent, links_of, loom, paths, search

UUID = "6564b0f2-1c2d-4e5f-8a9b-0c1d2e3f4a5b"


def make_graph(tmp_path: Path) -> Path:
    """fixtures/logseq-graph with pages and journals as Logseq writes them."""
    graph = tmp_path / "graph"
    shutil.copytree(FIXTURES / "logseq-graph", graph)
    write(graph / "pages" / "Gardening.md",
          "title:: Gardening\nalias:: allotment, [[Veg Patch]]\ntags:: hobby, [[outdoors]]\n"
          f"\n- Tomatoes need staking in June.\n  id:: {UUID}\n  collapsed:: true\n"
          "- Compost the leaves in autumn\n")
    write(graph / "pages" / "dw.md",
          "title:: Deep Work\ntags:: focus\n\n- Two hours without mail each morning.\n")
    write(graph / "pages" / "Plans.md",
          "- Look back at [[Mar 14th, 2026]] for the planting day\n"
          "- Read [[Deep Work]] again, and [[nowhere]]\n")
    write(graph / "journals" / "2026_03_14.md",
          "- Spent the morning at the [[allotment]] and the [[Veg Patch]]\n"
          f"- Remember (({UUID})) before planting courgettes\n")
    assert loom("scan", str(graph)).returncode == 0
    return graph


# -- the parser ------------------------------------------------------------------------------

def test_daily_note_names_and_titles():
    assert markdown.day_of("journals/2026_03_14.md") == "2026-03-14"
    assert markdown.day_of("Daily/2026-03-14.md") == "2026-03-14"
    assert markdown.day_of("2026.03.14.md") == "2026-03-14"
    for not_a_day in ("2026-02-30.md", "20260314.md", "2026-03_14.md", "x2026-03-14.md",
                      "2026-03-14 notes.md"):
        assert markdown.day_of(not_a_day) is None, not_a_day
    shown = {d: markdown.journal_title(f"2026-01-{d:02d}") for d in (1, 2, 3, 4, 11, 12, 13,
                                                                    21, 22, 23, 31)}
    assert [s.split(",")[0] for s in shown.values()] == [
        "Jan 1st", "Jan 2nd", "Jan 3rd", "Jan 4th", "Jan 11th", "Jan 12th", "Jan 13th",
        "Jan 21st", "Jan 22nd", "Jan 23rd", "Jan 31st"]
    meta = markdown.parse("- A day\n", "journals/2026_03_14.md")
    assert meta.title == "Mar 14th, 2026" and meta.names() == ["mar 14th, 2026"]
    assert meta.fields() == "2026-03-14\nSaturday 14 March 2026\ndaily journal"
    titled = markdown.parse("title:: My day\n\n- x\n", "journals/2026_03_14.md")
    assert titled.title == "My day"  # a page's own title wins
    assert titled.names() == ["my day", "mar 14th, 2026"]  # its date still names it
    from loomcli.extract.text import extract_note

    headed = extract_note(b"# Friday 1 March 2024\n\nMet [[Second idea]].\n",
                          "Daily/2024-03-01.md")
    assert headed.title == "Friday 1 March 2024"  # a heading the author wrote stays
    assert headed.note is not None and headed.note.names() == ["mar 1st, 2024"]
    assert extract_note(b"- met the plumber\n", "Daily/2024-03-01.md").title == "Mar 1st, 2024"
    page = markdown.parse("title:: Deep Work\nalias:: DW, [[Focus/Time]]\n\n- x\n", "p/dw.md")
    assert page.names() == ["dw", "focus/time", "deep work"]


def test_logseq_property_values_as_logseq_reads_them():
    text = ("alias:: [[Veg Patch]] [[The Plot]]\ntags:: #garden #[[deep work]], food, "
            "a [[b]]\n\n- body\n")
    meta = markdown.parse(text)
    assert meta.aliases == ["Veg Patch", "The Plot"]
    assert meta.tags == ["garden", "deep work", "food", "a b"]


# -- page properties and journals on a graph --------------------------------------------------

def test_aliases_titles_and_journal_dates_answer_links(tmp_path, loom_home, backend):
    make_graph(tmp_path)
    day = links_of("journals/2026_03_14.md")
    assert day["title"] == "Mar 14th, 2026"
    assert [(k["target"], k["path"]) for k in day["links"]] == [
        ("allotment", "pages/Gardening.md"), ("Veg Patch", "pages/Gardening.md")]
    garden = links_of("pages/Gardening.md")
    assert garden["backlinks"] == [
        {"path": "journals/2024_03_01.md", "title": "Mar 1st, 2024", "line": 1},
        {"path": "journals/2026_03_14.md", "title": "Mar 14th, 2026", "line": 1}]
    assert garden["tags"] == ["hobby", "outdoors"]
    plans = links_of("pages/Plans.md")
    assert [(k["target"], k["path"]) for k in plans["links"]] == [
        ("Mar 14th, 2026", "journals/2026_03_14.md"), ("Deep Work", "pages/dw.md"),
        ("nowhere", None)]
    assert links_of("pages/dw.md")["backlinks"][0]["path"] == "pages/Plans.md"
    assert {h["path"]: h["backlinks"] for h in search("tomatoes")} == {"pages/Gardening.md": 2}
    # the names are searched with the title's weight; tags are tags
    assert paths("veg patch") == ["pages/Gardening.md", "journals/2026_03_14.md"]
    assert paths("deep work")[0] == "pages/dw.md"
    assert paths("#focus") == ["pages/dw.md"]
    assert paths("compost", "--tag", "hobby") == ["pages/Gardening.md"]
    assert paths("compost", "--tag", "focus") == []


def test_a_note_named_like_an_alias_wins(tmp_path, loom_home, backend):
    graph = tmp_path / "graph"
    shutil.copytree(FIXTURES / "logseq-graph", graph)
    write(graph / "pages" / "allotment.md", "- The allotment page itself\n")
    write(graph / "pages" / "Notes.md", "- See [[allotment]]\n")
    assert loom("scan", str(graph)).returncode == 0
    assert links_of("pages/Notes.md")["links"][0]["path"] == "pages/allotment.md"
    assert [b["path"] for b in links_of("pages/Gardening.md")["backlinks"]] == [
        "journals/2024_03_01.md"]


def test_journals_are_found_by_their_date_in_words(tmp_path, loom_home, backend):
    make_graph(tmp_path)
    vault = tmp_path / "vault"
    write(vault / ".obsidian" / "app.json", "{}")
    write(vault / "Daily" / "2026-03-15.md", "## Tasks\n\n- [ ] water the seedlings\n")
    write(vault / "March plans.md", "# Plans\n\nNothing about the days.\n")
    assert loom("scan", str(vault)).returncode == 0
    hits = search("march 2026 journal")
    assert {h["path"] for h in hits[:2]} == {"journals/2026_03_14.md",
                                             "vault/Daily/2026-03-15.md"}
    assert {h["title"] for h in hits[:2]} == {"Mar 14th, 2026", "Mar 15th, 2026"}
    assert paths("2026-03-15") == ["vault/Daily/2026-03-15.md"]
    assert paths("saturday 14 march")[0] == "journals/2026_03_14.md"


# -- block properties and references -----------------------------------------------------------

def test_block_properties_and_references_stay_out_of_snippets(tmp_path, loom_home, backend):
    make_graph(tmp_path)
    snippet = search("tomatoes")[0]["snippet"]
    assert "Tomatoes" in snippet and "Compost" in snippet
    assert "::" not in snippet and "collapsed" not in snippet and UUID[:8] not in snippet
    ref = search("courgettes")[0]["snippet"]
    assert "Remember" in ref and "courgettes" in ref
    assert "((" not in ref and UUID[:8] not in ref
    # grep and get see the file's bytes as they are
    grep = loom("grep", "id::").stdout
    assert grep.startswith("pages/Gardening.md:6:") and grep.endswith(f":  id:: {UUID}\n")
    assert f"(({UUID}))" in loom("get", "journals/2026_03_14.md").stdout


def test_ask_sends_no_block_properties(tmp_path, loom_home):
    make_graph(tmp_path)
    with FakeLLM() as llm:
        context = _context(loom_home, llm, "when do tomatoes need staking?")
    assert _sent(context)[0] == "pages/Gardening.md"
    sent = context.split("## [pages/Gardening.md]")[1].split("\n## [")[0]
    assert "- Tomatoes need staking in June.\n- Compost the leaves in autumn" in sent
    assert "::" not in sent and UUID[:8] not in sent
    with FakeLLM() as llm:
        context = _context(loom_home, llm, "what before planting courgettes?")
    assert UUID[:8] not in context.split("## [journals/2026_03_14.md]")[1]


# -- an index made before ----------------------------------------------------------------------

BEFORE_013 = """
    DROP TABLE aliases;
    UPDATE files SET title = substr(relpath, 10, 10) WHERE relpath LIKE 'journals/%';
    UPDATE notes SET fields = '' WHERE file_id IN (SELECT id FROM files
                                                  WHERE relpath LIKE 'journals/%');
    INSERT INTO fts(fts) VALUES ('rebuild');
    DELETE FROM migrations WHERE name = '013_aliases';
"""


def test_an_index_made_before_gains_aliases_and_journal_titles(tmp_path, loom_home):
    make_graph(tmp_path)
    db = loom_home / "index.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(BEFORE_013)
        assert not conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'march'").fetchall()
    assert links_of("pages/Plans.md")["links"][0]["path"] == "journals/2026_03_14.md"
    assert links_of("journals/2026_03_14.md")["links"][0]["path"] == "pages/Gardening.md"
    assert paths("march 2026 journal")[0] == "journals/2026_03_14.md"
    assert search("courgettes")[0]["title"] == "Mar 14th, 2026"
    with Store.open(db) as store:
        store.check()  # the BM25 index agrees with what its view gives


def test_a_postgresql_index_made_before_gains_aliases(tmp_path, loom_home, monkeypatch,
                                                     pg_url):
    import psycopg

    monkeypatch.setenv("LOOM_DATABASE_URL", pg_url)
    make_graph(tmp_path)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE aliases")
        conn.execute("DELETE FROM migrations WHERE name = '006_aliases'")
    assert links_of("journals/2026_03_14.md")["links"][0]["path"] == "pages/Gardening.md"
    assert links_of("pages/Plans.md")["links"][0]["path"] == "journals/2026_03_14.md"


def test_a_copied_index_keeps_the_names_and_titles(tmp_path, loom_home, monkeypatch):
    make_graph(tmp_path)
    before = {n: links_of(n) for n in ("pages/Plans.md", "journals/2026_03_14.md",
                                       "pages/Gardening.md")}
    copy = tmp_path / "copy" / "index.db"
    assert loom("migrate", "--to", str(copy)).returncode == 0
    monkeypatch.setenv("LOOM_HOME", str(copy.parent))
    assert {n: links_of(n) for n in before} == before
    assert before["pages/Plans.md"]["links"][0]["path"] == "journals/2026_03_14.md"
