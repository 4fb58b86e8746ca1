"""Web pages, office documents and e-books as text.

`.html/.htm`: the visible text (no scripts, styles or templates) and the `<title>`, by lxml.
`.docx`, `.odt`: paragraphs in order, the document's title. `.pptx`: slides in
presentation order, each slide a page. `.epub`: chapters in reading order (the spine),
each chapter a page. Every format is a ZIP of XML (or HTML), read here with zipfile and
ElementTree (EPUB chapters through the HTML reader); a member larger than MAX_MEMBER_BYTES
(a ZIP bomb) or a damaged archive fails the file with a reason, like a damaged PDF.
Runs in the extraction workers (pool.py) with their time and memory limits.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Callable
from pathlib import PurePosixPath
from xml.etree import ElementTree

from loomcli.errors import ExtractionError, NoTextError
from loomcli.extract import IMAGES, Extracted, read_regular_file
from loomcli.extract.ocr import INSTALL_HINT, OcrSettings, recognise

MAX_MEMBER_BYTES = 64 << 20  # one XML part of a document, uncompressed

_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
          "article", "header", "footer", "pre", "table", "ul", "ol", "dt", "dd", "dl",
          "blockquote", "hr", "main", "nav", "aside", "figure", "figcaption", "td", "th",
          "title", "body"}
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n\s*\n\s*")

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"


_DROP = "//script|//style|//template|//noscript|//head"
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


def html_text(markup: str) -> tuple[str, str]:
    """(visible text, title) of an HTML page: one line per block, spaces collapsed.

    lxml (libxml2's HTML parser) reads python3.11-doc 7x faster than the standard
    library's html.parser, with the same words (tests/bench/bench_html.py)."""
    import lxml.html

    markup = _XML_DECLARATION.sub("", markup)  # XHTML: lxml refuses it on a str
    if not markup.strip():
        return "", ""
    try:
        root = lxml.html.document_fromstring(markup)
    except Exception:  # noqa: BLE001 - lxml's own errors: nothing readable
        return "", ""
    title = " ".join("".join(root.xpath("//title//text()")).split())
    for element in root.xpath(_DROP):
        element.drop_tree()
    for element in root.iter(*_BLOCK):
        element.text = "\n" + (element.text or "")
        element.tail = "\n" + (element.tail or "")
    lines = (_SPACES.sub(" ", line).strip() for line in root.text_content().split("\n"))
    text = _BLANKS.sub("\n\n", "\n".join(lines)).strip()
    return (text + "\n" if text else ""), title


def _decode_html(data: bytes) -> str:
    from loomcli.extract.text import decode

    return decode(data)


def _join_pages(pages: list[str]) -> tuple[str, list[int]]:
    offsets, parts, pos = [], [], 0
    for page in pages:
        page = page if page.endswith("\n") or not page else page + "\n"
        offsets.append(pos)
        parts.append(page)
        pos += len(page.encode("utf-8"))
    return "".join(parts), offsets


def _first_line(text: str, path: str) -> str:
    for line in text.splitlines():
        if len(line.strip()) >= 3:
            return line.strip()[:120]
    return PurePosixPath(path).stem


def _finish(text: str, title: str | None, path: str, kind: str,
            pages: list[int] | None = None) -> Extracted:
    if not text.strip():
        raise NoTextError(f"{kind} holds no text", "nothing to index in it")
    return Extracted(text=text, title=(title or "").strip() or _first_line(text, path),
                     pages=pages, engine=kind.lower())


# -- ZIP-based formats ----------------------------------------------------------------------

class _Zip:
    def __init__(self, data: bytes, kind: str) -> None:
        import io

        self.kind = kind
        self.zip = zipfile.ZipFile(io.BytesIO(data))

    def read(self, name: str) -> bytes:
        info = self.zip.getinfo(name)
        if info.file_size > MAX_MEMBER_BYTES:
            raise ExtractionError(f"{self.kind} part {name} inflates to over "
                                  f"{MAX_MEMBER_BYTES >> 20} MB (a ZIP bomb?)",
                                  "add it to .loomignore")
        with self.zip.open(info) as fh:
            data = fh.read(MAX_MEMBER_BYTES + 1)
        if len(data) > MAX_MEMBER_BYTES:  # the header lied about the size
            raise ExtractionError(f"{self.kind} part {name} inflates to over "
                                  f"{MAX_MEMBER_BYTES >> 20} MB (a ZIP bomb?)",
                                  "add it to .loomignore")
        return data

    def xml(self, name: str) -> ElementTree.Element:
        return ElementTree.fromstring(self.read(name))

    def names(self) -> list[str]:
        return self.zip.namelist()

    def title(self, name: str) -> str | None:
        if name not in self.names():
            return None
        found = self.xml(name).find(f".//{DC_TITLE}")
        return "".join(found.itertext()) if found is not None else None


def _docx(z: _Zip, path: str) -> Extracted:
    body = z.xml("word/document.xml")
    lines = []
    for para in body.iter(f"{W}p"):
        bits = []
        for node in para.iter():
            if node.tag == f"{W}t" and node.text:
                bits.append(node.text)
            elif node.tag == f"{W}tab":
                bits.append("\t")
            elif node.tag in (f"{W}br", f"{W}cr"):
                bits.append("\n")
        lines.append("".join(bits))
    text = "\n".join(lines).strip()
    return _finish(text + "\n", z.title("docProps/core.xml"), path, "DOCX")


def _odt(z: _Zip, path: str) -> Extracted:
    body = z.xml("content.xml")
    lines = ["".join(el.itertext()) for el in body.iter()
             if el.tag in (f"{TEXT}p", f"{TEXT}h")]
    text = "\n".join(lines).strip()
    return _finish(text + "\n", z.title("meta.xml"), path, "ODT")


def _rels(z: _Zip, part: str) -> dict[str, str]:
    """A part's relationships: id -> target path inside the archive."""
    folder, name = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", name + ".rels")
    if rels not in z.names():
        return {}
    return {el.get("Id", ""): posixpath.normpath(posixpath.join(folder, el.get("Target", "")))
            for el in z.xml(rels)}


def _pptx(z: _Zip, path: str) -> Extracted:
    pres = z.xml("ppt/presentation.xml")
    targets = _rels(z, "ppt/presentation.xml")
    order = [targets[el.get(
        "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id", "")]
        for el in pres.iter("{http://schemas.openxmlformats.org/presentationml/2006/main}sldId")]
    slides = []
    for part in order:
        root = z.xml(part)
        paras = ["".join(t.text or "" for t in p.iter(f"{A}t")) for p in root.iter(f"{A}p")]
        slides.append("\n".join(line for line in paras if line.strip()))
    text, offsets = _join_pages(slides)
    return _finish(text, z.title("docProps/core.xml"), path, "PPTX", offsets)


def _epub(z: _Zip, path: str) -> Extracted:
    container = z.xml("META-INF/container.xml")
    rootfile = next(el.get("full-path", "") for el in container.iter()
                    if el.tag.endswith("rootfile"))
    opf = z.xml(rootfile)
    base = posixpath.dirname(rootfile)
    manifest = {el.get("id"): el.get("href", "") for el in opf.iter()
                if el.tag.endswith("}item")}
    chapters = []
    for ref in (el for el in opf.iter() if el.tag.endswith("}itemref")):
        href = manifest.get(ref.get("idref"))
        if not href:
            continue
        name = posixpath.normpath(posixpath.join(base, href.split("#")[0]))
        chapters.append(html_text(_decode_html(z.read(name)))[0])
    title_el = next((el for el in opf.iter() if el.tag == DC_TITLE), None)
    title = "".join(title_el.itertext()) if title_el is not None else None
    text, offsets = _join_pages(chapters)
    return _finish(text, title, path, "EPUB", offsets)


_ZIP_FORMATS = {"docx": _docx, "odt": _odt, "pptx": _pptx, "epub": _epub}


def extract_document(path: str) -> Extracted:
    """Text of an HTML page, DOCX, ODT, PPTX or EPUB file (by its extension)."""
    kind = path.rpartition(".")[2].lower()
    try:
        data = read_regular_file(path)
    except OSError as exc:
        from loomcli.extract import ACCESS_ERROR

        raise ExtractionError(f"{ACCESS_ERROR}: {exc.strerror or exc}",
                              "check its permissions") from None
    if kind in ("html", "htm"):
        text, title = html_text(_decode_html(data))
        return _finish(text, title, path, "HTML")
    try:
        return _ZIP_FORMATS[kind](_Zip(data, kind.upper()), path)
    except ExtractionError:
        raise
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, StopIteration, ValueError,
            EOFError, NotImplementedError) as exc:
        raise ExtractionError(f"damaged or unsupported {kind.upper()} "
                              f"({type(exc).__name__}: {str(exc)[:120]})",
                              "open it in its program and save a repaired copy") from None


def extract_file(path: str, ocr: OcrSettings | None = None,
                 on_ocr_page: Callable[[], None] | None = None) -> Extracted:
    """What the extraction workers run: a PDF, an image or another document.
    `on_ocr_page` is called after each page OCR recognised (the pool's heartbeat)."""
    kind = path.rpartition(".")[2].lower()
    if kind == "pdf":
        from loomcli.extract.pdf import extract_pdf

        return extract_pdf(path, ocr, on_ocr_page)
    if kind in IMAGES:
        if ocr is None or not ocr.enabled:
            raise ExtractionError("an image needs OCR to be indexed", INSTALL_HINT)
        text = recognise(read_regular_file(path), languages=ocr.languages)
        return _finish(text if text.strip() else "", PurePosixPath(path).stem, path, "image")
    return extract_document(path)
