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
from loomcli.extract import ACCESS_ERROR, IMAGES, Extracted, read_regular_file
from loomcli.extract.ocr import INSTALL_HINT, OcrSettings, recognise

MAX_MEMBER_BYTES = 64 << 20  # one XML part of a document, uncompressed
# Pages up to this size of markup always parse within the workers' memory cap (a tree
# costs up to ~23x its markup: 22 MB of dense table markup took 508 MB).
TREE_BYTES_SAFE = 8 << 20

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


# Never text: scripts, styles, templates and the head (its <title> is read apart).
_HIDDEN = frozenset({"script", "style", "template", "noscript", "head"})
# A page's navigation and chrome, left out where no element marks the main content:
# elements, ARIA roles and class names (Sphinx's sidebar and `.related` bars; common
# themes' headers and footers).
_CHROME_TAGS = frozenset({"nav", "header", "footer", "aside"})
_CHROME_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_CHROME_CLASSES = frozenset({"related", "sphinxsidebar", "sidebar", "footer", "header",
                             "navigation", "nav", "navbar", "breadcrumbs", "headerlink"})
# Where the main content is, most specific first: HTML's <main>, its ARIA role, one
# <article>, Sphinx's body and document blocks.
_MAIN = ("//main", "//*[@role='main']", "//article",
         "//*[contains(concat(' ', normalize-space(@class), ' '), ' body ')]",
         "//*[contains(concat(' ', normalize-space(@class), ' '), ' document ')]")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
# A doctype with an internal subset (`<!DOCTYPE html [ <!ENTITY ...> ]>`): libxml2's HTML
# parser would leave its `]>` as text.
_DOCTYPE_SUBSET = re.compile(r"^\s*<!DOCTYPE[^\[>]*\[[^\]]*\]\s*>", re.IGNORECASE)


def _classes(element: object) -> set[str]:
    get = getattr(element, "get", None)
    return set((get("class") or "").split()) if get else set()


def _is_chrome(element: object) -> bool:
    tag = getattr(element, "tag", None)
    if not isinstance(tag, str):
        return False
    get = element.get  # type: ignore[attr-defined]
    return (tag in _CHROME_TAGS or (get("role") or "") in _CHROME_ROLES
            or bool(_classes(element) & _CHROME_CLASSES))


def _is_inner_chrome(element: object) -> bool:
    """Inside the main content, only navigation bars and heading anchors are chrome (an
    article's own <header> holds its title)."""
    return getattr(element, "tag", None) == "nav" or bool(
        _classes(element) & {"related", "sphinxsidebar", "headerlink"})


def _walk(top: object, skip: Callable[[object], bool]) -> str:
    """The text under `top`, one line per block, in one walk of the tree (no copies of
    its parts): the subtrees `skip` names are left out."""
    from lxml import etree

    out: list[str] = []
    walker = etree.iterwalk(top, events=("start", "end"))
    for event, element in walker:
        tag = element.tag
        if not isinstance(tag, str):  # a comment or processing instruction
            if event == "end" and element.tail:
                out.append(element.tail)
            continue
        if event == "start":
            if element is not top and (tag in _HIDDEN or skip(element)):
                walker.skip_subtree()  # its end still comes, with its tail
                continue
            if tag in _BLOCK:
                out.append("\n")
            if element.text:
                out.append(element.text)
        else:
            if tag in _BLOCK:
                out.append("\n")
            if element.tail and element is not top:
                out.append(element.tail)
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(out).split("\n"))
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def html_text(markup: str, kind: str = "HTML page") -> tuple[str, str]:
    """(main text, title) of an HTML page: one line per block, spaces collapsed.

    The main content where the page marks it (`<main>`, `role="main"`, one `<article>`,
    Sphinx's `.body` / `.document`); else the page without its navigation, headers,
    footers, sidebars and `.related` bars; else (nothing left) the whole page. Sphinx's
    heading anchors (`¶`) never. libxml2's limits are lifted (`huge_tree`: deep legacy
    markup, text nodes over 10 MB) since the worker's memory cap bounds the parse; a
    parse that still stops early fails the file instead of indexing part of it.

    lxml (libxml2's HTML parser) reads python3.11-doc 7x faster than the standard
    library's html.parser, with the same words (tests/bench/bench_html.py)."""
    import lxml.html

    markup = _XML_DECLARATION.sub("", markup)  # XHTML: lxml refuses it on a str
    markup = _DOCTYPE_SUBSET.sub("<!DOCTYPE html>", markup, count=1)
    if not markup.strip():
        return "", ""
    if len(markup) > TREE_BYTES_SAFE:
        return _streamed_text(markup, kind)
    parser = lxml.html.HTMLParser(huge_tree=True)
    try:
        root = lxml.html.document_fromstring(markup, parser=parser)
    except (MemoryError, Exception) as exc:  # noqa: BLE001 - lxml's own errors
        # libxml2 reports a failed allocation as an "unknown error": a page whose tree
        # does not fit the worker's memory cap (measured: 22 MB of table markup needs
        # 508 MB). A small page that cannot be parsed has nothing readable.
        if isinstance(exc, MemoryError) or len(markup) > TREE_BYTES_SAFE:
            raise ExtractionError(f"the {kind} is too large to parse in the memory loom "
                                  f"gives one file ({len(markup) / 1e6:.0f} MB of markup)",
                                  "split it into smaller pages, or add it to .loomignore"
                                  ) from None
        return "", ""
    del markup
    fatal = [e for e in parser.error_log if e.level_name == "FATAL"]
    if fatal:
        raise ExtractionError(f"the {kind} could not be read to its end (line "
                              f"{fatal[0].line}: {fatal[0].message.strip()[:100]})",
                              "open it in a browser and save it again, or add it to "
                              ".loomignore")
    title = " ".join("".join(root.xpath("//title//text()")).split())
    for query in _MAIN:
        found = root.xpath(query)
        if query == "//article" and len(found) != 1:
            continue  # a list of articles: the page itself is the content
        if found:
            text = _walk(found[0], _is_inner_chrome)
            if text:
                return text + "\n", title
    text = _walk(root, _is_chrome) or _walk(root, _is_inner_chrome)
    return (text + "\n" if text else ""), title


class _Channel:
    """The text of one candidate for the page's content, gathered as the parser goes: a
    region (from the element that opens it to its end; or the whole page) minus the
    subtrees its `skip` flag names, as _walk would write it."""

    __slots__ = ("out", "done", "depth", "skipping", "inner")

    def __init__(self, inner: bool, whole: bool = False) -> None:
        self.inner = inner  # skip inner chrome only (else all chrome)
        self.out: list[str] = []  # pieces as they come, joined into `done` every so often:
        self.done: list[str] = []  # a million small strings would cost 60 bytes each
        self.depth = 0 if whole else -1  # -1: its element not met yet; -2: met and closed
        self.skipping = 0  # depth inside a skipped subtree

    def start(self, block: bool, skip: bool) -> None:
        self.depth += 1
        if self.skipping:
            self.skipping += 1
        elif skip:
            self.skipping = 1
        elif block:
            self.out.append("\n")

    def end(self, block: bool) -> None:
        self.depth -= 1
        if self.skipping:
            self.skipping -= 1
            if self.skipping:
                return
        if block:
            self.out.append("\n")  # a skipped block still ends a line, as in _walk

    def compact(self) -> None:
        self.done.append("".join(self.out))
        self.out.clear()

    def text(self) -> str:
        self.compact()
        lines = (_SPACES.sub(" ", line).strip() for line in "".join(self.done).split("\n"))
        return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


class _Gather:
    """lxml parser target: every candidate of html_text's choice at once, no tree. The
    regions, in html_text's order: <main>, role="main", <article>, .body, .document."""

    def __init__(self) -> None:
        self.regions = [_Channel(True) for _ in range(5)]
        self.page = [_Channel(False, whole=True), _Channel(True, whole=True)]
        self.active = list(self.page)  # the channels inside their region now
        self.articles = 0
        self.title: list[str] = []
        self.in_title = 0

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if not isinstance(tag, str):
            return
        classes = set((attrib.get("class") or "").split()) if attrib else set()
        role = attrib.get("role") if attrib else None
        chrome = (tag in _CHROME_TAGS or (role or "") in _CHROME_ROLES
                  or bool(classes & _CHROME_CLASSES))
        inner = tag == "nav" or bool(classes & {"related", "sphinxsidebar", "headerlink"})
        hidden = tag in _HIDDEN
        block = tag in _BLOCK
        if self.in_title or tag == "title":
            self.in_title += 1
        self.articles += tag == "article"
        for channel in self.active:
            channel.start(block, hidden or (inner if channel.inner else chrome))
        opens = (tag == "main", role == "main", tag == "article", "body" in classes,
                 "document" in classes)
        if any(opens):
            for channel, met in zip(self.regions, opens, strict=True):
                if met and channel.depth == -1:  # its first one: the region's own element
                    channel.depth = 0
                    if block:
                        channel.out.append("\n")
                    self.active.append(channel)

    def end(self, tag: str) -> None:
        if not isinstance(tag, str):
            return
        if self.in_title:
            self.in_title -= 1
        block = tag in _BLOCK
        for channel in self.active:
            channel.end(block)
        if len(self.active) > 2:
            for channel in self.active[2:]:
                if channel.depth < 0:
                    channel.depth = -2
            self.active = [c for c in self.active if c.depth != -2]

    def data(self, text: str) -> None:
        if self.in_title:
            self.title.append(text)
        for channel in self.active:
            if not channel.skipping:
                channel.out.append(text)
                if len(channel.out) > 4096:
                    channel.compact()

    def comment(self, text: str) -> None:
        pass

    def close(self) -> tuple[str, str]:
        title = " ".join("".join(self.title).split())
        for n, channel in enumerate(self.regions):
            if n == 2 and self.articles != 1:
                continue  # a list of articles: the page itself is the content
            text = channel.text()
            if text:
                return text + "\n", title
        text = self.page[0].text() or self.page[1].text()
        return (text + "\n" if text else ""), title


STREAM_CHUNK = 1 << 20  # characters of markup handed to the parser at a time


def _streamed_text(markup: str, kind: str) -> tuple[str, str]:
    """html_text for a page too large for a tree (20 MB of spans needed over 512 MB): the
    parser hands its events to _Gather, which keeps only text."""
    from lxml import etree

    parser = etree.HTMLParser(target=_Gather(), huge_tree=True)
    try:
        for at in range(0, len(markup), STREAM_CHUNK):
            parser.feed(markup[at:at + STREAM_CHUNK])
        text, title = parser.close()
    except etree.LxmlError as exc:
        raise ExtractionError(f"the {kind} could not be read to its end ({exc})"[:200],
                              "open it in a browser and save it again, or add it to "
                              ".loomignore") from None
    return text, title


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


MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def _lines(root: ElementTree.Element, paras: frozenset[str], skip: frozenset[str],
           own: Callable[[ElementTree.Element], str], tails: bool) -> list[str]:
    """One line per paragraph, in one walk of the tree: a paragraph inside another (a
    Word text box, an ODT frame) is a line of its own, never part of the outer one too
    (which made text repeat, and grow quadratically with nesting). `skip` subtrees are
    left out (Word's fallback copy of a text box); `own(node)` is the text a node adds
    to its paragraph; `tails`: text after a node belongs to the paragraph around it."""
    lines: list[list[str]] = []
    current: list[int] = []  # the paragraphs the walk is inside, innermost last
    stack: list[tuple[ElementTree.Element, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            if node.tag in paras:
                current.pop()
            if tails and node.tail and current:
                lines[current[-1]].append(node.tail)
            continue
        if node.tag in skip:
            if tails and node.tail and current:
                lines[current[-1]].append(node.tail)
            continue
        if node.tag in paras:
            lines.append([])
            current.append(len(lines) - 1)
        if current:
            piece = own(node)
            if piece:
                lines[current[-1]].append(piece)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node))
    return ["".join(parts) for parts in lines]


def _docx_piece(node: ElementTree.Element) -> str:
    if node.tag == f"{W}t":
        return node.text or ""
    if node.tag == f"{W}tab":
        return "\t"
    if node.tag in (f"{W}br", f"{W}cr"):
        return "\n"
    return ""


def _docx(z: _Zip, path: str) -> Extracted:
    lines = _lines(z.xml("word/document.xml"), frozenset({f"{W}p"}),
                   frozenset({MC_FALLBACK}), _docx_piece, tails=False)
    text = "\n".join(lines).strip()
    return _finish(text + "\n", z.title("docProps/core.xml"), path, "DOCX")


def _odt_piece(node: ElementTree.Element) -> str:
    if node.tag == f"{TEXT}s":
        return " " * int(node.get(f"{TEXT}c", "1") or 1)
    if node.tag == f"{TEXT}tab":
        return "\t"
    if node.tag == f"{TEXT}line-break":
        return "\n"
    return node.text or ""


def _odt(z: _Zip, path: str) -> Extracted:
    lines = _lines(z.xml("content.xml"), frozenset({f"{TEXT}p", f"{TEXT}h"}), frozenset(),
                   _odt_piece, tails=True)
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
    for part in dict.fromkeys(order):  # a slide listed twice is one slide
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
    names = []
    for ref in (el for el in opf.iter() if el.tag.endswith("}itemref")):
        href = manifest.get(ref.get("idref"))
        if href:
            names.append(posixpath.normpath(posixpath.join(base, href.split("#")[0])))
    present = set(z.names())
    chapters = []
    for name in dict.fromkeys(names):  # a chapter the spine repeats is read once
        if name in present:  # a missing chapter is left out, not the whole book
            chapters.append(html_text(_decode_html(z.read(name)), "EPUB chapter")[0])
    title_el = next((el for el in opf.iter() if el.tag == DC_TITLE), None)
    title = "".join(title_el.itertext()) if title_el is not None else None
    text, offsets = _join_pages(chapters)
    return _finish(text, title, path, "EPUB", offsets)


_ZIP_FORMATS = {"docx": _docx, "odt": _odt, "pptx": _pptx, "epub": _epub}


def _read(path: str) -> bytes:
    try:
        return read_regular_file(path)
    except OSError as exc:
        raise ExtractionError(f"{ACCESS_ERROR}: {exc.strerror or exc}",
                              "check its permissions") from None


def extract_document(path: str) -> Extracted:
    """Text of an HTML page, DOCX, ODT, PPTX or EPUB file (by its extension)."""
    kind = path.rpartition(".")[2].lower()
    data = _read(path)
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
            raise ExtractionError("an image needs OCR to be indexed", INSTALL_HINT, ocr=True)
        text = recognise(_read(path), languages=ocr.languages, image_file=True)
        if not text.strip():  # what OCR found depends on its languages
            raise NoTextError("image holds no text OCR could read",
                              "check [ocr] languages, or that the image is legible", ocr=True)
        return _finish(text, PurePosixPath(path).stem, path, "image")
    return extract_document(path)
