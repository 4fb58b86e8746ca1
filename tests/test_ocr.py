"""Scanned pages and images through Tesseract (installed by .ci/run where apt-get can)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

from loomcli.extract.ocr import installed_languages

from .conftest import FIXTURES, write

LOOM = [sys.executable, "-m", "loomcli"]
sys.path.insert(0, str(FIXTURES))
from make_fixtures import MIXED, SCANNED_LETTER, _content, scan_of  # noqa: E402

pytestmark = pytest.mark.skipif(
    not {"eng", "ita"} <= set(installed_languages()),
    reason="Tesseract with English and Italian is not installed (Debian: apt install "
           "tesseract-ocr tesseract-ocr-eng tesseract-ocr-ita; .ci/run does this)")


def loom(*args: str, check: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, env=os.environ,
                          timeout=300)
    assert proc.returncode == check, proc.stderr
    return proc


def words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text.lower())


def recall(known: str, got: str) -> float:
    want, have = words(known), set(words(got))
    return sum(w in have for w in want) / len(want)


def test_a_scanned_letter_is_read_with_its_pages_and_languages(tmp_path, loom_home):
    folder = tmp_path / "scans"
    shutil.copytree(FIXTURES / "ocr", folder)
    write(loom_home / "config.toml", '[ocr]\nlanguages = "eng+ita"\n')
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert (report["added"], report["failed"]) == (2, 0)
    letter = loom("get", "scanned-letter.pdf").stdout
    known = "\n".join("\n".join(page) for page in SCANNED_LETTER)
    assert recall(known, letter) >= 0.95
    matches = json.loads(loom("grep", "FT-2026-07[0-9]{2}", "--json").stdout)["matches"]
    assert sorted((m["path"], m["page"], m["text"][-13:]) for m in matches) == [
        ("mixed-manual.pdf", 2, "from 2019 on."),
        ("scanned-letter.pdf", 1, "FT-2026-0777."),
        ("scanned-letter.pdf", 2, "FT-2026-0778."),
    ]
    manual = loom("get", "mixed-manual.pdf").stdout
    assert recall("\n".join("\n".join(p) for p in MIXED), manual) >= 0.95


def png(scan) -> bytes:
    rows = b"".join(b"\x00" + scan.pixels[y * scan.width:(y + 1) * scan.width]
                    for y in range(scan.height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", scan.width,
                                                             scan.height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_images_are_indexed_only_when_listed_in_extensions(tmp_path, loom_home):
    folder = tmp_path / "shots"
    write(folder / "receipt.png", png(scan_of(_content(SCANNED_LETTER[0]))))
    write(folder / "note.md", "# Note\nplain\n")
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert report["added"] == 1  # screenshots are not indexed unless asked
    write(loom_home / "config.toml", 'extensions = ["md", "png"]\n')
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert report["added"] == 1 and report["failed"] == 0
    assert loom("grep", "FT-2026-0777").stdout.startswith("receipt.png:")


def test_ocr_of_one_file_has_a_time_cap_however_many_pages_it_has(tmp_path):
    """Each OCR page used to move the file's deadline on, so a long scan of noise could run
    for minutes past its limit while the scan held the write lock (issue 23, item 12)."""
    from pypdf import PdfReader, PdfWriter

    from loomcli.errors import ExtractionError
    from loomcli.extract.ocr import OcrSettings
    from loomcli.extract.pool import extract_documents

    writer = PdfWriter()
    for _ in range(8):  # 16 scanned pages: about 35 s of OCR, far past the 6 s caps below
        for page in PdfReader(FIXTURES / "ocr" / "scanned-letter.pdf").pages:
            writer.add_page(page)
    book = tmp_path / "book.pdf"
    with book.open("wb") as out:
        writer.write(out)
    [(key, result)] = extract_documents([("book", str(book), book.stat().st_size)],
                                        workers=1, limit=lambda size: 6.0,
                                        ocr=OcrSettings(True, "eng"), ocr_file_s=6.0)
    assert key == "book" and isinstance(result, ExtractionError), result
    assert "was stopped" in str(result)


def path_to(tmp_path, *, tesseract: bool) -> str:
    """A PATH holding Tesseract or not (the loom subprocesses need nothing else on it)."""
    folder = tmp_path / ("bin-with-tesseract" if tesseract else "bin-without")
    folder.mkdir(exist_ok=True)
    exe = shutil.which("tesseract")
    if tesseract and exe and not (folder / "tesseract").exists():
        (folder / "tesseract").symlink_to(exe)
    return str(folder)


def scan(*args: str, path: str, check: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, "scan", *args], capture_output=True, text=True,
                          env={**os.environ, "PATH": path}, timeout=300)
    assert proc.returncode == check, proc.stderr
    return proc


def test_files_left_for_want_of_tesseract_are_read_once_it_is_installed(tmp_path, loom_home):
    """Issue 23, item 13: after installing Tesseract as loom's own hint says, the files that
    had failed or been skipped for lack of it were never tried again (only --force)."""
    folder = tmp_path / "scans"
    shutil.copytree(FIXTURES / "ocr", folder)
    shutil.copy(FIXTURES / "bad" / "truncated.pdf", folder)  # fails whatever OCR does
    write(folder / "receipt.png", png(scan_of(_content(SCANNED_LETTER[0]))))
    write(folder / "note.md", "# Note\nplain\n")
    write(loom_home / "config.toml", 'extensions = ["md", "png"]\n')
    without, with_it = path_to(tmp_path, tesseract=False), path_to(tmp_path, tesseract=True)

    first = json.loads(scan(str(folder), "--json", path=without, check=1).stdout)
    assert (first["added"], first["skipped"], first["failed"]) == (2, 1, 2)
    assert [s["path"] for s in first["skips"]] == ["scanned-letter.pdf"]
    assert sorted(e["path"] for e in first["errors"]) == ["receipt.png", "truncated.pdf"]
    assert "install Tesseract" in next(e["error"] for e in first["errors"]
                                       if e["path"] == "receipt.png")
    again = scan(str(folder), path=without, check=1)  # nothing changed: nothing is read
    assert again.stdout.startswith("added 0, updated 0, moved 0, removed 0, unchanged 2, "
                                   "skipped 1, failed 2")
    assert "failed: " not in again.stderr  # known failures are summed up, not re-extracted

    installed = scan(str(folder), path=with_it, check=1)  # no --force
    assert installed.stdout.startswith("added 0, updated 3, moved 0, removed 0, unchanged 1, "
                                       "skipped 0, failed 1"), installed.stdout
    assert "failed: " not in installed.stderr  # truncated.pdf was not tried again
    found = {line.split(":")[0] for line in loom("grep", "FT-2026-07[0-9]{2}").stdout.splitlines()}
    assert found == {"scanned-letter.pdf", "mixed-manual.pdf", "receipt.png"}
    settled = scan(str(folder), path=with_it, check=1)
    assert settled.stdout.startswith("added 0, updated 0, moved 0, removed 0, unchanged 4, "
                                     "skipped 0, failed 1")


def test_a_change_of_ocr_enabled_or_languages_tries_those_files_again(tmp_path, loom_home):
    folder = tmp_path / "scans"
    write(folder / "letter.pdf", (FIXTURES / "ocr" / "scanned-letter.pdf").read_bytes())
    write(folder / "note.md", "# Note\nplain\n")
    config = loom_home / "config.toml"
    here = os.environ["PATH"]

    write(config, "[ocr]\nenabled = false\n")
    off = json.loads(scan(str(folder), "--json", path=here).stdout)
    assert [s["reason"][:21] for s in off["skips"]] == ["PDF has no text layer"]
    write(config, '[ocr]\nenabled = true\nlanguages = "xyz"\n')  # a language not installed
    wrong = json.loads(scan(str(folder), "--json", path=here, check=1).stdout)
    assert (wrong["skipped"], wrong["failed"]) == (1, 1)
    [error] = wrong["errors"]
    assert error["path"] == "letter.pdf" and "xyz" in error["error"]
    assert "check [ocr] languages" in error["error"]
    assert json.loads(scan(str(folder), "--json", path=here, check=1).stdout)["errors"] == [
        error]  # unchanged: counted again, not read again
    write(config, '[ocr]\nenabled = true\nlanguages = "eng"\n')
    fixed = json.loads(scan(str(folder), "--json", path=here).stdout)
    assert (fixed["updated"], fixed["failed"], fixed["skipped"]) == (1, 0, 1)
    assert loom("grep", "FT-2026-0777").stdout.startswith("letter.pdf:")


def test_a_damaged_image_fails_as_a_damaged_image(tmp_path, loom_home):
    """Issue 23: a corrupt PNG was told to check `[ocr] languages`."""
    folder = tmp_path / "shots"
    good = png(scan_of(_content(SCANNED_LETTER[0])))
    write(folder / "cut.png", good[:3000])
    write(folder / "noise.png", b"\x89PNG\r\n\x1a\n" + b"GARBAGE" * 20)
    write(loom_home / "config.toml", 'extensions = ["png"]\n')
    report = json.loads(loom("scan", str(folder), "--json", check=1).stdout)
    assert sorted(e["path"] for e in report["errors"]) == ["cut.png", "noise.png"]
    for e in report["errors"]:
        assert e["error"].startswith("damaged or unsupported image ("), e
        assert e["error"].endswith("— open it in an image viewer and save a repaired copy, "
                                   "or add it to .loomignore")
        assert "languages" not in e["error"]
