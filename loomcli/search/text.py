"""loom's text rules, once: words, stems, function words, acronyms, query parsing and
snippets. Pure (no I/O): the store fills its indexes with them, the search layer parses
queries and marks snippets with them, excerpts score windows with them, and the page asks
for them over the API (POST /terms) instead of keeping a copy in JavaScript.

A backend's own query syntax (FTS5's MATCH, PostgreSQL's tsquery) is built by the backend
from a parsed `Query`; nothing here knows a query language.
"""

from __future__ import annotations

import re

from loomcli.records import Record
from loomcli.search import scripts

WORD = re.compile(r"\w+")  # a word, as every rule here splits text
STEM_CHARS = 6  # crude stemming: a word matches words that start with its first 6 letters
SNIPPET_START, SNIPPET_END = "\x02", "\x03"  # highlight markers, rendered by the edges
SNIPPET_TOKENS = 16
SNIPPET_SCAN_BYTES = 1 << 20  # a snippet is looked for in this much of a file's text
PREFIX_MIN_CHARS = 3  # a shorter prefix would expand to too many of the index's words
QUERY_TERMS_MAX = 64  # words of a query that count; the rest are dropped
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


# Where an identifier splits into parts: underscores, letter-digit edges, camelCase.
# Compiled at first use (scripts.Lazy), like IDENTIFIER: grep never needs them.
_SPLIT = scripts.Lazy(r"_+|(?<=\D)(?=\d)|(?<=\d)(?=\D)|(?<=[a-z])(?=[A-Z])")
# Function words of a few languages: they say nothing about where an answer is.
_FUNCTION_WORDS = """
a about above after again all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from
further had has have having he her here hers him his how i if in into is it its itself
just me more most my no nor not now of off on once only or other our out over own same
she should so some such than that the their them then there these they this those
through to too under until up very was we were what when where which while who whom why
will with would you your yours tell explain describe show give list say says said use
used using get gets le la les un une des du de et est en que qui dans pour pas sur au
der die das und ist ein eine nicht mit von zu den im el los las y es por con para se
il lo gli di che non una uno per con mi ti ci si del della dello dei delle nel nella
negli al alla ai agli dal dalla su sul sulla come cosa dove quando quale quali quanto
quanta perché posso puoi può faccio fare fa sono essere ho hai ha questo questa quello
quella ogni anche più ma se tra fra invece o e è
"""
STOPWORDS = frozenset(_FUNCTION_WORDS.split())


# Function words that tell a language apart (each list: frequent, rarely another's).
_LANGUAGE_WORDS = {
    "en": "the and of to is in that it for how what with do does can my not are this on "
          "why when which from be by",
    "it": "il lo la gli le di che non per come una uno del della dei delle nel nella "
          "sono è cosa quando perché posso faccio si mi ci anche più degli alla",
    "fr": "le les des est une dans que qui pour pas sur au avec ce cette je comment "
          "sont du ne",
    "de": "der die das und ist nicht mit von zu den ein eine ich wie was auf für sich "
          "auch",
    "es": "el los las y es por con para una que del como se qué cómo está pero al "
          "muy",
}
_LANGUAGE_OF: dict[str, list[str]] = {}
for _lang, _words in _LANGUAGE_WORDS.items():
    for _w in _words.split():
        _LANGUAGE_OF.setdefault(_w, []).append(_lang)
# Each script's characters, as ranges told without patterns: compiling these classes
# took Python's `re` ~4 ms at each start (it marks every character of a range).
_SCRIPTS = (("ja", "\u3040", "\u30ff"), ("ko", "\uac00", "\ud7af"), ("zh", "\u4e00", "\u9fff"),
            ("th", "\u0e00", "\u0e7f"), ("ru", "\u0400", "\u04ff"))


def language(text: str) -> str | None:
    """A cheap guess: the script (kana: Japanese, Hangul: Korean, Han: Chinese …), else
    the language whose function words the text uses most; None when unsure."""
    if not text.isascii():
        chars = [c for c in text if c >= "\u0400"]
        for name, first, last in _SCRIPTS:
            if sum(first <= c <= last for c in chars) >= 2:
                return name
    counts: dict[str, float] = {}
    for word in WORD.findall(text.lower()):
        for lang in _LANGUAGE_OF.get(word, ()):
            counts[lang] = counts.get(lang, 0.0) + 1.0 / len(_LANGUAGE_OF[word])
    if not counts:
        return None
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] >= 1.0 else None


# Identifiers and settings: a word with an underscore, a digit, an inner dot, or a
# lower-to-upper case change (panic_on_oops, ext4, vm.swappiness, maxUserWatches).
IDENTIFIERS_MAX = 8
IDENTIFIER = scripts.Lazy(r"\b(?=\w*[_\d]|\w+\.\w|[a-z]+[A-Z])[\w.]{4,}\b")


def identifiers(query: str) -> list[str]:
    """The query's identifiers, each once, at most IDENTIFIERS_MAX (each costs a query)."""
    out: list[str] = []
    for m in IDENTIFIER.finditer(query):
        if m.group() not in out:
            out.append(m.group())
            if len(out) == IDENTIFIERS_MAX:
                break
    return out


def retrieval_query(question: str) -> str:
    """The question without its function words (what BM25 ranks a question by)."""
    words = [w for w in question.split() if w.lower().strip("?!.,;:()\"'") not in STOPWORDS]
    return " ".join(words) or question


def terms(question: str) -> list[str]:
    """The question's content words as lower-case stems, in order, without repeats. An
    identifier counts as its parts too: `panic_on_oops` → panic, oops; `maxUserWatches`
    → max, user, watches (dotted and path-like names are split as words already)."""
    out: list[str] = []
    for token in WORD.findall(question):
        parts = [token] + [p for p in _SPLIT.split(token) if len(p) >= 3 and p != token]
        for word in (p.lower() for p in parts):
            word = word.strip("_")
            if not word or word in STOPWORDS or (len(word) < 3 and not word.isdigit()):
                continue
            stem = word[:STEM_CHARS]
            if stem not in out:
                out.append(stem)
    return out


# Acronyms and product names kept as written (migration 011): Porter stemming made UPS
# "up", DNS "dn", iOS "io", macOS "maco". Each such word — two capitals or more (UPS,
# IRQ, AWS, 0xFF), or a capital after a small letter (iOS, macOS, eBay) — is indexed a
# second time in the `grams` column, case-folded with EXACT_MARK after it: Porter changes
# no word that ends in a digit, and the query's acronym (store.quote_fts) looks for that
# form only, so "UPS" finds UPS and not "up", "ups" or "upping".
EXACT_MARK = "0"
EXACT_CHARS = 40  # longer runs of letters are not words anyone types
EXACT_REPEATS = 20  # occurrences of one acronym counted in a text (bounded index growth)
ACRONYM = re.compile(r"(?<![A-Za-z0-9])(?:[a-z0-9]*[A-Z][a-z0-9]*[A-Z]|[a-z]+[A-Z])"
                     r"[A-Za-z0-9]*")
_CAPITAL = re.compile(r"[A-Z][A-Za-z0-9]*")
_SMALL = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def exact_form(word: str) -> str | None:
    """The token an acronym (a whole word, ASCII letters and digits) is indexed as
    apart, or None when `word` is not one."""
    if len(word) > EXACT_CHARS or not ACRONYM.fullmatch(word):
        return None
    return word.lower() + EXACT_MARK


def exact_words(text: str) -> str | None:
    """The acronyms of a text in their indexed form, each at most EXACT_REPEATS times;
    None when it has none. Found from their capitals (a word's first capital and the
    rest of the word, then the small letters before it): twice as fast as ACRONYM over
    the whole text (the evaluation corpus's 35 MB: 1.76 -> 0.91 s of CPU)."""
    counts: dict[str, int] = {}
    for m in _CAPITAL.finditer(text):
        start = m.start()
        while start and text[start - 1] in _SMALL:
            start -= 1
        word = text[start:m.end()]
        if len(word) <= EXACT_CHARS and ACRONYM.fullmatch(word):
            counts[word] = counts.get(word, 0) + 1
    if not counts:
        return None
    forms: dict[str, int] = {}
    for word, n in counts.items():
        form = word.lower() + EXACT_MARK
        forms[form] = min(EXACT_REPEATS, forms.get(form, 0) + n)
    return " ".join(" ".join([form] * n) for form, n in forms.items())


def words_apart(text: str) -> str | None:
    """What the `grams` column indexes of a text: its CJK and Thai runs as character
    pairs (scripts.py) and its acronyms as written; None when it has neither."""
    found = [g for g in (scripts.bigram_text(text), exact_words(text)) if g is not None]
    return "\n".join(found) if found else None


def utf8_len(text: str) -> int:
    """Bytes of `text` in UTF-8, without a copy when it is ASCII (most huge logs are)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def plain_snippet(snippet: str) -> str:
    """A snippet without its highlight markers."""
    return snippet.replace(SNIPPET_START, "").replace(SNIPPET_END, "")


_EDGES = "\"'.,;:!?()[]{}<>"


def acronym(word: str) -> str | None:
    """The form a query word that is an acronym (UPS, iOS, macOS; punctuation around it
    aside) is indexed as apart (EXACT_MARK), else None."""
    return exact_form(word.strip(_EDGES))


def shouted(words: list[str]) -> bool:
    """Whether a query is typed in capitals throughout (WHICH UPS DID I BUY): then its
    capitals say nothing about acronyms."""
    letters = [w for w in words if any(c.isalpha() for c in w)]
    return len(letters) >= 3 and all(w == w.upper() for w in letters)


_PHRASE = re.compile(r'"([^"]*)"')


def query_words(query: str) -> list[str]:
    """The words of a query as FTS5 will see them: split on white space (a `"quoted
    phrase"` stays one, without its quotes), those with a letter or digit, each once, at
    most QUERY_TERMS_MAX (a longer question keeps its first words: search cost must not
    grow with the length of what is pasted in)."""
    seen: dict[str, str] = {}
    clean = _CONTROL_CHARS.sub(" ", query)
    pieces: list[str] = []
    pos = 0
    for m in _PHRASE.finditer(clean):
        pieces += clean[pos:m.start()].split()
        phrase = " ".join(m.group(1).split())
        if phrase:
            pieces.append(phrase)
        pos = m.end()
    pieces += clean[pos:].split()
    for word in pieces:
        if re.search(r"\w", word) and word.casefold() not in seen:
            seen[word.casefold()] = word
            if len(seen) == QUERY_TERMS_MAX:
                break
    return list(seen.values())


class Query(Record):
    """A parsed query, what a store ranks by (each backend builds its own syntax from
    it; hashable, so it can key a cache): `words`, each a word or a phrase (its words
    joined by one space), at most QUERY_TERMS_MAX; `operator` AND (every word) or OR
    (any); `prefix`: the last word matches the words it starts (it ends the text as
    typed, has PREFIX_MIN_CHARS or more and ends in a letter or digit; never a CJK or
    Thai run); `exact`: an acronym (acronym()) matches only itself as written, unless
    the whole query is in capitals."""

    __slots__ = ("words", "operator", "prefix", "exact")

    def __init__(self, words: tuple[str, ...], operator: str = "AND", prefix: bool = False,
                 exact: bool = True) -> None:
        self.words = words
        self.operator = operator
        self.prefix = prefix
        self.exact = exact


def parse(query: str, operator: str = "AND", prefix: bool = False) -> Query:
    """A query as typed, parsed (see Query); `prefix`: the last word is being typed."""
    if operator not in ("AND", "OR"):
        raise ValueError(f"operator {operator!r}: AND or OR")
    words = tuple(query_words(query))
    last = words[-1] if words else ""
    typing = (prefix and bool(last) and not scripts.has_runs(last)
              and query.rstrip() == query and query.endswith(last)
              and len(last) >= PREFIX_MIN_CHARS and last[-1].isalnum())
    return Query(words, operator, typing, not shouted(list(words)))


def snippet_of(text: str, words: list[str], tokens: int = SNIPPET_TOKENS) -> str:
    return snippet_at(text, words, tokens)[0]


def snippet_at(text: str, words: list[str], tokens: int = SNIPPET_TOKENS) -> tuple[str, int]:
    """The snippet and the character of `text` it is about: the first query word, else
    where it starts (for a PDF's page). About `tokens` words around the first place a
    query word starts a word, the matching words marked; the text's start when none is
    found. Works on a bounded prefix of the text (SNIPPET_SCAN_BYTES), so a huge note
    costs no more than a small one. Words match by prefix (a crude stand-in for the
    index's Porter stemming); a run of CJK or Thai characters matches where it occurs,
    each of its characters counting a third of a word."""
    joined_words = " ".join(words)
    literal = sorted(set(scripts.runs(joined_words)), key=len, reverse=True)
    stems = sorted({w.casefold()[:STEM_CHARS] for w in WORD.findall(
        joined_words if not literal else scripts.RUN.sub(" ", joined_words))},
        key=len, reverse=True)
    found = None
    alternatives = [f"(?<!\\w)(?:{'|'.join(map(re.escape, stems))})"] if stems else []
    alternatives += [re.escape(r) for r in literal]
    if alternatives:
        rx = re.compile("|".join(alternatives), re.I)
        found = rx.search(text)
    lo = max(0, found.start() - 400) if found else 0
    hi = (found.start() + 2000) if found else 2000
    tokens_of = WORD if scripts.outside(text[lo:hi]) else _SNIPPET_TOKEN  # the same there
    spans = [(m.start(), m.end()) for m in tokens_of.finditer(text, lo, hi)]
    if not spans:
        return "", 0
    marked: list[tuple[int, int]] = [(m.start(), m.end()) for r in literal
                                     for m in re.finditer(re.escape(r), text[lo:hi])]
    marked = [(a + lo, b + lo) for a, b in marked]
    first = 0
    if found:
        first = next(i for i, (a, b) in enumerate(spans) if b > found.start())
        back = 0.0
        while first > 0 and back < tokens // 4:
            first -= 1
            back += _cost(text, spans[first])
    chosen, budget = [], 0.0
    for span in spans[first:]:
        if budget >= tokens:
            break
        chosen.append(span)
        budget += _cost(text, span)
    raw, prev = [], chosen[0][0]
    for a, b in chosen:
        word = text[a:b]
        hit = (bool(stems) and word.casefold().startswith(tuple(stems))) or any(
            x <= a and b <= y for x, y in marked)
        raw += [text[prev:a], f"{SNIPPET_START}{word}{SNIPPET_END}" if hit else word]
        prev = b
    joined = " ".join("".join(raw).split()).replace(SNIPPET_END + SNIPPET_START, "")
    if not scripts.outside(joined):
        joined = _CJK_SPACE.sub("", joined)  # a line break inside Chinese or Japanese text
    lead = "…" if chosen[0][0] > 0 else ""
    tail = "…" if chosen[-1][1] < len(text.rstrip()) else ""
    return lead + joined + tail, found.start() if found else chosen[0][0]


# A snippet's tokens: each CJK or Thai character, or a word of other letters.
_SNIPPET_TOKEN = scripts.Lazy(f"{scripts.CHAR.pattern}|[^\\W{scripts.RANGES}]+")


_HAN_KANA = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f"
_CJK_SPACE = scripts.Lazy(f"(?<=[{_HAN_KANA}]) (?=[\x02\x03]*[{_HAN_KANA}])")


def _cost(text: str, span: tuple[int, int]) -> float:
    return 1.0 if scripts.outside(text[span[0]]) else 1 / 3  # as CHAR.match(text, span[0])


# Logseq's metadata inside a note's body: block properties (`id:: 64f1…`,
# `collapsed:: true`, any `key:: value` line of a block) and block references
# (`((64f1…))`, a uuid naming a block elsewhere). Snippets and excerpts leave them out;
# the stored text keeps them (grep and get show the file as written).
NOTE_SUFFIXES = (".md", ".markdown")
_PROPERTY = scripts.Lazy(r"^[ \t]*(?:[-*+][ \t]+)?[A-Za-z][\w-]*::(?:[ \t].*)?$", re.M)
_BLOCK_REF = scripts.Lazy(r"\(\(\s*[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\s*\)\)")


def hide_metadata(text: str, path: str) -> str:
    """`text` of the file at `path` with a Markdown note's block properties and block
    references as spaces, each character one (offsets stay those of the text); any
    other text as it is."""
    if ("::" not in text and "((" not in text) or not path.lower().endswith(NOTE_SUFFIXES):
        return text
    if "::" in text:
        text = _PROPERTY.sub(_spaces, text)
    if "((" in text:
        text = _BLOCK_REF.sub(_spaces, text)
    return text


def squeeze_blank(text: str) -> str:
    """`text` without the lines hide_metadata left as spaces only."""
    return re.sub(r"(?m)^[ \t]+\n", "", text) if " \n" in text or "\t\n" in text else text


def _spaces(m: re.Match[str]) -> str:
    return " " * len(m.group())
