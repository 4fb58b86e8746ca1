"""Scanned pages and images as text, through Tesseract (`tesseract` on PATH).

PDF pages without a text layer are rendered by PDFium at OCR_DPI in grey and handed to
Tesseract as a PGM image on stdin; image files are handed over by path. Runs inside the
extraction workers, so the pool's time and memory limits hold. Without Tesseract, nothing
here runs and an image-only PDF fails saying how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from loomcli.errors import ExtractionError

# Measured (tests/bench/bench_ocr.py --dpi-sweep): at 6 and 8 pt, 300 dpi read every word
# where 150 and 200 dpi lost 0.8%; it costs about a third more time than 200 dpi.
OCR_DPI = 300
INSTALL_HINT = ("install Tesseract to read scanned pages (Debian/Ubuntu: apt install "
                "tesseract-ocr; macOS: brew install tesseract), or run the file through "
                "ocrmypdf")


@dataclass(frozen=True)
class OcrSettings:
    """What the workers need to know: picklable, decided once per scan from config."""

    enabled: bool
    languages: str  # Tesseract's form: "eng+ita"


def installed_languages() -> list[str]:
    exe = shutil.which("tesseract")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--list-langs"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines()[1:]
            if line.strip() and line.strip() != "osd"]


def version() -> str:
    """Tesseract's version line ("tesseract 5.3.0"), or "" without it."""
    exe = shutil.which("tesseract")
    if exe is None:
        return ""
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (proc.stdout or proc.stderr).splitlines()  # Tesseract 3 wrote it on stderr
    return lines[0].strip() if lines else ""


def fingerprint(reader: OcrSettings) -> str:
    """What an OCR-dependent outcome (a scan skipped or failed for want of OCR, OCR that
    found nothing) depended on: OCR off, or its languages and Tesseract's version. Stored
    with such a file; the scan tries the file again once this changes (Tesseract installed
    or upgraded, `[ocr] enabled` or `languages` switched, a language pack added)."""
    if not reader.enabled:
        return "off"
    return f"{reader.languages} {version()}".strip()


def settings(enabled: bool | None, languages: str | None) -> OcrSettings:
    """From `[ocr] enabled` (default: on when Tesseract is found) and `languages`
    (default: every installed language but osd)."""
    found = installed_languages()
    if enabled is False or not found:
        return OcrSettings(False, "")
    return OcrSettings(True, languages or "+".join(found))


# What Tesseract says when a language of `-l` is missing (leptonica's "pixRead…" lines
# mean an image it cannot decode instead).
_LANGUAGE_TROUBLE = ("Failed loading language", "couldn't load any languages",
                     "Could not initialize tesseract")


def recognise(image: bytes, *, languages: str, timeout: float = 120,
              image_file: bool = False) -> str:
    """Tesseract's text for an image (PGM, PNG, JPEG, TIFF …) given on its stdin.
    `image_file`: the image is the user's file (not a page loom rendered), so an image
    Tesseract cannot decode is reported as a damaged image."""
    exe = shutil.which("tesseract")
    if exe is None:
        raise ExtractionError("Tesseract is not installed", INSTALL_HINT, ocr=True)
    try:
        proc = subprocess.run([exe, "stdin", "stdout", "-l", languages, "--psm", "3"],
                              input=image, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExtractionError(f"OCR took longer than {timeout:.0f}s and was stopped",
                              "the image may be huge; add it to .loomignore",
                              ocr=True) from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip()
        lines = said.splitlines()
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        missing = next((line for line in lines if "Failed loading language" in line), last)
        if any(mark in said for mark in _LANGUAGE_TROUBLE):
            raise ExtractionError(f"OCR failed ({missing})",
                                  "check [ocr] languages against `tesseract --list-langs`",
                                  ocr=True)
        if image_file:
            decoder = next((line for line in lines if "error" in line.lower()), last)
            raise ExtractionError(f"damaged or unsupported image ({decoder})",
                                  "open it in an image viewer and save a repaired copy, or "
                                  "add it to .loomignore")
        raise ExtractionError(f"OCR failed ({last})",
                              "the page may be damaged; add the file to .loomignore")
    return proc.stdout.decode("utf-8", "replace").replace("\f", "").rstrip() + "\n"


def pgm(width: int, height: int, stride: int, buffer: bytes) -> bytes:
    """A grey bitmap as a binary PGM image (rows without their stride padding)."""
    rows = buffer if stride == width else b"".join(
        buffer[y * stride:y * stride + width] for y in range(height))
    return b"P5\n%d %d\n255\n" % (width, height) + rows
