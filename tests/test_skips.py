"""Clean scans of real trees: a valid document holding no text is skipped with a reason
(not failed, exit 0); damaged, empty and encrypted files still fail; a rescan sums up
what it already said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .conftest import PDF_SAMPLES, write
from .test_cli_scan import loom

# Image-only PDFs made by real producers (ImageMagick; py-pdf/sample-files).
ICONS = ["007-imagemagick-images/imagemagick-images.pdf",
         "007-imagemagick-images/imagemagick-lzw.pdf",
         "019-grayscale-image/grayscale-image.pdf", "023-cmyk-image/cmyk-image.pdf"]


def texlive_like(root: Path) -> Path:
    """doc/latex/<package>/ folders: a manual with text, and icons and logos without."""
    for i, icon in enumerate(ICONS):
        pkg = root / "doc" / "latex" / f"pkg{i}"
        pkg.mkdir(parents=True)
        shutil.copy(PDF_SAMPLES / icon, pkg / f"logo{i}.pdf")
    shutil.copy(PDF_SAMPLES / "004-pdflatex-4-pages" / "pdflatex-4-pages.pdf",
                root / "doc" / "latex" / "pkg0" / "manual.pdf")
    write(root / "doc" / "README.md", "# TeX Live docs\n")
    return root


def test_icon_pdfs_are_skipped_and_the_scan_exits_0(tmp_path, loom_home):
    tree = texlive_like(tmp_path / "texlive")
    first = loom("scan", str(tree), "--json")  # check=0: exit 0
    report = json.loads(first.stdout)
    assert (report["added"], report["failed"], report["errors"]) == (2, 0, [])
    assert report["skipped"] == 4
    assert sorted(s["path"] for s in report["skips"]) == [
        f"doc/latex/pkg{i}/logo{i}.pdf" for i in range(4)]
    assert all(s["reason"].startswith("PDF has no text") for s in report["skips"])
    again = loom("scan", str(tree))
    assert again.stdout.startswith("added 0, updated 0, moved 0, removed 0, unchanged 2, "
                                   "skipped 4, failed 0")
    assert again.stderr == ""  # known skips are not said again
    listed = loom("status", "--skipped").stdout.splitlines()
    assert len(listed) == 4 and listed[0].startswith("doc/latex/pkg0/logo0.pdf: PDF has no")
    data = json.loads(loom("status", "--skipped", "--json").stdout)
    assert [s["path"] for s in data["skips"]] == [f"doc/latex/pkg{i}/logo{i}.pdf"
                                                  for i in range(4)]
    status = json.loads(loom("status", "--json").stdout)
    assert (status["files"], status["failed"], status["skipped"]) == (2, 0, 4)
    assert "2 files: " not in loom("status").stdout  # the human line counts them
    assert ", 0 failed, 4 skipped (no text)," in loom("status").stdout


def test_first_scan_sums_up_skips_in_one_line(tmp_path, loom_home):
    tree = texlive_like(tmp_path / "texlive")
    proc = loom("scan", str(tree))
    [line] = proc.stderr.splitlines()
    assert line.startswith("loom: skipped 4 files with no text to index (e.g. doc/latex/")
    assert line.endswith("— `loom status --skipped` lists them")
    verbose = loom("scan", str(tree), "--verbose")
    assert len(verbose.stderr.splitlines()) == 4
    assert all(x.startswith("loom: skipped: doc/latex/") for x in verbose.stderr.splitlines())


def test_ocr_off_skips_with_the_reason_and_how_to_turn_it_on(tmp_path, loom_home):
    write(loom_home / "config.toml", "[ocr]\nenabled = false\n")
    tree = texlive_like(tmp_path / "texlive")
    report = json.loads(loom("scan", str(tree), "--json").stdout)
    assert report["failed"] == 0 and len(report["skips"]) == 4
    assert all(s["reason"].startswith("PDF has no text layer") for s in report["skips"])


def test_damaged_empty_and_encrypted_files_still_fail(tmp_path, loom_home):
    tree = texlive_like(tmp_path / "texlive")
    write(tree / "empty.pdf", b"")
    write(tree / "cut.pdf", (PDF_SAMPLES / ICONS[0]).read_bytes()[:300])
    shutil.copy(PDF_SAMPLES / "005-libreoffice-writer-password" /
                "libreoffice-writer-password.pdf", tree / "locked.pdf")
    first = loom("scan", str(tree), check=1)
    failed = sorted(line.split(": ")[2] for line in first.stderr.splitlines()
                    if line.startswith("loom: failed: "))
    assert failed == ["cut.pdf", "empty.pdf", "locked.pdf"]
    again = loom("scan", str(tree), check=1)
    assert again.stderr == ("loom: 3 files failed before and are unchanged — "
                            "`loom status --failed` lists them\n")
    listed = loom("status", "--failed").stdout.splitlines()
    assert [x.split(": ")[0] for x in listed] == ["cut.pdf", "empty.pdf", "locked.pdf"]
    assert "encrypted" in listed[2]
    verbose = loom("scan", str(tree), "--verbose", check=1)
    assert len([x for x in verbose.stderr.splitlines() if "failed: " in x]) == 3
