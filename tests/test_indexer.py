"""Incremental scans on real folders and a real index, exactly as SPEC states them."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from loomcli import config
from loomcli.errors import IgnorePatternError, RootError
from loomcli.operations import Corpus
from loomcli.store import Store

from .conftest import FIXTURES, bm25_hits, write

KEYS = ["added", "updated", "moved", "removed", "skipped", "failed", "duration_ms", "errors",
        "skips", "unchanged"]


def run(folder: Path, *, force: bool = False, cfg: config.Config | None = None) -> dict:
    cfg = cfg or config.load()
    report = Corpus(cfg).scan([folder], force=force).to_dict()
    with Store.open(cfg.db_path) as store:
        store.check()
    return report


def counts(report: dict) -> tuple[int, ...]:
    return tuple(report[k] for k in ("added", "updated", "moved", "removed", "skipped",
                                     "failed"))


def indexed(cfg: config.Config | None = None) -> list[str]:
    store = Store.open((cfg or config.load()).db_path)
    try:
        return [f.path for f in store.list_files()]
    finally:
        store.close()


def bump(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


EXPECTED = ["ideas.org", "journal/2026-03-14.md", "manuals/field-guide.pdf",
            "manuals/release-notes.pdf", "projects/loom-controller.md", "recipes/bread.md",
            "recipes/crepes-latin1.txt", "reference/watchdog.rst", "welcome.md"]


def test_first_scan_indexes_what_git_would_less_hidden_and_unsupported(notes):
    report = run(notes)
    assert list(report) == KEYS
    assert counts(report) == (9, 0, 0, 0, 0, 0)
    assert indexed() == EXPECTED


def test_touch_changes_nothing(notes):
    run(notes)
    bump(notes / "welcome.md")
    assert counts(run(notes)) == (0, 0, 0, 0, 9, 0)
    assert counts(run(notes)) == (0, 0, 0, 0, 9, 0)


def test_edit_is_updated_and_searchable(notes):
    run(notes)
    with open(notes / "welcome.md", "a", encoding="utf-8") as fh:
        fh.write("\nA new word: zymurgy.\n")
    bump(notes / "welcome.md")
    assert counts(run(notes)) == (0, 1, 0, 0, 8, 0)
    store = Store.open(config.load().db_path)
    assert [h.path for h in bm25_hits(store, "zymurgy", 5)] == ["welcome.md"]


def test_rename_is_moved_only(notes):
    run(notes)
    (notes / "recipes" / "bread.md").rename(notes / "journal" / "sourdough.md")
    assert counts(run(notes)) == (0, 0, 1, 0, 8, 0)
    assert "journal/sourdough.md" in indexed() and "recipes/bread.md" not in indexed()
    store = Store.open(config.load().db_path)
    assert [h.path for h in bm25_hits(store, "sourdough", 5)] == ["journal/sourdough.md"]


def test_pdf_rename_is_moved_without_re_extraction(notes):
    run(notes)
    (notes / "manuals" / "field-guide.pdf").rename(notes / "guide.pdf")
    assert counts(run(notes)) == (0, 0, 1, 0, 8, 0)


def test_delete_is_removed(notes):
    run(notes)
    (notes / "ideas.org").unlink()
    assert counts(run(notes)) == (0, 0, 0, 1, 8, 0)
    assert "ideas.org" not in indexed()


def test_new_ignore_rule_removes_exactly_those_and_dropping_it_brings_them_back(notes):
    run(notes)
    original = (notes / ".loomignore").read_text()
    (notes / ".loomignore").write_text(original + "recipes/\n*.pdf\n")
    assert counts(run(notes)) == (0, 0, 0, 4, 5, 0)
    assert not any(p.startswith("recipes/") or p.endswith(".pdf") for p in indexed())
    (notes / ".loomignore").write_text(original)
    assert counts(run(notes)) == (4, 0, 0, 0, 5, 0)
    assert indexed() == EXPECTED


def test_config_ignore_patterns_apply_to_every_root(notes, loom_home):
    write(loom_home / "config.toml", 'ignore = ["*.rst", "journal/"]\n')
    run(notes)
    got = indexed()
    assert "reference/watchdog.rst" not in got and "journal/2026-03-14.md" not in got
    assert len(got) == 7


def test_malformed_pattern_stops_before_anything_changes(notes):
    run(notes)
    (notes / "ideas.org").unlink()
    (notes / ".loomignore").write_text("ok\n# fine\n[ab\n")
    with pytest.raises(IgnorePatternError, match=r'^\.loomignore:3: invalid pattern'):
        run(notes)
    assert "ideas.org" in indexed()  # not removed: the scan never started


def test_malformed_nested_pattern_names_its_file(notes):
    write(notes / "journal" / ".loomignore", "[[:bogus:]]\n")
    with pytest.raises(IgnorePatternError, match=r"^journal/\.loomignore:1: "):
        run(notes)


def test_missing_folder(tmp_path):
    with pytest.raises(RootError, match="does not exist"):
        run(tmp_path / "nope")


def test_failed_file_keeps_its_earlier_text(notes):
    run(notes)
    target = notes / "recipes" / "bread.md"
    target.write_bytes(b"\x00\x01binary now")
    bump(target)
    report = run(notes)
    assert counts(report) == (0, 0, 0, 0, 8, 1)
    assert report["errors"] == [{"path": "recipes/bread.md",
                                 "error": "binary file (contains NUL bytes), not text — "
                                          "remove it or add it to .loomignore"}]
    store = Store.open(config.load().db_path)
    assert [h.path for h in bm25_hits(store, "sourdough", 5)] == ["recipes/bread.md"]
    # Unchanged since it failed: reported again, not re-read.
    assert counts(run(notes)) == (0, 0, 0, 0, 8, 1)
    target.write_text("# Sourdough v2\nrye this time\n")
    bump(target)
    assert counts(run(notes)) == (0, 1, 0, 0, 8, 0)


def test_bad_files_fail_with_reasons_and_the_rest_is_indexed(tmp_path, loom_home):
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "bad", bad)
    write(loom_home / "config.toml", "[ocr]\nenabled = false\n")  # as without Tesseract
    report = run(bad)
    assert counts(report) == (1, 0, 0, 0, 1, 2)
    reasons = {e["path"]: e["error"] for e in report["errors"]}
    assert "binary file" in reasons["binary-notes.txt"]
    assert "damaged" in reasons["truncated.pdf"]
    # A valid scan without OCR holds no text: skipped with the reason, not failed.
    [skip] = report["skips"]
    assert skip["path"] == "scanned-receipt.pdf" and "no text layer" in skip["reason"]


def test_force_re_extracts(notes):
    run(notes)
    assert counts(run(notes, force=True)) == (0, 9, 0, 0, 0, 0)


def test_files_hashed_in_chunks_skip_when_touched_and_re_extract_when_forced(
        notes, monkeypatch):
    from loomcli.index import indexer

    monkeypatch.setattr(indexer, "STREAM_HASH_BYTES", 10)  # every file is "large"
    run(notes)
    for path in notes.rglob("*.md"):
        bump(path)
    assert counts(run(notes)) == (0, 0, 0, 0, 9, 0)
    assert counts(run(notes, force=True)) == (0, 9, 0, 0, 0, 0)


def test_only_files_under_the_scanned_roots_change(notes, tmp_path):
    other = tmp_path / "other"
    write(other / "x.md", "# Other\nhello\n")
    run(notes)
    run(other)
    assert counts(run(other)) == (0, 0, 0, 0, 1, 0)
    assert len(indexed()) == 10
    (notes / "ideas.org").unlink()
    assert counts(run(other)) == (0, 0, 0, 0, 1, 0)  # notes/ not scanned: nothing removed
    assert "ideas.org" in indexed()  # the first root's paths never gain a prefix
    assert "other/x.md" in indexed()


def test_rescan_without_folders_uses_the_indexed_roots(notes):
    run(notes)
    (notes / "ideas.org").unlink()
    report = Corpus(config.load()).scan()
    assert report.removed == 1


def test_hidden_symlinks_and_case_insensitive_extensions(notes):
    write(notes / "Upper.MD", "# Upper\n")
    write(notes / ".hidden.md", "# Hidden\n")
    (notes / "link.md").symlink_to(notes / "welcome.md")
    (notes / "linkdir").symlink_to(notes / "journal")
    write(notes / "image.png", b"\x89PNG")
    run(notes)
    got = indexed()
    assert "Upper.MD" in got
    assert not any(p.startswith((".hidden", "link")) or p.endswith(".png") for p in got)


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse such names")
def test_file_name_that_is_not_utf8_fails_with_a_reason_and_the_rest_is_indexed(notes):
    with open(os.fsencode(notes) + b"/caf\xe9-latin1-name.md", "wb") as fh:
        fh.write(b"# Name\nhello\n")
    write(notes / "empty.md", "")
    report = run(notes)
    assert counts(report) == (10, 0, 0, 0, 0, 1)
    assert report["errors"] == [{"path": "caf\ufffd-latin1-name.md",
                                 "error": "file name is not valid UTF-8; rename it to index it"}]
    assert "empty.md" in indexed()


def test_a_file_deleted_between_listing_and_reading_is_removed_not_failed(notes):
    """Issue 23: a file deleted while the scan ran was counted failed (exit 1). The scan's
    own progress callback, called before each file is read, deletes files at two points:
    a note just before it is read, and a PDF after the scan has read and hashed it but
    before an extraction worker opens it."""
    from loomcli.index.indexer import exit_code

    run(notes)
    for name in ("welcome.md", "recipes/bread.md"):
        bump(notes / name)  # touched: each is read again
    with (notes / "manuals" / "field-guide.pdf").open("ab") as pdf:
        pdf.write(b"\n% changed\n")  # changed: read, hashed, then left to a worker
    write(notes / "new.md", "# New\nnever indexed\n")
    seen: list[str] = []

    def progress(done: int, total: int, path: str) -> None:
        seen.append(path)
        if path in ("welcome.md", "new.md"):
            (notes / path).unlink()  # gone before it is read
        if path == "recipes/bread.md":  # after the PDF was read, before its worker
            (notes / "manuals" / "field-guide.pdf").unlink()

    cfg = config.load()
    report = Corpus(cfg).scan([notes], progress=progress)
    assert seen.index("manuals/field-guide.pdf") < seen.index("recipes/bread.md")
    assert (report.added, report.updated, report.removed, report.failed) == (0, 0, 2, 0)
    assert report.errors == [] and exit_code(report) == 0
    assert "welcome.md" not in indexed() and "manuals/field-guide.pdf" not in indexed()
    with Store.open(cfg.db_path) as store:
        store.check()
    again = run(notes)
    assert counts(again) == (0, 0, 0, 0, 7, 0)


def test_a_change_is_told_once_it_is_committed(notes):
    """`loom watch` printed a change as soon as it was written inside its batch; a SIGTERM
    before the batch's commit rolled it back, so a printed file was not in the index (found
    running tests/test_watch.py beside `stress-ng --cpu 2`). Each change is now told after
    its commit: another connection sees it when it is told."""
    import sqlite3

    cfg = config.load()
    run(notes)
    write(notes / "new.md", "# New\nfresh words\n")
    (notes / "welcome.md").unlink()
    write(notes / "recipes" / "bread.md", "# Bread\nnow with rye\n")
    told = []

    def on_change(change: str, path: str, detail: str | None) -> None:
        with sqlite3.connect(cfg.db_path) as other:
            (rows,) = other.execute("SELECT count(*) FROM files f JOIN docs d ON d.id = f.id"
                                    " WHERE f.relpath = ? AND instr(d.body, ?)", (
                                        path, "rye" if "bread" in path else "")).fetchone()
        told.append((change, path, rows))

    Corpus(cfg).scan([notes], on_change=on_change)
    assert sorted(told) == [("added", "new.md", 1), ("removed", "welcome.md", 0),
                            ("updated", "recipes/bread.md", 1)]
