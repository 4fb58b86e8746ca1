"""`loom eval`: how well loom finds the answers to a user's own questions in their folder.

A questions file (TOML) lists entries `[[q]]`, each a question (`q`), the file(s) that
answer it (`targets`, as `loom files` shows them; any one counts) and optionally a phrase
the answer holds (`answer`), a language (`lang`) and a free label (`kind`). For each mode
(bm25, semantic, hybrid) every question is searched as `loom search` would, and ask's
context is built as `loom ask --show-context` builds it (no LLM call):

- recall@1/5/10: the share of questions with a target among the first 1, 5, 10 files;
- MRR: the mean of 1/rank of the first target (0 past rank 10);
- ask_file: the share for which ask would send a target file; ask_phrase: the share,
  among questions with a phrase, for which the part of a target file ask sends holds it;
- the same per language (`lang`) and per `kind` when a file holds more than one;
- misses: the questions without a target in the first 5, with the rank it got (None past
  RANK_DEPTH).

With `answers`, the configured LLM answers each question twice (plain ask and the agent)
and each answer is checked for the phrase and for a citation of a target file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomcli.errors import LoomError, QueryError

if TYPE_CHECKING:
    from loomcli.operations import Corpus
    from loomcli.store.seam import IndexStore as Store

MODES = ("bm25", "semantic", "hybrid")
RANK_DEPTH = 50  # ranks are looked for this far; a target further down is "not found"
RECALL_AT = (1, 5, 10)
MRR_DEPTH = 10  # MRR counts a target ranked past this as 0 (as docs/benchmarks.md's MRR@10)
MISS_RANK = 5  # a question whose target is not in the first 5 is a miss
QUESTIONS_MAX = 5000  # a bound on the work one file can ask for
TEXT_MAX = 2000  # the longest question, phrase or path accepted
HINT = "see docs/reference.md, 'loom eval': [[q]] entries with q, targets, answer"


@dataclass
class Question:
    q: str
    targets: list[str]
    answer: str | None = None
    lang: str | None = None
    kind: str | None = None


@dataclass
class Outcome:
    """One question in one mode."""

    rank: int | None  # of the first target among the ranked files; None: not in RANK_DEPTH
    sent: bool  # ask would send a target file
    phrase_sent: bool | None  # ... and the part it sends holds the phrase (None: no phrase)


@dataclass
class Scores:
    questions: int
    recall: dict[int, float]
    mrr: float
    ask_file: float
    ask_phrase: float | None  # None: no question has a phrase

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"questions": self.questions}
        out.update({f"recall_{k}": v for k, v in self.recall.items()})
        out.update({"mrr": self.mrr, "ask_file": self.ask_file, "ask_phrase": self.ask_phrase})
        return out


@dataclass
class ModeReport:
    mode: str
    outcomes: list[Outcome]
    scores: Scores
    by_lang: dict[str, Scores]
    by_kind: dict[str, Scores]

    def misses(self, questions: list[Question]) -> list[tuple[int, Question, Outcome]]:
        return [(i, q, o) for i, (q, o) in enumerate(zip(questions, self.outcomes, strict=True))
                if o.rank is None or o.rank > MISS_RANK]

    def to_dict(self, questions: list[Question]) -> dict[str, Any]:
        return {**self.scores.to_dict(),
                "by_lang": {k: v.to_dict() for k, v in self.by_lang.items()},
                "by_kind": {k: v.to_dict() for k, v in self.by_kind.items()},
                "misses": [{"n": i + 1, "q": q.q, "lang": q.lang, "targets": q.targets,
                            "rank": o.rank, "sent": o.sent}
                           for i, q, o in self.misses(questions)]}


@dataclass
class AnswerCheck:
    """One LLM answer: whether it holds the phrase and cites a target (None: it failed)."""

    phrase: bool | None
    cites: bool
    error: str | None = None


@dataclass
class AnswersReport:
    mode: str
    plain: list[AnswerCheck]
    agent: list[AnswerCheck]

    @staticmethod
    def _shares(checks: list[AnswerCheck]) -> dict[str, Any]:
        with_phrase = [c for c in checks if c.phrase is not None]
        return {"questions": len(checks),
                "phrase": _share(sum(bool(c.phrase) for c in with_phrase), len(with_phrase))
                if with_phrase else None,
                "cites": _share(sum(c.cites for c in checks), len(checks)),
                "errors": sum(c.error is not None for c in checks)}

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "plain": self._shares(self.plain),
                "agent": self._shares(self.agent)}


@dataclass
class Report:
    path: str
    questions: list[Question]
    modes: list[ModeReport]
    unavailable: dict[str, str] = field(default_factory=dict)  # mode → why
    answers: AnswersReport | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        langs: dict[str, int] = {}
        for q in self.questions:
            langs[q.lang or ""] = langs.get(q.lang or "", 0) + 1
        return {"file": self.path, "questions": len(self.questions), "languages": langs,
                "modes": {m.mode: m.to_dict(self.questions) for m in self.modes},
                "unavailable": self.unavailable,
                "answers": self.answers.to_dict() if self.answers else None,
                "warnings": self.warnings}


# -- the questions file ----------------------------------------------------------------------

def load(path: Path) -> list[Question]:
    """The questions of a TOML file, checked: a bad file is one clear error."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise QueryError(f"{path}: no such file", "give the path of a questions file "
                         "(TOML with [[q]] entries)") from None
    except OSError as exc:
        raise QueryError(f"{path}: cannot be read ({exc.strerror})",
                         "check the path and its permissions") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise QueryError(f"{path}: not UTF-8 text", "save the questions as UTF-8 TOML"
                         ) from None
    except tomllib.TOMLDecodeError as exc:
        raise QueryError(f"{path}: not valid TOML ({exc})", HINT) from None
    entries = data.get("q")
    if not isinstance(entries, list) or not entries:
        raise QueryError(f"{path}: no questions ([[q]] entries) found", HINT)
    if len(entries) > QUESTIONS_MAX:
        raise QueryError(f"{path}: {len(entries):,} questions, more than {QUESTIONS_MAX:,}",
                         "split the file")
    return [_question(path, n, e) for n, e in enumerate(entries, 1)]


def _question(path: Path, n: int, entry: Any) -> Question:
    where = f"{path}: question {n}"
    if not isinstance(entry, dict):
        raise QueryError(f"{where} is not a table", HINT)
    q = entry.get("q")
    if not isinstance(q, str) or not q.strip() or len(q) > TEXT_MAX:
        raise QueryError(f"{where} has no question text (q = \"...\")", HINT)
    targets = entry.get("targets", entry.get("target"))
    if isinstance(targets, str):
        targets = [targets]
    if (not isinstance(targets, list) or not targets
            or not all(isinstance(t, str) and t.strip() and len(t) <= TEXT_MAX
                       for t in targets)):
        raise QueryError(f"{where} names no target file (targets = [\"path\"])", HINT)
    texts = {}
    for key in ("answer", "lang", "kind"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > TEXT_MAX):
            raise QueryError(f"{where}: {key} must be a string", HINT)
        texts[key] = value.strip() if isinstance(value, str) and value.strip() else None
    return Question(q.strip(), [t.strip() for t in targets], **texts)


def resolve_targets(store: Store, path: Path, questions: list[Question]
                    ) -> list[dict[str, int]]:
    """Each question's targets as {display path: file id}. A target is named as `loom
    files` shows it, or by its root's name and its path inside (the first root's paths
    are shown without its name)."""
    by_name = {r.name: r for r in store.roots()}
    out = []
    for n, q in enumerate(questions, 1):
        found: dict[str, int] = {}
        for target in q.targets:
            row = None
            try:
                row = store.resolve(target)
            except LoomError:
                head, _, rest = target.partition("/")
                root = by_name.get(head)
                if root is not None and not root.prefix and rest:
                    try:
                        row = store.resolve(rest)
                    except LoomError:
                        row = None
            if row is None:
                raise QueryError(f"{path}: question {n} names {target}, which is not in the "
                                 "index", "fix the path (loom files lists them) or scan the "
                                 "folder that holds it")
            found[store.display_path(row.root_id, row.relpath)] = row.id
        out.append(found)
    return out


# -- measuring --------------------------------------------------------------------------------

def _share(n: int, total: int) -> float:
    return round(n / total, 4) if total else 0.0


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def holds(text: str, phrase: str) -> bool:
    """Whether `text` holds `phrase`, ignoring case and how white space runs."""
    return _plain(phrase) in _plain(text)


def scores(questions: list[Question], outcomes: list[Outcome]) -> Scores:
    n = len(outcomes)
    recall = {k: _share(sum(o.rank is not None and o.rank <= k for o in outcomes), n)
              for k in RECALL_AT}
    mrr = round(sum(1 / o.rank for o in outcomes if o.rank is not None and o.rank <= MRR_DEPTH)
                / n, 4) if n else 0.0
    phrased = [o for o in outcomes if o.phrase_sent is not None]
    return Scores(n, recall, mrr, _share(sum(o.sent for o in outcomes), n),
                  _share(sum(bool(o.phrase_sent) for o in phrased), len(phrased))
                  if phrased else None)


def available(corpus: Corpus, mode: str) -> str | None:
    """Why `mode` cannot be measured on this index (None: it can)."""
    from loomcli import embeddings

    if mode == "bm25":
        return None
    if not embeddings.settings(corpus.config).enabled:
        return ("embeddings are off (loom config set embeddings.enabled true, then "
                "loom scan)")
    vectors = corpus.status().counts.get("vectors") or {}
    if not vectors.get("files"):
        return "no file has vectors yet (run loom scan)"
    return None


def pending(corpus: Corpus) -> int:
    """How many files still lack the configured model's vectors."""
    return int((corpus.status().counts.get("vectors") or {}).get("pending") or 0)


def measure(corpus: Corpus, questions: list[Question], targets: list[dict[str, int]],
            mode: str, on_question: Callable[[str, int], None] | None = None) -> ModeReport:
    """Every question searched and its ask context built in `mode`."""
    outcomes = []
    for i, (q, wanted) in enumerate(zip(questions, targets, strict=True)):
        if on_question:
            on_question(mode, i)
        result = corpus.search(q.q, limit=RANK_DEPTH, mode=mode)
        if result.warnings:  # meaning failed: BM25's ranks would be reported as mode's
            raise QueryError(f"{mode} search fell back to BM25: {result.warnings[0]}",
                             "fix the embeddings, or measure with --mode bm25")
        rank = next((r for r, h in enumerate(result.hits, 1) if h.path in wanted), None)
        prompt = corpus.prompt(q.q, mode=mode)
        sent = [u for u in (prompt.used if prompt else []) if u.path in wanted]
        phrase = None
        if q.answer is not None:
            phrase = any(holds(" ".join(text for _, text in u.pieces), q.answer)
                         for u in sent)
        outcomes.append(Outcome(rank, bool(sent), phrase))
    return ModeReport(mode, outcomes, scores(questions, outcomes),
                      _grouped(questions, outcomes, "lang"),
                      _grouped(questions, outcomes, "kind"))


def _grouped(questions: list[Question], outcomes: list[Outcome], key: str
             ) -> dict[str, Scores]:
    """The scores of each language (or kind) when the file holds more than one."""
    values = sorted({getattr(q, key) or "" for q in questions})
    if len(values) < 2:
        return {}
    out = {}
    for value in values:
        pairs = [(q, o) for q, o in zip(questions, outcomes, strict=True)
                 if (getattr(q, key) or "") == value]
        out[value or "?"] = scores([q for q, _ in pairs], [o for _, o in pairs])
    return out


def check_answers(corpus: Corpus, questions: list[Question], targets: list[dict[str, int]],
                  mode: str,
                  on_question: Callable[[str, int], None] | None = None) -> AnswersReport:
    """The configured LLM asked every question, plainly and as the agent; nothing kept."""
    from loomcli import providers

    provider = providers.from_config(corpus.config)  # no LLM configured: its error, now
    plain: list[AnswerCheck] = []
    agent: list[AnswerCheck] = []
    for i, (q, wanted) in enumerate(zip(questions, targets, strict=True)):
        for label, agent_on, checks in (("plain", False, plain), ("agent", True, agent)):
            if on_question:
                on_question(label, i)
            try:
                result = corpus.ask(q.q, provider=provider, mode=mode, agent=agent_on,
                                    keep=False)
            except LoomError as exc:
                checks.append(AnswerCheck(None if q.answer is None else False, False,
                                          str(exc)))
                continue
            checks.append(AnswerCheck(
                None if q.answer is None else holds(result.answer, q.answer),
                any(c in wanted for c in result.citations)))
    return AnswersReport(mode, plain, agent)


def evaluate(corpus: Corpus, path: Path, mode: str | None = None, answers: bool = False,
             on_question: Callable[[str, int], None] | None = None) -> Report:
    """The report for the questions in `path`: every available mode, or only `mode`."""
    questions = load(path)
    if mode is not None and mode not in (*MODES, "auto"):
        raise QueryError(f"mode must be one of auto, {', '.join(MODES)}, got {mode!r}")
    from loomcli import embeddings

    auto = "hybrid" if embeddings.settings(corpus.config).enabled else "bm25"
    chosen = auto if mode == "auto" else mode
    with corpus.store() as store:
        targets = resolve_targets(store, path, questions)
    report = Report(str(path), questions, [])
    for m in MODES if chosen is None else (chosen,):
        why = available(corpus, m)
        if why is not None:
            if chosen is not None:
                raise QueryError(f"{m} cannot be measured: {why.split(' (')[0]}",
                                 why[why.find("(") + 1:-1] if "(" in why else None)
            report.unavailable[m] = why
            continue
        if m != "bm25" and (left := pending(corpus)) and not report.warnings:
            report.warnings.append(f"{left:,} files still lack vectors: semantic and "
                                   "hybrid figures rank the others by meaning (loom scan "
                                   "makes them)")
        report.modes.append(measure(corpus, questions, targets, m, on_question))
    if answers:
        report.answers = check_answers(corpus, questions, targets, chosen or auto,
                                       on_question)
    return report


# -- the text report ---------------------------------------------------------------------------

def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.2f}"


def _row(label: str, s: Scores) -> str:
    return (f"{label:<12} {s.questions:>4}  {_fmt(s.recall[1])}  {_fmt(s.recall[5])}  "
            f"{_fmt(s.recall[10])}  {_fmt(s.mrr)}  {_fmt(s.ask_file):>8}  "
            f"{_fmt(s.ask_phrase):>10}")


def render(report: Report) -> str:
    """The report as `loom eval` prints it."""
    langs = report.to_dict()["languages"]
    shown = ", ".join(f"{n} {k}" for k, n in langs.items() if k)
    lines = [f"{len(report.questions)} questions{f' ({shown})' if shown else ''} from "
             f"{report.path}", "",
             f"{'mode':<12} {'n':>4}  R@1   R@5   R@10  MRR   ask:file  ask:phrase"]
    for m in report.modes:
        lines.append(_row(m.mode, m.scores))
        lines += [_row(f"  {lang}", s) for lang, s in m.by_lang.items()]
        lines += [_row(f"  {kind}", s) for kind, s in m.by_kind.items()]
    lines += [f"{m:<12} not measured: {why}" for m, why in report.unavailable.items()]
    for m in report.modes:
        misses = m.misses(report.questions)
        if not misses:
            continue
        lines += ["", f"misses in {m.mode} (no target in the first {MISS_RANK}):"]
        for i, q, o in misses:
            rank = f"#{o.rank}" if o.rank else f"not in {RANK_DEPTH}"
            lines.append(f"  {i + 1:>3}. [{rank}{', sent' if o.sent else ''}] {q.q}  "
                         f"→ {', '.join(q.targets)}")
    if report.answers:
        a = report.answers.to_dict()
        lines += ["", f"answers ({a['mode']} retrieval): holds the phrase, cites a target"]
        for label in ("plain", "agent"):
            s = a[label]
            errors = f", {s['errors']} failed" if s["errors"] else ""
            lines.append(f"  {label:<6} {_fmt(s['phrase'])}  {_fmt(s['cites'])}{errors}")
    return "\n".join(lines)
