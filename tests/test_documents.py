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
    assert report["added"] == 1 and report["failed"] == 5
    reasons = {e["path"]: e["error"] for e in report["errors"]}
    for kind in ["docx", "odt", "epub", "pptx"]:
        assert reasons[f"truncated-handbook.{kind}"].startswith(
            f"damaged or unsupported {kind.upper()}")
    assert "no text" in reasons["truncated-handbook.html"]


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
