"""PDF text, page by page: PDFium (pypdfium2, the `fast` extra) when installed, else pypdf.

Runs inside a worker process (see pool.py), so a pathological file can be killed.
`LOOM_PDF_ENGINE=pypdf` forces the pure-Python engine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from loomcli.errors import ExtractionError, NoTextError
from loomcli.extract import ACCESS_ERROR, Extracted, read_regular_file
from loomcli.extract.ocr import INSTALL_HINT, OCR_DPI, OcrSettings, pgm, recognise

# Control characters PDF producers leave in text (pdfium marks soft hyphens with \x02);
# tab, newline and form feed are kept.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\ufffe\uffff]")
def _no_text(ocr_on: bool) -> NoTextError:
    if ocr_on:
        return NoTextError("PDF has no text, and OCR found none on its pages",
                           "check [ocr] languages, or that the scan is legible", ocr=True)
    return NoTextError("PDF has no text layer (scanned or image-only pages)", INSTALL_HINT,
                       ocr=True)
_ENCRYPTED = ExtractionError(
    "PDF is encrypted (password-protected)",
    "save an unprotected copy to index it",
)
# Text kept from one PDF at most: past it the file fails with a reason rather than fill
# memory and the index (a 2,000-page manual holds about 6 MB).
MAX_TEXT_BYTES = 64 << 20
_JUNK_TITLES = {"", "untitled", "untitled document", "title", "document"}


def _check_size(chars: int) -> None:
    if chars > MAX_TEXT_BYTES:  # characters: at least as many bytes
        raise ExtractionError(f"PDF holds more than {MAX_TEXT_BYTES >> 20} MB of text",
                              "split it, or add it to .loomignore")


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def _join(pages: list[str]) -> tuple[str, list[int]]:
    """Join page texts, each ending in a newline; return text and page start bytes."""
    offsets = []
    parts = []
    pos = 0
    for page in pages:
        if page and not page.endswith("\n"):
            page += "\n"
        offsets.append(pos)
        parts.append(page)
        pos += len(page.encode("utf-8"))
    return "".join(parts), offsets


def _title(meta_title: str | None, text: str, path: str) -> str:
    title = _clean(meta_title or "").strip()
    if title.lower() not in _JUNK_TITLES and len(title) <= 300:
        return title
    for line in text.splitlines():
        line = line.strip()
        if len(line) >= 3:
            return line[:120]
    return PurePath(path).stem


def _finish(pages: list[str], meta_title: str | None, path: str, engine: str,
            ocr_on: bool = False, unread: bool = False) -> Extracted:
    pages = [_clean(p) for p in pages]
    text, offsets = _join(pages)
    if not text.strip():
        raise _no_text(ocr_on)
    return Extracted(text=text, title=_title(meta_title, text, path), pages=offsets,
                     engine=engine, ocr=unread)


def _pdfium_reason(msg: str) -> str:
    """'Failed to load document (PDFium: Data format error).' -> 'PDFium: Data format error'"""
    inner = re.search(r"\((PDFium: [^)]*)\)", msg)
    return inner.group(1) if inner else msg


def _with_pdfium(path: str, ocr: OcrSettings | None = None,
                 on_ocr_page: Callable[[], None] | None = None) -> Extracted:
    import pypdfium2 as pdfium

    data = _read(path)
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        msg = str(exc)
        if "password" in msg.lower():
            raise _ENCRYPTED from None
        raise ExtractionError(
            f"damaged or unsupported PDF ({_pdfium_reason(msg)})",
            "open it in a PDF viewer and save a repaired copy",
        ) from None
    ocr_on = bool(ocr and ocr.enabled)
    unread = False  # a scanned page left without its text, OCR being off
    try:
        pages: list[str] = []
        chars = 0
        read_text = _PageText()
        for i in range(len(pdf)):
            pages.append(read_text(pdf, i))
            if not pages[-1].strip() and (ocr_on or not unread):
                page = pdf[i]
                try:
                    if _has_image(page):
                        if ocr is None or not ocr_on:
                            unread = True
                        else:
                            pages[-1] = _ocr_page(page, ocr)  # a scanned page: its picture
                            if on_ocr_page:
                                on_ocr_page()
                finally:
                    page.close()
            chars += len(pages[-1])
            _check_size(chars)
        title = pdf.get_metadata_dict().get("Title")
    except pdfium.PdfiumError as exc:
        raise ExtractionError(f"damaged PDF ({exc})",
                              "open it in a PDF viewer and save a repaired copy") from None
    finally:
        pdf.close()
    return _finish(pages, title, path, "pdfium", ocr_on, unread)


class _PageText:
    """A page's text inside its box, as pypdfium2's `get_text_bounded()` gives it, read
    through PDFium's own calls: one `FPDFText_GetBoundedText` into a buffer kept from page
    to page, where pypdfium2 lays the text out twice (once for its length) and wraps every
    page and text page in objects with finalizers. Measured on the 20 texlive manuals, one
    process: 7.5-8.4 s of CPU against 8.5-10.9 s.

    Unlike pypdfium2's, the text is not cut short on a page holding characters outside
    the Basic Multilingual Plane (it sizes its buffer in code points, not UTF-16 units)."""

    def __init__(self) -> None:
        import ctypes

        import pypdfium2 as pdfium
        import pypdfium2.raw as pdfium_c

        self._ctypes, self._pdfium, self._c = ctypes, pdfium, pdfium_c
        self._box = pdfium_c.FS_RECTF()
        self._buffer = (ctypes.c_ushort * 0)()

    def __call__(self, pdf: Any, index: int) -> str:
        c, error = self._c, self._pdfium.PdfiumError
        page = c.FPDF_LoadPage(pdf.raw, index)
        if not page:
            raise error("Failed to load page.")
        try:
            textpage = c.FPDFText_LoadPage(page)
            if not textpage:
                raise error("Failed to load text page.")
            try:
                box = self._box
                if not c.FPDF_GetPageBoundingBox(page, box):
                    raise error("Failed to get page bounding box.")
                # Room for every character as a surrogate pair after a line break.
                room = 4 * max(0, c.FPDFText_CountChars(textpage)) + 2
                while True:
                    if len(self._buffer) < room:
                        self._buffer = (self._ctypes.c_ushort * room)()
                    got = c.FPDFText_GetBoundedText(textpage, box.left, box.top, box.right,
                                                    box.bottom, self._buffer, room)
                    if got < room:  # else it was cut to fit: again with more room
                        break
                    room *= 2
            finally:
                c.FPDFText_ClosePage(textpage)
        finally:
            c.FPDF_ClosePage(page)
        if got > 0 and self._buffer[got - 1] == 0:
            got -= 1  # the terminating NUL PDFium copies when there is room for it
        return self._ctypes.string_at(self._buffer, 2 * max(0, got)).decode("utf-16-le",
                                                                             "ignore")


def _has_image(page: Any) -> bool:
    """A page without text is worth OCR only if it shows a picture (a blank separator
    page or a vector drawing is not a scan)."""
    import pypdfium2.raw as pdfium_c

    return next(iter(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE])), None) is not None


def _ocr_page(page: Any, ocr: OcrSettings) -> str:
    bitmap = page.render(scale=OCR_DPI / 72, grayscale=True)
    try:
        image = pgm(bitmap.width, bitmap.height, bitmap.stride, bytes(bitmap.buffer))
    finally:
        bitmap.close()
    return recognise(image, languages=ocr.languages)


def _with_pypdf(path: str) -> Extracted:
    import logging

    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    import io

    data = _read(path)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise _ENCRYPTED
        pages: list[str] = []
        chars = 0
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            chars += len(pages[-1])
            _check_size(chars)
        meta = reader.metadata
        title = meta.title if meta else None
    except ExtractionError:
        raise
    except FileNotDecryptedError:
        raise _ENCRYPTED from None
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            AssertionError, RecursionError, NotImplementedError) as exc:
        raise ExtractionError(
            f"damaged or unsupported PDF ({type(exc).__name__}: {exc})",
            "open it in a PDF viewer and save a repaired copy",
        ) from None
    return _finish(pages, str(title) if title else None, path, "pypdf")


def _read(path: str) -> bytes:
    try:
        return read_regular_file(path)
    except OSError as exc:
        raise ExtractionError(f"{ACCESS_ERROR}: {exc.strerror or exc}",
                              "check its permissions") from None


def engine() -> str:
    if os.environ.get("LOOM_PDF_ENGINE") == "pypdf":
        return "pypdf"
    try:
        import pypdfium2  # noqa: F401
    except ImportError:
        return "pypdf"
    return "pdfium"


def extract_pdf(path: str, ocr: OcrSettings | None = None,
                on_ocr_page: Callable[[], None] | None = None) -> Extracted:
    """Text page by page; with OCR on, pages without text are recognised (PDFium renders
    them; the pypdf fallback cannot render, so it reads text layers only)."""
    return _with_pdfium(path, ocr, on_ocr_page) if engine() == "pdfium" else _with_pypdf(path)
