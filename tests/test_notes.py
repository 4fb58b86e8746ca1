"""Notes as notes: front matter, #tags, [[wikilinks]] and backlinks, on a real Obsidian
vault layout (fixtures/vault) and a Logseq graph (fixtures/logseq-graph), through real
`loom` processes, a real `loom serve`, a real MCP session and real SQLite files."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.extract import markdown
from loomcli.store import Store

from .conftest import FIXTURES, write
from .llm_server import FakeLLM

LOOM = [sys.executable, "-m", "loomcli"]


def loom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))


def search(*args: str) -> list[dict]:
    proc = loom("search", "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["hits"] if proc.returncode == 0 else []


def paths(*args: str) -> list[str]:
    return [h["path"] for h in search(*args)]


@pytest.fixture
def vault(tmp_path: Path, loom_home: Path) -> Path:
    folder = tmp_path / "vault"
    shutil.copytree(FIXTURES / "vault", folder)
    proc = loom("scan", str(folder))
    assert proc.returncode == 0, proc.stderr
    return folder


# -- the parser ----------------------------------------------------------------------------

def test_yaml_front_matter_keys_in_every_form():
    text = ("---\ntitle: 'A title'  \naliases: [One, \"Two, three\"]\ntags:\n  - a\n  - "
            "\"b/c\"\nother:\n  nested: x\n---\nBody #d and #e/f, not #1 nor a#g.\n")
    meta = markdown.parse(text)
    assert (meta.title, meta.aliases, meta.tags) == ("A title", ["One", "Two, three"],
                                                     ["a", "b/c", "d", "e/f"])
    assert text[meta.body_start:].startswith("Body")
    assert meta.fields() == "One\nTwo, three\na\nb c\nd\ne f"


def test_toml_and_logseq_front_matter():
    toml = markdown.parse('+++\ntitle = "T"\ntags = ["x"]\nalias = "al"\n+++\nbody\n')
    assert (toml.title, toml.aliases, toml.tags) == ("T", ["al"], ["x"])
    logseq = markdown.parse("title:: Page\nalias:: p1, p2\ntags:: t1, [[t2]]\n\n- body\n")
    assert (logseq.title, logseq.aliases, logseq.tags) == ("Page", ["p1", "p2"], ["t1", "t2"])
    assert logseq.body_start == len("title:: Page\nalias:: p1, p2\ntags:: t1, [[t2]]\n")


def test_malformed_front_matter_never_fails():
    unclosed = "---\ntitle: [never closed\nmore text\n"
    assert markdown.parse(unclosed).body_start == 0  # text like the rest
    broken_toml = "+++\ntitle = = nope\n+++\nbody #tag\n"
    meta = markdown.parse(broken_toml)  # metadata without fields
    assert broken_toml[meta.body_start:] == "body #tag\n" and meta.title is None
    assert meta.tags == ["tag"]
    huge = "---\n" + "x: y\n" * 20_000  # no closing line within 64 KB: text
    assert markdown.parse(huge + "---\nbody\n").body_start == 0


def test_tags_and_links_skip_code_and_know_their_lines():
    text = ("line one [[A]]\n```\n#nottag [[NotLink]]\n```\n`#nope` #yes http://x.org/#frag"
            "\n![[Pic.png]] [[B#Sec|shown]] [[#local]]\n")
    meta = markdown.parse(text)
    assert meta.tags == ["yes"]
    assert [(k.target, k.heading, k.alias, k.line) for k in meta.links] == [
        ("A", None, None, 1), ("Pic.png", None, None, 6), ("B", "Sec", "shown", 6)]


def test_parsing_is_bounded():
    many = " ".join(f"#t{i} [[n{i}]]" for i in range(5000))
    meta = markdown.parse(many)
    assert len(meta.tags) == markdown.TAGS_MAX and len(meta.links) == markdown.LINKS_MAX


# -- the vault ------------------------------------------------------------------------------

def test_vault_layout_obsidian_folders_skipped(vault):
    listed = loom("files").stdout.split("\n")
    assert [p for p in listed if p] == [
        "Archive/2023/old/Loom.md", "Broken.md", "Daily/2024-03-01.md",
        "Hardware/UPS purchase.md", "Home.md", "Ideas/Idea one.md", "Ideas/Second idea.md",
        "Projects/Loom.md"]


def test_tags_search_and_filter(vault):
    assert sorted(paths("#idea")) == ["Ideas/Idea one.md", "Ideas/Second idea.md"]
    # nested tags: a tag matches those under it, case-insensitively
    assert sorted(paths("#project")) == ["Ideas/Idea one.md", "Ideas/Second idea.md",
                                         "Projects/Loom.md"]
    assert sorted(paths("loom", "--tag", "Project/Loom")) == sorted(paths("#project/loom"))
    assert paths("fields", "--tag", "idea", "--tag", "project") == ["Ideas/Idea one.md"]
    assert sorted(paths("notes", "--tag", "idea", "--tag", "project")) == [
        "Ideas/Idea one.md", "Ideas/Second idea.md"]
    assert paths("notes", "--tag", "idea", "--tag", "hardware") == []
    assert paths("#daily") == ["Daily/2024-03-01.md"]
    assert paths("#notatag") == [] and paths("#alsonotatag") == []  # code is not tags
    assert paths("battery", "--tag", "hardware") == ["Hardware/UPS purchase.md"]
    proc = loom("search", "battery", "--tag", "idea")
    assert proc.returncode == 1 and proc.stderr == "loom: no matches\n"


def test_front_matter_fields_are_title_fields_and_its_text_is_not_body(vault):
    assert paths("weaver") == ["Projects/Loom.md"]  # a TOML alias
    assert paths("dashboard") == ["Home.md"]  # a YAML alias
    hits = search("Loom project")
    assert hits[0]["path"] == "Projects/Loom.md" and hits[0]["title"] == "Loom project"
    assert paths("cssclass") == [] and paths("wide") == []  # other keys: not text
    for hit in search("battery") + search("backlinks") + search("#idea"):
        assert "---" not in hit["snippet"] and "tags:" not in hit["snippet"]
    snippet = search("model")[0]["snippet"]  # not "…hardware, purchase] --- ## Model"
    assert snippet.startswith("…Model I bought an APC Back-UPS 700"), snippet


def test_grep_and_get_show_the_file_as_it_is(vault):
    proc = loom("grep", "--json", "cssclass")
    (m,) = json.loads(proc.stdout)["matches"]
    text = (vault / "Home.md").read_bytes()
    assert (m["path"], m["line"], m["offset"]) == ("Home.md", 7, text.index(b"cssclass"))
    got = loom("get", "Home.md", "--offset", str(m["offset"]), "--length", "14")
    assert got.stdout == "cssclass: wide"
    assert loom("get", "Home.md").stdout == text.decode()


def test_malformed_front_matter_is_text(vault):
    assert paths("never closed") == ["Broken.md"]


def test_links_resolve_as_obsidian_does(vault):
    data = json.loads(loom("links", "Home.md", "--json").stdout)
    assert data == {
        "path": "Home.md", "title": "Vault home", "tags": ["index", "meta"],
        "links": [
            {"target": "Projects/Loom", "heading": None, "alias": "the loom project",
             "line": 11, "path": "Projects/Loom.md"},
            {"target": "UPS purchase", "heading": "Model", "alias": "my UPS note",
             "line": 12, "path": "Hardware/UPS purchase.md"},
            {"target": "Missing note", "heading": None, "alias": None, "line": 13,
             "path": None}],
        "backlinks": [{"path": "Ideas/Idea one.md", "title": "Idea one", "line": 5}]}
    loom_note = json.loads(loom("links", str(vault / "Projects" / "Loom.md"), "--json").stdout)
    # [[Loom]] names two files: the shorter path wins; [[second IDEA]]: any case
    assert [b["path"] for b in loom_note["backlinks"]] == [
        "Daily/2024-03-01.md", "Home.md", "Ideas/Second idea.md"]
    assert [k["path"] for k in loom_note["links"]] == ["Ideas/Idea one.md",
                                                      "Ideas/Second idea.md"]
    assert json.loads(loom("links", "Archive/2023/old/Loom.md", "--json").stdout
                      )["backlinks"] == []
    human = loom("links", "Home.md").stdout
    assert "  13: [[Missing note]] -> (no such note)\n" in human
    assert "  12: [[UPS purchase#Model]] -> Hardware/UPS purchase.md\n" in human
    missing = loom("links", "Nope.md")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("loom: Nope.md: not in the index")


def test_search_hits_count_backlinks(vault):
    counts = {h["path"]: h["backlinks"] for h in search("loom", "--limit", "20")}
    assert counts["Projects/Loom.md"] == 3 and counts["Archive/2023/old/Loom.md"] == 0
    assert {h["path"]: h["backlinks"] for h in search("#idea")} == {
        "Ideas/Idea one.md": 2, "Ideas/Second idea.md": 1}


def test_links_follow_the_vault_as_it_changes(vault):
    write(vault / "Missing note.md", "Now it exists.\n")
    (vault / "Daily" / "2024-03-01.md").unlink()
    write(vault / "Projects" / "Loom.md", "No front matter any more, no links.\n")
    assert loom("scan", str(vault)).returncode == 0
    home = json.loads(loom("links", "Home.md", "--json").stdout)
    assert home["links"][2]["path"] == "Missing note.md"
    back = json.loads(loom("links", "Projects/Loom.md", "--json").stdout)
    assert [b["path"] for b in back["backlinks"]] == ["Home.md", "Ideas/Second idea.md"]
    assert back["links"] == [] and back["tags"] == [] and back["title"] == "Loom"
    assert paths("weaver") == [] and paths("#active") == []
    (vault / "Ideas" / "Second idea.md").rename(vault / "Ideas" / "Renamed idea.md")
    assert loom("scan", str(vault)).returncode == 0
    assert json.loads(loom("links", "Projects/Loom.md", "--json").stdout)["backlinks"] == [
        {"path": "Home.md", "title": "Vault home", "line": 11},
        # a move keeps the text, and the title it had (from the file's name here)
        {"path": "Ideas/Renamed idea.md", "title": "Second idea", "line": 8}]
    with Store.open(Path(os.environ["LOOM_HOME"]) / "index.db") as store:
        store.check()  # the BM25 index agrees with what its view gives


def test_logseq_graph(tmp_path, loom_home):
    graph = tmp_path / "graph"
    shutil.copytree(FIXTURES / "logseq-graph", graph)
    assert loom("scan", str(graph)).returncode == 0
    assert loom("files").stdout == "journals/2024_03_01.md\npages/Gardening.md\n"
    assert sorted(paths("#outdoors")) == ["journals/2024_03_01.md", "pages/Gardening.md"]
    assert paths("allotment") == ["pages/Gardening.md"]
    assert paths("tomatoes")[0] == "pages/Gardening.md"
    assert "tags::" not in search("tomatoes")[0]["snippet"]
    back = json.loads(loom("links", "pages/Gardening.md", "--json").stdout)["backlinks"]
    assert back == [{"path": "journals/2024_03_01.md", "title": "Mar 1st, 2024", "line": 1}]


def links_of(note: str) -> dict:
    proc = loom("links", note, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_links_resolve_in_their_own_root_first(tmp_path, loom_home, backend):
    # Two roots, each with its own Index.md and Ideas.md: each index links to its own.
    for name in ("alpha", "beta"):
        write(tmp_path / name / "Index.md", f"# {name} index\n\nSee [[Ideas]] and [[Only]] "
                                            f"and [[Twice]] and [[ideas|mine]].\n")
        write(tmp_path / name / "Ideas.md", f"# {name} ideas\n\nThoughts of {name}.\n")
    write(tmp_path / "alpha" / "Only.md", "# Only in alpha\n")
    write(tmp_path / "alpha" / "Twice.md", "# Twice, alpha\n")
    write(tmp_path / "gamma" / "Twice.md", "# Twice, gamma\n")
    proc = loom("scan", *(str(tmp_path / n) for n in ("alpha", "beta", "gamma")))
    assert proc.returncode == 0, proc.stderr
    assert loom("files").stdout.split() == [
        "Ideas.md", "Index.md", "Only.md", "Twice.md", "beta/Ideas.md", "beta/Index.md",
        "gamma/Twice.md"]
    alpha, beta = links_of("Index.md"), links_of("beta/Index.md")
    assert [k["path"] for k in alpha["links"]] == ["Ideas.md", "Only.md", "Twice.md",
                                                   "Ideas.md"]
    # elsewhere only when one vault holds the name: Only.md yes, Twice.md (twice) no
    assert [k["path"] for k in beta["links"]] == ["beta/Ideas.md", "Only.md", None,
                                                  "beta/Ideas.md"]
    assert [b["path"] for b in links_of("Ideas.md")["backlinks"]] == ["Index.md"]
    assert [b["path"] for b in links_of("beta/Ideas.md")["backlinks"]] == ["beta/Index.md"]
    assert [b["path"] for b in links_of("Only.md")["backlinks"]] == ["Index.md",
                                                                     "beta/Index.md"]
    assert [b["path"] for b in links_of("gamma/Twice.md")["backlinks"]] == []
    counts = {h["path"]: h["backlinks"] for h in search("ideas")}
    assert counts == {"Ideas.md": 1, "beta/Ideas.md": 1, "Index.md": 0, "beta/Index.md": 0}
    human = loom("links", str(tmp_path / "beta" / "Index.md")).stdout
    assert "  3: [[Ideas]] -> beta/Ideas.md\n" in human
    assert "  3: [[Twice]] -> (no such note)\n" in human


def test_links_resolve_in_their_own_vault_inside_one_root(tmp_path, loom_home, backend):
    # One folder holding two Obsidian vaults and two Logseq graphs: a link stays in its
    # vault (by path order alone, home/ and g1/ would win every time).
    shelf = tmp_path / "shelf"
    for vault in ("home", "work"):
        write(shelf / vault / ".obsidian" / "app.json", "{}\n")
        write(shelf / vault / "Plan.md", f"# {vault} plan\n")
        write(shelf / vault / "Days" / "Today.md", "Follow [[Plan]].\n")
    for graph in ("g1", "g2"):
        write(shelf / graph / "logseq" / "config.edn", "{}\n")
        write(shelf / graph / "pages" / "Topic.md", f"- {graph} topic\n")
        write(shelf / graph / "journals" / "2024_03_01.md", "- about [[topic]]\n")
    write(shelf / "Loose.md", "A note of the shelf itself: [[Plan]] [[Topic]] [[Loose]].\n")
    proc = loom("scan", str(shelf))
    assert proc.returncode == 0, proc.stderr
    assert [k["path"] for k in links_of("work/Days/Today.md")["links"]] == ["work/Plan.md"]
    assert [k["path"] for k in links_of("home/Days/Today.md")["links"]] == ["home/Plan.md"]
    assert [k["path"] for k in links_of("g2/journals/2024_03_01.md")["links"]] == [
        "g2/pages/Topic.md"]
    assert [b["path"] for b in links_of("work/Plan.md")["backlinks"]] == [
        "work/Days/Today.md"]
    assert [b["path"] for b in links_of("g2/pages/Topic.md")["backlinks"]] == [
        "g2/journals/2024_03_01.md"]
    # From outside every vault, a name two vaults hold is ambiguous; its own, not.
    assert [k["path"] for k in links_of("Loose.md")["links"]] == [None, None, "Loose.md"]


def test_logseq_namespaces_and_tags_of_words(tmp_path, loom_home, backend):
    graph = tmp_path / "graph"
    shutil.copytree(FIXTURES / "logseq-graph", graph)
    write(graph / "pages" / "projects___loom.md",
          "title:: projects/loom\ntags:: work, [[deep work]]\n\n- The loom project page.\n")
    write(graph / "pages" / "old%2Fnotes.md", "- A namespaced page of an older graph.\n")
    write(graph / "pages" / "loom.md", "- Not the namespaced page: its last name only.\n")
    write(graph / "journals" / "2024_03_02.md",
          "- Worked on [[projects/loom]] #[[deep work]] #garden\n  id:: 65f0c2a1\n"
          "- Read [[old/notes]] and [[Projects/Loom]] again\n")
    assert loom("scan", str(graph)).returncode == 0
    day = links_of("journals/2024_03_02.md")
    assert [(k["target"], k["line"], k["path"]) for k in day["links"]] == [
        ("projects/loom", 1, "pages/projects___loom.md"),
        ("deep work", 1, None),
        ("old/notes", 3, "pages/old%2Fnotes.md"),
        ("Projects/Loom", 3, "pages/projects___loom.md")]
    assert day["tags"] == ["deep work", "garden"]
    page = links_of("pages/projects___loom.md")
    assert page["title"] == "projects/loom" and page["tags"] == ["deep work", "work"]
    assert page["backlinks"] == [{"path": "journals/2024_03_02.md", "title": "Mar 2nd, 2024",
                                  "line": 1}]
    assert links_of("pages/loom.md")["backlinks"] == []
    assert links_of("pages/old%2Fnotes.md")["backlinks"][0]["line"] == 3
    assert sorted(paths("loom", "--tag", "deep work")) == ["journals/2024_03_02.md",
                                                           "pages/projects___loom.md"]
    assert {h["path"]: h["backlinks"] for h in search("namespaced")} == {
        "pages/loom.md": 0, "pages/old%2Fnotes.md": 1}


def test_plain_markdown_folder_links(tmp_path, loom_home, backend):
    """A folder of plain Markdown (no vault): `[text](path.md)` links, relative to the
    note, are links too; URLs and images are not."""
    docs = tmp_path / "docs"
    write(docs / "README.md", "# Handbook\n\nStart with [the setup](guide/setup.md) and the "
          "[FAQ](<faq page.md>).\nSee [elsewhere](https://example.org/x.md) and "
          "![diagram](img/arch.png).\n\n```\n[not a link](guide/deploy.md)\n```\n")
    write(docs / "guide" / "setup.md", "# Setup\n\nBack to [the start](../README.md#top). "
          "Next: [deploy](./deploy.md \"Deploying\"), [gone](gone.md), [top](/faq%20page.md).\n")
    write(docs / "guide" / "deploy.md", "# Deploy\n\nFirst do the [setup](setup.md).\n")
    write(docs / "faq page.md", "# FAQ\n")
    write(docs / "a" / "setup.md", "# Another setup, by name shorter than guide/setup.md\n")
    assert loom("scan", str(docs)).returncode == 0
    readme = links_of("README.md")
    assert [(k["target"], k["alias"], k["line"], k["path"]) for k in readme["links"]] == [
        ("./guide/setup.md", "the setup", 3, "guide/setup.md"),
        ("./faq page.md", "FAQ", 3, "faq page.md")]
    setup = links_of("guide/setup.md")
    assert [(k["target"], k["heading"], k["path"]) for k in setup["links"]] == [
        ("../README.md", "top", "README.md"), ("./deploy.md", None, "guide/deploy.md"),
        ("./gone.md", None, None), ("/faq page.md", None, "faq page.md")]
    assert [b["path"] for b in setup["backlinks"]] == ["README.md", "guide/deploy.md"]
    assert links_of("a/setup.md")["backlinks"] == []
    assert [b["path"] for b in links_of("faq page.md")["backlinks"]] == [
        "README.md", "guide/setup.md"]
    human = loom("links", "guide/setup.md").stdout
    assert "  3: [deploy](./deploy.md) -> guide/deploy.md\n" in human
    assert "  3: [gone](./gone.md) -> (no such note)\n" in human


# -- ask --------------------------------------------------------------------------------------

def _context(loom_home: Path, llm: FakeLLM, *args: str) -> str:
    write(loom_home / "config.toml", f'[llm]\nprovider = "ollama"\nmodel = "m"\n'
                                     f'endpoint = "{llm.url}"\n')
    proc = loom("ask", "--show-context", *args)
    assert proc.returncode == 0 and llm.chats() == [], proc.stderr
    return proc.stdout


def _sent(context: str) -> list[str]:
    return [line[4:].split("]")[0] for line in context.splitlines() if line.startswith("## [")]


def test_ask_leaves_front_matter_out_and_adds_linked_notes(vault, loom_home):
    with FakeLLM() as llm:
        context = _context(loom_home, llm, "where does everything start?")
        assert _sent(context) == ["Home.md", "Projects/Loom.md", "Hardware/UPS purchase.md"]
        assert "cssclass" not in context and "Dashboard" not in context
        assert "## [Home.md] Vault home\n# Home\n\nWhere everything starts." in context
        assert "title = " not in context and "tags: [hardware" not in context
        assert _sent(_context(loom_home, llm, "--top-k", "1", "where does everything start?")
                     ) == ["Home.md"]


def test_ask_head_of_a_long_note_starts_after_its_front_matter(tmp_path, loom_home):
    folder = tmp_path / "long"
    body = "".join(f"Paragraph {i} about gardening and compost.\n" for i in range(2000))
    write(folder / "long.md", "---\ntitle: Long\nsecret_key: frontmatter-only\n---\n"
          "# Opening line\n" + body + "The answer: zucchini.\n")
    assert loom("scan", str(folder)).returncode == 0
    with FakeLLM() as llm:
        context = _context(loom_home, llm, "zucchini answer")
    assert "frontmatter-only" not in context
    assert "## [long.md] Long\n# Opening line\nParagraph 0" in context
    assert "The answer: zucchini." in context


# -- HTTP and MCP -----------------------------------------------------------------------------

def test_http_search_takes_tags(vault):
    from .test_http import Server

    server = Server()
    try:
        status, found = server.call("POST", "/search", {"query": "#idea", "excerpt_chars": 0})
        assert status == 200 and sorted(h["path"] for h in found["hits"]) == [
            "Ideas/Idea one.md", "Ideas/Second idea.md"]
        status, found = server.call("POST", "/search", {"query": "loom", "tag": ["active"]})
        assert status == 200 and [h["path"] for h in found["hits"]] == ["Projects/Loom.md"]
        assert found["hits"][0]["backlinks"] == 3
        assert "tags = " not in found["hits"][0]["content"]
        status, bad = server.call("POST", "/search", {"query": "loom", "tag": [3]})
        assert status == 400 and "tag" in bad["error"]
        assert found["hits"][0]["tags"] == ["active", "project/loom"]
        status, found = server.call("POST", "/search", {"query": "weaver"})  # an alias
        assert status == 200 and [h["path"] for h in found["hits"]] == ["Projects/Loom.md"]
        # POST /links answers what `loom links --json` prints
        status, links = server.call("POST", "/links", {"path": "Home.md"})
        assert status == 200 and links == json.loads(loom("links", "Home.md", "--json").stdout)
        status, gone = server.call("POST", "/links", {"path": "Nope.md"})
        assert status == 404 and gone == {"error": "Nope.md: not in the index — see `loom "
                                                   "files` for the indexed paths"}
    finally:
        server.stop()


def test_mcp_search_takes_tags(vault, loom_home):
    from .test_mcp import run_session, structured

    async def body(client):
        tagged = structured(await client.call_tool(
            "loom_search", {"query": "fields", "tag": ["idea", "project/loom"]}))
        tools = await client.list_tools()
        return tagged, next(t for t in tools.tools if t.name == "loom_search")

    tagged, tool = run_session(loom_home, body)
    assert [h["path"] for h in tagged["hits"]] == ["Ideas/Idea one.md"]
    assert tagged["hits"][0]["backlinks"] == 2
    assert "tag" in tool.input_schema["properties"]


# -- upgrading an index made before notes were notes -------------------------------------------

BEFORE_012 = """
    DROP TABLE fts; DROP VIEW fts_source; DROP TABLE notes; DROP TABLE tags;
    DROP TABLE links;
    CREATE VIEW fts_source AS
        SELECT files.id AS id, files.title AS title, docs.body AS body, cjk.grams AS grams
        FROM files JOIN docs ON docs.id = files.id LEFT JOIN cjk ON cjk.id = files.id;
    CREATE VIRTUAL TABLE fts USING fts5(title, body, grams, content='fts_source',
        content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
    INSERT INTO fts(fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 1.0)');
    INSERT INTO fts(fts) VALUES ('rebuild');
    DELETE FROM migrations WHERE name = '012_notes';
"""


def test_an_index_made_before_gains_tags_links_and_fields_when_opened(vault, loom_home):
    db = loom_home / "index.db"
    with sqlite3.connect(db) as conn:  # the schema migrations 001-010 leave
        conn.executescript(BEFORE_012)
        assert conn.execute("SELECT rowid FROM fts WHERE fts MATCH 'cssclass'").fetchall()
    assert paths("#idea") == sorted(paths("#idea")) and len(paths("#idea")) == 2
    assert paths("cssclass") == [] and paths("weaver") == ["Projects/Loom.md"]
    assert json.loads(loom("links", "Home.md", "--json").stdout)["links"][0]["path"] == \
        "Projects/Loom.md"
    with Store.open(db) as store:
        store.check()
    rescan = json.loads(loom("scan", str(vault), "--json").stdout)
    assert (rescan["added"], rescan["updated"], rescan["failed"]) == (0, 0, 0)
    assert paths("dashboard") == ["Home.md"]


def test_passages_embedded_start_after_front_matter(tmp_path, loom_home):
    from array import array

    from .embed_server import FakeEmbeddings

    folder = tmp_path / "vault"
    shutil.copytree(FIXTURES / "vault", folder)
    with FakeEmbeddings() as server:
        write(loom_home / "config.toml", '[embeddings]\nenabled = true\nprovider = "ollama"\n'
                                         f'endpoint = "{server.url}"\n')
        assert loom("scan", str(folder)).returncode == 0
        sent = [t for r in server.requests for t in r["body"]["input"]]
    assert not any("cssclass" in t or "tags = [" in t for t in sent)
    home = (folder / "Home.md").read_bytes()
    with sqlite3.connect(loom_home / "index.db") as conn:
        (spans,) = conn.execute("SELECT v.spans FROM vectors v JOIN files f ON f.id = "
                                "v.file_id WHERE f.relpath = 'Home.md'").fetchone()
    starts = array("i")
    starts.frombytes(spans)
    assert starts[0] == home.index(b"# Home") and starts[-1] == len(home)
