"""The web page's ask, in a real browser (Debian's Chromium driven by Playwright, as in
test_web.py): a source opens its document at the passage that was sent — in a 130 KB note
and in a 300-page PDF set by a real producer — marked and on screen, and the question's
function words are never highlighted; search hits open where their snippet is without a
request per hit."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from . import test_web
from .conftest import FIXTURES, write
from .llm_server import FakeLLM
from .test_web import config, expect, scan

browser, serve = test_web.browser, test_web.serve  # the browser and server fixtures

ANSWER = ("The warp beam brake of the Hattersley loom is released by lifting the weighted "
          "lever two notches, never by kicking the ratchet.")
QUESTION = "How is the brake of the Hattersley loom released, and what is the lever for?"


def big_note(notes: Path) -> Path:
    """A 130 KB note whose answer sits at about 100 KB."""
    lines = [f"Entry {i}: the loom was oiled, the shuttle checked and the floor swept for the "
             "day." for i in range(1600)]
    lines[1230] = ANSWER
    note = write(notes / "log" / "looms.md", "# Loom log\n" + "\n".join(lines) + "\n")
    assert 125_000 < note.stat().st_size < 140_000
    return note


def corpus(notes: Path, loom_home: Path, url: str) -> None:
    big_note(notes)
    shutil.copy(FIXTURES / "long" / "manual-300.pdf", notes / "manual-300.pdf")
    scan(notes)
    config(loom_home, f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{url}"\n')


def asked(tab) -> None:
    page = tab.goto("/ask")
    page.fill("#question", QUESTION)
    page.get_by_role("button", name="Ask").click()
    expect(page.locator("#ask-state")).to_have_text(re.compile("^Done"))
    return page


def opens_at_the_passage(page, text: str) -> None:
    # Not the top of the document: the reader opens 4 KB before the passage, then loads the
    # text before it (keeping the place), so wait for it to stand far from the top.
    page.wait_for_function("() => document.querySelector('#doc').scrollTop > 1000")
    current = page.locator("#doc-text mark.current").first
    expect(current).to_be_in_viewport()
    expect(page.locator("#doc-text mark.current", has_text=text).first).to_be_attached()
    # The question's words are not marked: no "the", "is", "of" all over the text.
    expect(page.locator("#doc-text mark:not(.current)")).to_have_count(0)
    expect(page.locator("#match-pos")).to_have_text("")


def test_an_ask_source_opens_at_its_passage_in_a_long_note_and_a_300_page_pdf(
        serve, tmp_path, loom_home):
    with FakeLLM() as llm:
        llm.behaviour.answer = ["Lift the weighted lever two notches [log/looms.md] ",
                                "[manual-300.pdf]."]
        corpus(tmp_path / "notes", loom_home, llm.url)
        tab = serve()
        page = asked(tab)
        sent = json.dumps(llm.chats()[-1]["body"])
        assert sent.count("Hattersley") >= 2  # both passages went to the model
        note = page.locator("#sources a", has_text="Loom log")
        expect(note).to_have_attribute("href", re.compile(r"offset=\d+&length=\d+"))
        note.click()
        expect(page.locator("#file-title")).to_have_text("Loom log")
        opens_at_the_passage(page, "Hattersley")
        page.go_back()
        expect(page.locator("#ask-state")).to_have_text(re.compile("^Done"))
        page.locator("#sources a", has_text="Workshop Manual of Looms").click()
        expect(page.locator("#file-title")).to_have_text("Workshop Manual of Looms")
        expect(page.locator("#file-page")).to_have_text(re.compile(r"^page 2\d\d of 300$"))
        opens_at_the_passage(page, "Hattersley")
        # The citation in the answer opens the same passage.
        page.go_back()
        page.locator("#answer a", has_text="log/looms.md").click()
        opens_at_the_passage(page, "Hattersley")
        tab.close()


def test_a_document_opened_from_a_query_never_marks_its_function_words(serve, tmp_path,
                                                                        loom_home):
    notes = tmp_path / "notes"
    big_note(notes)
    scan(notes)
    tab = serve()
    page = tab.goto("/file?path=log/looms.md&q=" + "what is the brake of the Hattersley for")
    expect(page.locator("#match-pos")).to_have_text("match 1 of 1")
    expect(page.locator("#doc-text mark.current")).to_have_text(re.compile(r"^\s*brake\s*$"))
    marked = page.locator("#doc-text mark").all_inner_texts()
    assert {m.strip().lower() for m in marked} == {"hattersley", "brake"}, marked
    # Italian function words too: "qual è il freno della" marks only "freno".
    page = tab.goto("/search?q=" + "qual è il freno della Hattersley")
    expect(page.locator("#hits li")).to_have_count(1)
    marks = page.locator("#hits .snippet mark").all_inner_texts()
    assert {m.strip().lower() for m in marks} == {"hattersley"}, marks
    tab.close()


def test_search_hits_open_where_their_snippet_is_without_a_grep_per_hit(serve, tmp_path,
                                                                         loom_home):
    notes = tmp_path / "notes"
    shutil.copy(FIXTURES / "long" / "manual-300.pdf", notes.mkdir() or notes / "m.pdf")
    scan(notes)
    tab = serve()
    page = tab.goto("/search?q=Hattersley")
    hit = page.locator("#hits li", has_text="m.pdf")
    expect(hit.locator(".page")).to_have_text("page 250")
    assert tab.posts("/grep") == []
    hit.locator("a.title").click()
    expect(page.locator("#doc-text mark.current")).to_have_text("Hattersley")
    expect(page.locator("#doc-text mark.current")).to_be_in_viewport()
    expect(page.locator("#file-page")).to_have_text("page 250 of 300")
    tab.close()
