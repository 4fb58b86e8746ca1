"""Markdown notes as notes: front matter, `#tags` and `[[wikilinks]]` (Obsidian, Logseq).

Pure and bounded: every pattern runs over at most FRONT_MAX_CHARS of front matter and
BODY_SCAN_CHARS of body, and a note keeps at most TAGS_MAX tags and LINKS_MAX links.

Front matter is metadata, not text: a block that opens the note — YAML between `---`
lines, TOML between `+++` lines, or Logseq's `key:: value` lines — whose `title`,
`aliases` and `tags` become searchable fields. The stored text stays the file as the
user sees it (grep and get show the front matter, with the file's own lines and byte
offsets); search's body, its snippets and `ask`'s head start after it (`body_start`).
Malformed front matter never fails a scan: a block that is never closed is text, and a
closed block whose values cannot be read is metadata without fields.
"""

from __future__ import annotations

import re

from loomcli.records import Record
from loomcli.search.scripts import Lazy

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from collections.abc import Iterable

FRONT_MAX_CHARS = 64 * 1024  # a longer "front matter" is text (no closing line that soon)
BODY_SCAN_CHARS = 1 << 20  # tags and links are looked for in this much of a note's body
TAGS_MAX = 200
LINKS_MAX = 1000
FIELD_CHARS = 300  # the longest title, alias, tag or link target kept
MARKDOWN = frozenset({".md", ".markdown"})

_YAML_OPEN = Lazy(r"---[ \t]*\r?\n")
_YAML_CLOSE = Lazy(r"^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.M)
_TOML_OPEN = Lazy(r"\+\+\+[ \t]*\r?\n")
_TOML_CLOSE = Lazy(r"^\+\+\+[ \t]*(?:\r?\n|\Z)", re.M)
_LOGSEQ_LINE = Lazy(r"([A-Za-z][\w-]*):: ?(.*)")
_YAML_KEY = Lazy(r"([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*))?$")
_YAML_ITEM = Lazy(r"[ \t]*-[ \t]+(.*)$")
# Code is not where tags live: fenced blocks and inline spans are blanked before the tag
# pattern runs (offsets kept, so lines stay right). A block runs from its fence to the
# next line starting with the same fence (or the end).
_FENCE = Lazy(r"^[ \t]*(```|~~~)", re.M)
_CLOSE = {"```": Lazy(r"^[ \t]*```", re.M), "~~~": Lazy(r"^[ \t]*~~~", re.M)}
_INLINE_CODE = Lazy(r"`[^`\n]+`")
# Obsidian's tag: `#` after a space or a line start, then letters, digits, `_`, `-`, `/`
# (nested tags), not only digits (`#1` is not a tag).
_TAG = Lazy(r"#([\w/-]*[^\W\d][\w/-]*)")  # (and after a space or at a line start)
_TAG_START = Lazy(r"#[\w/-]")  # anything that may be a tag (`# Heading` is not)
# `![[embed]]` is a link too: its `!` is left out of the pattern (a literal first is
# found by a fast search).
_LINK = Lazy(r"\[\[([^\[\]\n|#]*)(?:#([^\[\]\n|]*))?(?:\|([^\[\]\n]*))?\]\]")
# `[text](target "title")` and `[text](<target with spaces>)`: bounded by the line.
_MD_LINK = Lazy(r"\[([^\[\]\n]*)\]\(\s*(<[^<>\n]+>|[^()\s]+)(?:\s+\"[^\"\n]*\")?\s*\)")
LINKED_KINDS = (".md", ".markdown", ".pdf")  # what a Markdown link to a note names
_FIELD_KEYS = {"title": "title", "aliases": "aliases", "alias": "aliases", "tags": "tags",
               "tag": "tags"}


class Link(Record):
    """One `[[target#heading|alias]]` of a note, on line `line` (from 1) of its file."""

    __slots__ = ("target", "heading", "alias", "line")

    def __init__(self, target: str, heading: str | None, alias: str | None, line: int) -> None:
        self.target, self.heading, self.alias, self.line = target, heading, alias, line


class NoteMeta(Record):
    """What a Markdown note says about itself. `body_start`: the character of the text
    where the body starts (0: no front matter); `day`: the date a daily note is named by
    (`2026-03-14`), else None."""

    __slots__ = ("body_start", "title", "aliases", "tags", "links", "day")

    def __init__(self, body_start: int = 0, title: str | None = None,
                 aliases: list[str] | None = None, tags: list[str] | None = None,
                 links: list[Link] | None = None, day: str | None = None) -> None:
        self.body_start = body_start
        self.title = title
        self.aliases = aliases or []
        self.tags = tags or []  # lower case, without `#`, each once
        self.links = links or []
        self.day = day

    def fields(self) -> str:
        """The searchable fields besides the title, one a line (tags' `/` as spaces; a
        daily note's date as written and in words)."""
        return "\n".join([*self.aliases, *(t.replace("/", " ") for t in self.tags),
                          *(_day_words(self.day) if self.day else ())])

    def names(self) -> list[str]:
        """The other names `[[wikilinks]]` may name this note by (link keys, each once):
        its aliases and its title (Logseq's page name is its `title::`; a journal's, its
        date as Logseq shows it). A file's own name wins over them (store.common)."""
        named = [*self.aliases, *([self.title] if self.title else []),
                 *([journal_title(self.day)] if self.day else [])]
        keys = [link_key(n) for n in named]
        return [k for k in dict.fromkeys(keys) if k][:TAGS_MAX]


HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)  # an ATX heading: a title
HEADING_SCAN_CHARS = 4000  # where a title is looked for
_TITLE_LINE = re.compile(r"\s*# +\S")  # a body that starts with a level-1 heading


def is_markdown(relpath: str) -> bool:
    name = relpath.rpartition("/")[2].lower()
    return any(name.endswith(s) for s in MARKDOWN)


def parse(text: str, relpath: str = "") -> NoteMeta:
    """The front matter's fields, the tags and the links of a Markdown note (at
    `relpath`: a daily note is titled by the date its name holds)."""
    body_start, values = front_matter(text)
    meta = NoteMeta(body_start, day=day_of(relpath))
    meta.title = _one(values.get("title"))
    if meta.title is None and meta.day and not _TITLE_LINE.match(text, body_start):
        meta.title = journal_title(meta.day)  # (an H1 on its first line stays the title)
    meta.aliases = _unique(_many(values.get("aliases"), split=","))
    tags = [t.lstrip("#") for t in _many(values.get("tags"), split=r"[,\s]+")]
    body = text[body_start:body_start + BODY_SCAN_CHARS]
    # Each pattern runs only where its mark is (a note without `[[` costs no link search).
    marks = "[[" in body or "](" in body or _TAG_START.search(body) is not None
    blanked = _blank_code(body) if marks and ("`" in body or "~~~" in body) else body
    found: list[tuple[int, str, str | None, str | None]] = []  # (where, target, heading, alias)
    if "[[" in blanked:
        for m in _LINK.finditer(blanked):
            target = m.group(1).strip()
            if not target:
                continue  # [[#heading]]: a place in the same note
            found.append((m.start(), target, m.group(2), m.group(3)))
            at = m.start() - 1  # Logseq's `#[[a tag of words]]`: a tag and a link
            if at >= 0 and blanked[at] == "#" and (at == 0 or blanked[at - 1].isspace()):
                tags.append(target)
            if len(found) == LINKS_MAX:
                break
        blanked = _LINK.sub(_blank, blanked)
    if "](" in blanked and len(found) < LINKS_MAX:
        found += _markdown_links(blanked, LINKS_MAX - len(found))
        found.sort(key=lambda f: f[0])
    links: list[Link] = []
    line, pos = text.count("\n", 0, body_start) + 1, 0
    for start, target, heading, alias in found:
        line += blanked.count("\n", pos, start)
        pos = start
        links.append(Link(target[:FIELD_CHARS], _clean(heading), _clean(alias), line))
    if "#" in blanked:
        for m in _TAG.finditer(blanked):
            at = m.start()
            if at and not blanked[at - 1].isspace():
                continue  # `a#b`, a URL's `/#anchor`: not a tag
            tags.append(m.group(1))
            if len(tags) >= TAGS_MAX:
                break
    meta.tags = _unique([t.strip("/").lower() for t in tags if t.strip("/")])[:TAGS_MAX]
    meta.links = links
    return meta


def front_matter(text: str) -> tuple[int, dict[str, object]]:
    """(where the body starts, the fields read) of a note's front matter; (0, {}) when it
    has none, or its block is never closed (then it is text)."""
    m = _YAML_OPEN.match(text)
    if m:
        close = _YAML_CLOSE.search(text, m.end(), m.end() + FRONT_MAX_CHARS)
        if close is None:
            return 0, {}
        return close.end(), _yaml(text[m.end():close.start()])
    m = _TOML_OPEN.match(text)
    if m:
        close = _TOML_CLOSE.search(text, m.end(), m.end() + FRONT_MAX_CHARS)
        if close is None:
            return 0, {}
        return close.end(), _toml(text[m.end():close.start()])
    return _logseq(text)


# Daily notes: Logseq's journals are `journals/2026_03_14.md` (`:journal/file-name-format`
# "yyyy_MM_dd"), Obsidian's `2026-03-14.md` (its Daily notes plugin's "YYYY-MM-DD"); any
# note named by a date with `-`, `_` or `.` between its parts is one (a bare 20260314 is
# as often an identifier).
_DAY_NAME = Lazy(r"(\d{4})([-_.])(\d{2})\2(\d{2})")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def day_of(relpath: str) -> str | None:
    """The ISO date a note's file name is (`journals/2026_03_14.md` -> `2026-03-14`), or
    None (not a date, or no such day)."""
    import datetime

    stem = relpath.rpartition("/")[2]
    stem = stem[:stem.rfind(".")] if "." in stem[1:] else stem
    m = _DAY_NAME.fullmatch(stem) if len(stem) == 10 else None
    if m is None:
        return None
    try:
        return datetime.date(int(m.group(1)), int(m.group(3)), int(m.group(4))).isoformat()
    except ValueError:
        return None


def journal_title(day: str) -> str:
    """A daily note's title as Logseq shows a journal page by default
    (`:journal/page-title-format "MMM do, yyyy"`): `2026-03-14` -> `Mar 14th, 2026`."""
    year, month, d = (int(p) for p in day.split("-"))
    suffix = "th" if 10 < d % 100 < 14 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
    return f"{_MONTHS[month - 1][:3]} {d}{suffix}, {year}"


def _day_words(day: str) -> list[str]:
    """What a person may search a daily note by besides its title: the date as written
    and in words, and that it is a journal (`2026-03-14`, `Saturday 14 March 2026`)."""
    import datetime

    when = datetime.date.fromisoformat(day)
    return [day, f"{_WEEKDAYS[when.weekday()]} {when.day} {_MONTHS[when.month - 1]} "
                 f"{when.year}", "daily journal"]


def _yaml(block: str) -> dict[str, object]:
    """The keys that matter of a YAML block: `key: value`, `key: [a, b]`, and `key:`
    followed by `- item` lines. Anything else (nested maps, anchors) is skipped."""
    out: dict[str, object] = {}
    key: str | None = None
    for raw in block.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        item = _YAML_ITEM.match(raw)
        if item and key is not None:
            current = out.setdefault(key, [])
            if isinstance(current, list):
                current.append(_scalar(item.group(1)))
            continue
        m = _YAML_KEY.match(raw)
        if not m or raw[:1].isspace():
            key = None
            continue
        name = _FIELD_KEYS.get(m.group(1).lower())
        value = (m.group(2) or "").strip()
        key = name if name and not value else None
        if name and value:
            if value.startswith("[") and value.endswith("]"):
                out[name] = [_scalar(v) for v in _split_flow(value[1:-1])]
            elif value[:1] not in "{&*|>":
                out[name] = _scalar(value)
    return out


def _markdown_links(body: str, most: int) -> list[tuple[int, str, str | None, str | None]]:
    """A plain Markdown folder's links: `[text](path.md#heading)` to a note or a PDF
    (not a URL, not an image), its target as written, relative to the note (`./` added
    when it has neither `./`, `../` nor `/`; store.common resolves it from the note's
    folder)."""
    from urllib.parse import unquote

    out: list[tuple[int, str, str | None, str | None]] = []
    for m in _MD_LINK.finditer(body):
        target, _, heading = unquote(m.group(2).strip("<>")).partition("#")
        target = target.strip()
        if ":" in target or not target.lower().endswith(LINKED_KINDS):
            continue  # a URL (`https:`, `mailto:`), an image, a page of the web
        if not target.startswith(("./", "../", "/")):
            target = "./" + target
        out.append((m.start(), target, heading or None, m.group(1).strip() or None))
        if len(out) == most:
            break
    return out


def _split_flow(inner: str) -> list[str]:
    """`a, "b, c", d` → its items, commas inside quotes kept."""
    return [m.group(1).strip() for m in _FLOW_ITEM.finditer(inner) if m.group(1).strip()]


_FLOW_ITEM = Lazy(r"""\s*("[^"]*"|'[^']*'|[^,]+)""")


def _scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    if "#" not in value:
        return value
    return re.sub(r"[ \t]+#.*$", "", value)  # a trailing YAML comment


def _toml(block: str) -> dict[str, object]:
    import tomllib

    try:
        data = tomllib.loads(block)
    except (tomllib.TOMLDecodeError, RecursionError):
        return {}
    return {_FIELD_KEYS[k.lower()]: v for k, v in data.items() if k.lower() in _FIELD_KEYS}


def _logseq(text: str) -> tuple[int, dict[str, object]]:
    """Logseq's page properties: `key:: value` lines at the very top of a page."""
    out: dict[str, object] = {}
    pos = 0
    while pos < min(len(text), FRONT_MAX_CHARS):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        m = _LOGSEQ_LINE.fullmatch(text[pos:end].rstrip("\r\n").lstrip("- "))
        if m is None:
            break
        name = _FIELD_KEYS.get(m.group(1).lower())
        if name:
            out[name] = _logseq_values(m.group(2)) if name != "title" else m.group(2).strip()
        pos = end
    return (pos, out) if pos else (0, {})


# A page reference of a property's value: `[[a page]]`, `#[[a tag]]` or `#tag`.
_LOGSEQ_REF = Lazy(r"#?\[\[([^\[\]\n]+)\]\]|#([^\s#,\[\]]+)")


def _logseq_values(value: str) -> list[str]:
    """A property's values: comma-separated (`a, [[b c]]`), or page references one after
    another (`[[a]] [[b c]]`, `#a #b`), as Logseq reads them."""
    out: list[str] = []
    for item in _split_flow(value):
        refs = list(_LOGSEQ_REF.finditer(item))
        if refs and not _LOGSEQ_REF.sub("", item).strip():
            out += [(r.group(1) or r.group(2)).strip() for r in refs]
        else:
            out.append(_LOGSEQ_REF.sub(lambda r: r.group(1) or r.group(2), item).strip())
    return [v for v in out if v]


def _one(value: object) -> str | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, str | int | float) and str(value).strip():
        return str(value).strip()[:FIELD_CHARS]
    return None


def _many(value: object, split: str) -> list[str]:
    """A field's values: a list, or one string cut by `split` (tags may be `a, b` or
    `a b`; aliases `a, b`)."""
    if isinstance(value, str):
        value = [v for v in re.split(split, value) if v.strip()]
    if not isinstance(value, list):
        return []
    return [str(v).strip()[:FIELD_CHARS] for v in value[:TAGS_MAX]
            if isinstance(v, str | int | float) and str(v).strip()]


def _unique(values: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for v in values:
        seen.setdefault(v.casefold(), v)
    return list(seen.values())


def _clean(value: str | None) -> str | None:
    value = (value or "").strip()
    return value[:FIELD_CHARS] or None


def _blank_code(body: str) -> str:
    """`body` with its fenced blocks and inline code spans as spaces (lines kept)."""
    out: list[str] = []
    pos = 0
    while True:
        m = _FENCE.search(body, pos)
        if m is None:
            break
        close = _CLOSE[m.group(1)].search(body, m.end())
        end = len(body) if close is None else body.find("\n", close.end())
        end = len(body) if end < 0 else end
        out += [_INLINE_CODE.sub(_blank, body[pos:m.start()]),
                "\n".join(" " * len(line) for line in body[m.start():end].split("\n"))]
        pos = end
    out.append(_INLINE_CODE.sub(_blank, body[pos:]))
    return "".join(out)


def _blank(m: re.Match[str]) -> str:
    """A match's text as spaces, its line ends kept (so offsets and lines stay)."""
    text = m.group()
    return re.sub(r"[^\n]", " ", text) if "\n" in text else " " * len(text)


def link_key(target: str) -> str:
    """What a link target is compared by: lower case, `/` separators, no `.md`."""
    key = target.strip().replace("\\", "/").strip("/").lower()
    for suffix in MARKDOWN:
        if key.endswith(suffix):
            return key[:-len(suffix)]
    return key


def name_key(relpath: str) -> str:
    """The name a file (or a link target) is linked by: its last name, lower case,
    without `.md` for a note."""
    return link_key(relpath).rpartition("/")[2]


# Logseq writes page `a/b` (a namespace) to the file `a___b.md` (older graphs: `a%2Fb.md`).
_NAMESPACE = ("___", "%2f")


def _unnamespaced(key: str) -> str:
    """`pages/a___b` -> `pages/a/b`: the page names Logseq's file names stand for."""
    folder, _, name = key.rpartition("/")
    for mark in _NAMESPACE:
        name = name.replace(mark, "/")
    return f"{folder}/{name}" if folder else name


def link_names(key: str) -> list[str]:
    """The names (`notes.name`) of the files a link `key` may name: its last name, and for
    a key with folders the file names Logseq gives that namespaced page."""
    names = [name_key(key)]
    if "/" in key:
        names += [key.replace("/", mark) for mark in _NAMESPACE]
    return names


def names_linking(name: str) -> list[str]:
    """The names (`links.name`) of the links that may name a file named `name`."""
    page = _unnamespaced(name).rpartition("/")[2]
    return [name] if page == name else [name, page]


def split_tags(query: str) -> tuple[str, list[str]]:
    """A query's `#tags` (whole words) apart from its other words: ("rest", [tags]).
    Without a pattern: `loom search` starts without compiling this module's."""
    tags: list[str] = []
    rest: list[str] = []
    for word in query.split():
        name = word[1:]
        if (word[:1] == "#" and name and all(c.isalnum() or c in "_/-" for c in name)
                and not name.replace("/", "").replace("-", "").replace("_", "").isdigit()):
            tags.append(name.strip("/").lower())
        else:
            rest.append(word)
    return (" ".join(rest) if tags else query), tags


def best_link(key: str, candidates: Iterable[tuple[int, str, object]],
              home: object) -> int | None:
    """Of the files whose name is a link's (`candidates`: file id, display path, vault),
    the one `[[key]]` names from a note in vault `home`: a key with folders must end the
    path; one in the note's own vault first, as Obsidian resolves it there (the shortest
    path, then the first in path order); else, only when every candidate lies in one
    other vault, that vault's (several vaults holding the name: ambiguous, None)."""
    best: dict[object, tuple[int, str, int]] = {}
    for fid, shown, vault in candidates:
        bare = _unnamespaced(link_key(shown))
        if "/" in key and not (bare == key or bare.endswith("/" + key)):
            continue
        rank = (len(shown), shown, fid)
        if vault not in best or rank < best[vault]:
            best[vault] = rank
    if home in best:
        return best[home][2]
    return next(iter(best.values()))[2] if len(best) == 1 else None
