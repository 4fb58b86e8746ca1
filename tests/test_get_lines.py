"""`loom get PATH:LINE` takes what grep prints: every grep hit read back by its path and
line is that line; `--lines A:B`; an offset or line past the end is an error naming the
text's length."""

from __future__ import annotations

import pytest

from .test_cli_scan import loom

pytestmark = pytest.mark.plain


def test_grep_hits_read_back_by_path_and_line(scanned_notes):
    hits = loom("grep", "--color", "never", "--no-heading", "-i", "warp|invoice|the").stdout
    lines = hits.splitlines()
    assert len(lines) > 20 and any(".pdf:p" in line for line in lines)
    for line in lines:
        fields = line.split(":")
        where = 3 if fields[1].startswith("p") and fields[1][1:].isdigit() else 2
        text = ":".join(fields[where + 1:])
        got = loom("get", ":".join(fields[:where])).stdout  # path(:pN):line
        assert got.rstrip("\n") == text, line


def test_a_range_of_lines(scanned_notes):
    whole = (scanned_notes / "welcome.md").read_text(encoding="utf-8").splitlines(True)
    assert loom("get", "welcome.md:2-4").stdout == "".join(whole[1:4])
    assert loom("get", "welcome.md", "--lines", "2:4").stdout == "".join(whole[1:4])
    assert loom("get", "welcome.md", "--lines", "3:").stdout == "".join(whole[2:])
    assert loom("get", "welcome.md", "--lines", ":2").stdout == "".join(whole[:2])
    n = len(whole)
    past = loom("get", f"welcome.md:{n + 1}", check=2)
    assert past.stderr == (f"loom: welcome.md has {n} lines, not {n + 1} — give a line "
                           f"from 1 to {n}\n")
    wrong = loom("get", "welcome.md", "--lines", "4:2", check=2)
    assert wrong.stderr.startswith("loom: lines must be")


def test_an_offset_past_the_end_is_an_error_naming_the_length(scanned_notes):
    size = len((scanned_notes / "welcome.md").read_bytes())
    proc = loom("get", "welcome.md", "--offset", str(size + 1), check=2)
    assert proc.stdout == ""
    assert proc.stderr == (f"loom: offset {size + 1} is past the end of welcome.md, whose "
                           f"text is {size:,} bytes — give an offset below {size}\n")
    assert loom("get", "welcome.md", "--offset", str(size)).stdout == ""  # the end itself


def test_a_path_that_is_not_indexed_is_named_without_its_line(scanned_notes):
    proc = loom("get", "nope.md:3", check=2)
    assert proc.stderr.startswith("loom: nope.md: not in the index")
