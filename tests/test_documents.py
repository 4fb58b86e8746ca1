"""Web pages, office documents and e-books, made by a real producer (pandoc), scanned."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from loomcli.errors import ExtractionError
from loomcli.extract.documents import MAX_MEMBER_BYTES, extract_document, html_text

from .conftest import FIXTURES, write

LOOM = [sys.executable, "-m", "loomcli"]
pytestmark = pytest.mark.plain  # also run on a plain install (.ci/run)
KINDS = ["html", "docx", "odt", "epub", "pptx"]


def loom(*args: str, check: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, env=os.environ,
                          timeout=120)
    assert proc.returncode == check, proc.stderr
    return proc


def test_every_kind_is_found_by_search_and_grep_with_its_title_and_page(tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(FIXTURES / "documents", folder)
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert (report["added"], report["failed"]) == (6, 0)
    files = {f["path"]: f for f in json.loads(loom("files", "--json").stdout)["files"]}
    for kind in KINDS:
        assert files[f"handbook.{kind}"]["kind"] == kind
        assert files[f"handbook.{kind}"]["title"] == "Dye House Handbook"
    hits = json.loads(loom("search", "madder", "mordant", "--json").stdout)["hits"]
    assert {h["path"] for h in hits} >= {f"handbook.{k}" for k in KINDS}
    matches = json.loads(loom("grep", "FT-2026-0420", "--json").stdout)["matches"]
    pages = {m["path"]: m["page"] for m in matches if m["path"].startswith("handbook")}
    # Slides and e-book chapters are pages: the invoice is on the third (after the title).
    assert pages == {"handbook.html": None, "handbook.docx": None, "handbook.odt": None,
                     "handbook.epub": 3, "handbook.pptx": 3}
    for m in matches:  # every offset reads back the match
        got = json.loads(loom("get", m["path"], "--offset", str(m["offset"]), "--length",
                              "12", "--json").stdout)
        assert got["content"] == "FT-2026-0420"


def test_a_damaged_copy_of_each_fails_with_a_reason_and_the_scan_goes_on(tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(FIXTURES / "documents-bad", folder)
    report = json.loads(loom("scan", str(folder), "--json", check=1).stdout)
    assert report["added"] == 1 and report["failed"] == 4
    reasons = {e["path"]: e["error"] for e in report["errors"]}
    for kind in ["docx", "odt", "epub", "pptx"]:
        assert reasons[f"truncated-handbook.{kind}"].startswith(
            f"damaged or unsupported {kind.upper()}")
    # Cut before its body, the page is valid HTML holding no text: skipped, not failed.
    assert report["skips"] == [{"path": "truncated-handbook.html",
                                "reason": "HTML holds no text — nothing to index in it"}]


def test_html_keeps_the_visible_text_only():
    text, title = html_text(
        "<html><head><title>The  Title</title><style>p{color:red}</style>"
        "<script>var secret = 1;</script></head><body><h1>Head</h1><p>One &amp; two"
        "</p><template>hidden</template><ul><li>a</li><li>b</li></ul></body></html>")
    assert title == "The Title"
    assert text == "Head\n\nOne & two\n\na\n\nb\n"


def test_a_zip_bomb_member_fails_with_a_reason(tmp_path):
    import zipfile

    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"<a>" + b" " * (MAX_MEMBER_BYTES + 10) + b"</a>")
    with pytest.raises(ExtractionError, match="ZIP bomb"):
        extract_document(str(bomb))


def test_an_unknown_html_encoding_is_still_read(tmp_path):
    page = write(tmp_path / "p.html", "<title>Crêpes</title><p>Farine, œufs — à déguster."
                 .encode("cp1252"))
    doc = extract_document(str(page))
    assert doc.title == "Crêpes" and "œufs" in doc.text


# -- web pages: their main content -----------------------------------------------------------

WEB = FIXTURES / "web"
CHROME = "<nav><a href='/'>Home</a> | <a href='/docs'>Docs</a></nav>"


def test_python_docs_pages_are_indexed_without_their_sidebar_and_anchors():
    for name, first, kept in [
            ("keyword.html", "keyword — Testing for Python keywords\n\nSource code: "
             "Lib/keyword.py\n", "Return True if s is a Python soft keyword."),
            ("getpass.html", "getpass — Portable password input\n\nSource code: "
             "Lib/getpass.py\n", "Return the “login name” of the user.")]:
        doc = extract_document(str(WEB / name))
        assert doc.text.startswith(first), doc.text[:300]
        assert kept in doc.text
        for chrome in ("Previous topic", "Next topic", "Navigation", "This Page",
                       "Report a Bug", "Show Source", "¶", "index\nmodules"):
            assert chrome not in doc.text, chrome
        assert doc.title.startswith(name.split(".")[0])


@pytest.mark.parametrize("page,text", [
    (f"<body>{CHROME}<main><h1>Dyes</h1><p>Madder gives red.</p></main>"
     "<footer>© 2026</footer></body>", "Dyes\n\nMadder gives red.\n"),
    (f"<body>{CHROME}<div role='main'><p>Weld gives yellow.</p></div>"
     "<div class='sidebar'>Related posts</div></body>", "Weld gives yellow.\n"),
    (f"<body>{CHROME}<article><header><h1>Woad</h1></header><p>Blue.</p></article>"
     "<aside>Ads</aside></body>", "Woad\n\nBlue.\n"),
    # No element marks the main content: the page without its chrome.
    (f"<body><header>Site name</header>{CHROME}<h1>Indigo</h1><p>Vat dyeing.</p>"
     "<div class='related'>Next: Woad</div><footer>Contact</footer></body>",
     "Indigo\n\nVat dyeing.\n"),
    # Neither: nothing is lost.
    ("<body><h1>Cochineal</h1><p>Insects give carmine.</p><ul><li>alum</li></ul></body>",
     "Cochineal\n\nInsects give carmine.\n\nalum\n"),
    # A list of articles is the page itself; an empty <main> is not the content.
    ("<body><article><p>One</p></article><article><p>Two</p></article></body>",
     "One\n\nTwo\n"),
    ("<body><main></main><p>Only here.</p></body>", "Only here.\n"),
    ("<!DOCTYPE html [ <!ENTITY shade \"dark\"> ]><body><p>Lichen dyes</p></body>",
     "Lichen dyes\n"),
])
def test_a_page_is_indexed_by_its_main_content(page, text):
    assert html_text(page)[0] == text


def test_deep_legacy_markup_is_read_whole_or_fails_loudly():
    page = "<html><body>" + "".join(f"<p><font>para {i} " for i in range(400)) + "</body>"
    assert html_text(page)[0].count("para") == 400  # libxml2 alone stops at 127
    deeper = "<html><body>" + "".join(f"<p><font>para {i} " for i in range(3000))
    with pytest.raises(ExtractionError, match="HTML page could not be read to its end"):
        html_text(deeper)


def test_big_pages_are_indexed_inside_the_worker_limits(tmp_path):
    folder = tmp_path / "web"
    write(folder / "log.html", "<html><body><pre>" + "disk quota exceeded\n" * 700_000
          + "</pre></body></html>")  # one 14 MB text node
    write(folder / "table.html", "<html><body><table>" + "<tr><td>cell</td><td>x</td></tr>"
          * 300_000 + "</table></body></html>")  # 10 MB of markup
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert (report["added"], report["failed"]) == (2, 0), report["errors"]
    # Past TREE_BYTES_SAFE a page is read as a stream, without a tree: test_hostile_serve
    # indexes 20 MB of spans that needed over 512 MB as a tree.
    sizes = {f["path"]: f["content_len"] for f in json.loads(loom("files", "--json").stdout)[
        "files"]}
    assert sizes["log.html"] == len("disk quota exceeded\n") * 700_000  # all of it


# -- documents walked once: no nested duplicates, each chapter and slide once -------------

DOCS = FIXTURES / "documents"


def rewrite(src, dest, part: str, change) -> str:
    """A copy of a real document (made by pandoc) with one XML part changed."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in zin.infolist():
            data = zin.read(info)
            out.writestr(info, change(data.decode()).encode() if info.filename == part
                         else data)
    return str(dest)


MC = ('xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
      'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" ')


def text_box(inner: str, fallback: bool = True) -> str:
    """A Word text box as Word writes it: the box, then a fallback copy for old readers."""
    box = f"<w:txbxContent>{inner}</w:txbxContent>"
    copy = f"<mc:Fallback><w:pict>{box}</w:pict></mc:Fallback>" if fallback else ""
    return (f"<w:p><w:r><w:t>Outer words</w:t></w:r><w:r><mc:AlternateContent><mc:Choice "
            f"Requires=\"wps\"><wps:txbx>{box}</wps:txbx></mc:Choice>{copy}"
            "</mc:AlternateContent></w:r></w:p>")


def test_word_text_boxes_are_read_once_and_nesting_costs_linear_time(tmp_path):
    def add(xml: str, body: str) -> str:
        return xml.replace("<w:document ", "<w:document " + MC, 1).replace(
            "<w:body>", "<w:body>" + body, 1)

    boxed = rewrite(DOCS / "handbook.docx", tmp_path / "box.docx", "word/document.xml",
                    lambda x: add(x, text_box("<w:p><w:r><w:t>Boxed note</w:t></w:r></w:p>")))
    text = extract_document(boxed).text
    assert text.startswith("Outer words\nBoxed note\n") and text.count("Boxed note") == 1
    inner = "<w:p><w:r><w:t>deepest</w:t></w:r></w:p>"
    for i in range(300):  # boxes in boxes: 300 levels
        inner = text_box(inner, fallback=False).replace("Outer words", f"level {i}")
    nested = rewrite(DOCS / "handbook.docx", tmp_path / "nested.docx", "word/document.xml",
                     lambda x: add(x, inner))
    text = extract_document(nested).text
    assert text.count("deepest") == 1 and text.count("level 7\n") == 1
    assert len(text) < 10_000 + len(extract_document(str(DOCS / "handbook.docx")).text)


def test_an_odt_frame_is_its_own_paragraph(tmp_path):
    frame = ('<text:p>Caption before<draw:frame><draw:text-box><text:p>Framed words</text:p>'
             '</draw:text-box></draw:frame> and after</text:p>')
    odt = rewrite(DOCS / "handbook.odt", tmp_path / "f.odt", "content.xml",
                  lambda x: x.replace("<office:text>", "<office:text>" + frame, 1))
    text = extract_document(odt).text
    assert text.startswith("Caption before and after\nFramed words\n"), text[:80]
    assert text.count("Framed words") == 1


def test_an_epub_spine_repeating_a_chapter_or_missing_one(tmp_path):
    def spine(xml: str) -> str:
        return xml.replace('<itemref idref="ch003_xhtml" />',
                           '<itemref idref="ch003_xhtml" />' * 200
                           + '<itemref idref="gone" />').replace(
            "</manifest>", '<item id="gone" href="text/gone.xhtml" '
            'media-type="application/xhtml+xml" /></manifest>')

    book = rewrite(DOCS / "handbook.epub", tmp_path / "b.epub", "EPUB/content.opf", spine)
    doc, original = extract_document(book), extract_document(str(DOCS / "handbook.epub"))
    assert (doc.text, doc.pages) == (original.text, original.pages)


def test_a_pptx_listing_a_slide_twice_reads_it_once(tmp_path):
    def twice(xml: str) -> str:
        start = xml.index("<p:sldId ")
        end = xml.index("/>", start) + 2
        return xml[:end] + xml[start:end] + xml[end:]

    deck = rewrite(DOCS / "handbook.pptx", tmp_path / "d.pptx", "ppt/presentation.xml", twice)
    doc, original = extract_document(deck), extract_document(str(DOCS / "handbook.pptx"))
    assert (doc.text, doc.pages) == (original.text, original.pages)
