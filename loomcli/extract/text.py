"""Notes as text: UTF-8 first, other encodings still indexed, binary refused."""

from __future__ import annotations

import re

from loomcli.errors import ExtractionError
from loomcli.extract import Extracted, markdown

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_TITLE_SCAN_CHARS = markdown.HEADING_SCAN_CHARS
_ATX = markdown.HEADING
_FRONT_TITLE = re.compile(r"\A---\r?\n(?:.*\r?\n)*?title:[ \t]*[\"']?(.+?)[\"']?[ \t]*\r?\n", re.M)
_ORG_TITLE = re.compile(r"^#\+title:[ \t]*(.+)$", re.M | re.I)
_ADOC_TITLE = re.compile(r"^=[ \t]+(.+)$", re.M)
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+:.]){3,}[ \t]*$")


DETECT_BYTES = 1 << 20  # the encoding is guessed from this much of a file
TRAILING_NULS_MAX = 4  # NULs at the very end of a note that are dropped, not "binary"
# A text in a legacy encoding has next to no control characters; random bytes read as
# one have about one in eight (in cp1252).
CONTROLS_MAX = 0.01
# When several single-byte encodings read a text equally well (French in cp1250 and
# cp1252 both look clean to a detector), the Western European one is the likelier note.
_PREFERRED = ("cp1252", "latin_1")


def decode(data: bytes) -> str:
    """Decode a note in any common encoding; raise ExtractionError for binary content.

    BOMs first; then UTF-16 without a BOM (half its bytes are NUL); then UTF-8, the fast
    path for nearly every note; then charset-normalizer's guess (Cyrillic cp1251,
    Shift-JIS, GB18030 …) from the first MB; Windows-1252 as the last resort."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(codec, errors="replace")
    stripped = data.rstrip(b"\0")
    if len(data) - len(stripped) <= TRAILING_NULS_MAX and b"\0" not in stripped:
        data = stripped  # an editor's or a tool's stray NUL at the end: still text
    if b"\0" in data:
        text = _utf16_without_bom(data)
        if text is None:
            raise ExtractionError(
                "binary file (contains NUL bytes), not text",
                "remove it or add it to .loomignore",
            )
        return text
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    non_ascii = sum(1 for ch in text if ord(ch) > 127) - bad
    if non_ascii >= bad:
        return text  # mostly UTF-8 with a few broken bytes: keep it, bytes replaced
    text = data.decode(_guess(data[:DETECT_BYTES]), errors="replace")
    if _controls(text[:DETECT_BYTES]) > CONTROLS_MAX * min(len(text), DETECT_BYTES):
        # No NUL, not UTF-8, and control characters all through it: random or compressed
        # bytes, which every single-byte encoding would "read".
        raise ExtractionError("binary file (control bytes all through it), not text",
                              "remove it or add it to .loomignore")
    return text


def _controls(text: str) -> int:
    return sum(1 for ch in text if not ch.isprintable() and ch not in "\t\n\r\f\v")


def _utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 text without a BOM: a Latin script has a NUL in every other byte; for
    others the detector decides. Anything else with NUL bytes is binary."""
    sample = data[:4096]
    pairs = len(sample) // 2
    if pairs < 2:
        return None
    odd_byte = len(data) % 2  # a last byte cut off (a truncated copy): dropped below
    if odd_byte:
        data = data[:-1]
    odd = sample[1::2].count(0) / pairs
    even = sample[0::2].count(0) / pairs
    codec = ("utf-16-le" if odd > 0.4 > even * 4 else
             "utf-16-be" if even > 0.4 > odd * 4 else None)
    if codec is None:  # another script (Cyrillic: 04xx): let the detector say
        if len(data) < 256:  # too little to tell text from binary: binary, as before
            return None
        guess = _guess(data[:DETECT_BYTES])
        if not guess.startswith(("utf_16", "utf_32")):
            return None
        codec = guess
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:
        return None
    controls = sum(1 for ch in text[:4096] if not ch.isprintable() and ch not in "\t\n\r\f")
    if controls > len(text[:4096]) // 100:
        return None
    return text + "\ufffd" if odd_byte else text


def _guess(sample: bytes) -> str:
    from charset_normalizer import from_bytes

    matches = list(from_bytes(sample))
    if not matches:
        return "cp1252"
    best = matches[0]
    for preferred in _PREFERRED:
        for m in matches:
            if (m.encoding == preferred and m.chaos <= best.chaos + 0.01
                    and m.coherence >= best.coherence - 0.01):
                return preferred
    return str(best.encoding)


def title_of(text: str, relpath: str) -> str:
    """Front matter's or Org's title, an AsciiDoc or reStructuredText heading, a Markdown
    heading, else the file's name without its extension. Each pattern runs only where
    its mark is in the head (a search of 4,000 characters per file costs the kernel
    docs' first scan 0.1 s for each pattern)."""
    head = text[:_TITLE_SCAN_CHARS]
    stem, suffix = _stem_suffix(relpath)
    m = _FRONT_TITLE.match(head) if head.startswith("---") else None
    if not m and "#+" in head:
        m = _ORG_TITLE.search(head)
    if m:
        return m.group(1).strip()
    if suffix == ".adoc":
        m = _ADOC_TITLE.search(head)
        if m:
            return m.group(1).strip()
    if suffix == ".rst" or (suffix == ".txt" and stem.lower().endswith(".rst")):
        # (Sphinx publishes its sources as NAME.rst.txt)
        lines = head.splitlines()
        for i in range(len(lines) - 1):
            line = lines[i].strip()
            if line and _RST_UNDERLINE.match(lines[i + 1]) and not _RST_UNDERLINE.match(line):
                return line
    m = _ATX.search(head) if "#" in head else None
    if m:
        return m.group(1).strip()
    return stem


def _stem_suffix(relpath: str) -> tuple[str, str]:
    """A path's last name without its extension, and the extension in lower case (as
    PurePosixPath's stem and suffix, without building one)."""
    name = relpath.rpartition("/")[2]
    i = name.rfind(".")
    if 0 < i < len(name) - 1:
        return name[:i], name[i:].lower()
    return name, ""


def extract_note(data: bytes, relpath: str) -> Extracted:
    text = decode(data)
    if not markdown.is_markdown(relpath):
        return Extracted(text=text, title=title_of(text, relpath))
    meta = markdown.parse(text, relpath)
    title = meta.title or title_of(text[meta.body_start:meta.body_start + _TITLE_SCAN_CHARS],
                                   relpath)
    return Extracted(text=text, title=title, note=meta)
