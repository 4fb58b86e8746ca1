"""Notes as text: UTF-8 first, other encodings still indexed, binary refused."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from loomcli.errors import ExtractionError
from loomcli.extract import Extracted

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_TITLE_SCAN_CHARS = 4000
_ATX = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_FRONT_TITLE = re.compile(r"\A---\r?\n(?:.*\r?\n)*?title:[ \t]*[\"']?(.+?)[\"']?[ \t]*\r?\n", re.M)
_ORG_TITLE = re.compile(r"^#\+title:[ \t]*(.+)$", re.M | re.I)
_ADOC_TITLE = re.compile(r"^=[ \t]+(.+)$", re.M)
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+:.]){3,}[ \t]*$")


def decode(data: bytes) -> str:
    """Decode a note; raise ExtractionError for binary content."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(codec, errors="replace")
    if b"\0" in data:
        raise ExtractionError(
            "binary file (contains NUL bytes), not text",
            "remove it or add it to .loomignore",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    non_ascii = sum(1 for ch in text if ord(ch) > 127) - bad
    if non_ascii >= bad:
        return text  # mostly UTF-8 with a few broken bytes: keep it, bytes replaced
    # A legacy 8-bit encoding (Latin-1, Windows-1252): every byte is a character.
    return data.decode("cp1252", errors="replace")


def title_of(text: str, relpath: str) -> str:
    head = text[:_TITLE_SCAN_CHARS]
    suffix = PurePosixPath(relpath).suffix.lower()
    for pattern in (_FRONT_TITLE, _ORG_TITLE):
        m = pattern.search(head)
        if m:
            return m.group(1).strip()
    if suffix == ".adoc":
        m = _ADOC_TITLE.search(head)
        if m:
            return m.group(1).strip()
    if suffix == ".rst":
        lines = head.splitlines()
        for i in range(len(lines) - 1):
            line = lines[i].strip()
            if line and _RST_UNDERLINE.match(lines[i + 1]) and not _RST_UNDERLINE.match(line):
                return line
    m = _ATX.search(head)
    if m:
        return m.group(1).strip()
    return PurePosixPath(relpath).stem


def extract_note(data: bytes, relpath: str) -> Extracted:
    text = decode(data)
    return Extracted(text=text, title=title_of(text, relpath))
