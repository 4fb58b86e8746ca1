"""Excerpts are pure: strings in, strings out."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loomcli.search.excerpt import MARK, excerpt, terms

FILLER = "".join(f"Line {i} talks about nothing in particular, weaving and looms.\n"
                 for i in range(400))


def doc_with(answer: str, at: int) -> str:
    return FILLER[:at] + "\n" + answer + "\n" + FILLER[at:]


def test_short_text_is_sent_whole():
    e = excerpt("short note", "anything", 100)
    assert (e.text, e.cut, e.spans) == ("short note", False, [(0, 10)])


def test_deep_answer_is_found_with_head_and_marks():
    answer = "The madder vat must stay below sixty degrees or the red turns brown."
    text = doc_with(answer, 15_000)
    e = excerpt(text, "What temperature for the madder vat?", 3000, head_chars=1200)
    assert answer in e.text and e.cut and len(e.text) <= 3000
    head_end = e.spans[0][1]
    assert head_end <= 3000 // 4 and text.startswith(e.text[:head_end])
    assert e.text.count("[...]") == 2 and MARK in e.text


def test_no_matching_term_sends_the_head_only():
    e = excerpt(FILLER, "quantum chromodynamics", 2000)
    assert e.text.startswith(FILLER[:1000]) and e.text.endswith("[...]")
    assert e.spans == [(0, e.spans[0][1])] and len(e.text) <= 2000


def test_stems_cross_inflections_and_rare_terms_win():
    text = FILLER + "\nConfiguring the tension gauge: set GAUGE_MAX.\n" + FILLER
    e = excerpt(text, "how do I configure the gauge for weaving?", 2500)
    assert "Configuring the tension gauge" in e.text  # "weaving" is everywhere: weighs little


def test_two_windows_when_terms_sit_in_two_places():
    text = (FILLER[:8000] + "\nThe warp beam is oiled monthly.\n" + FILLER[8000:20000]
            + "\nThe heddle frames are replaced yearly.\n" + FILLER[20000:])
    e = excerpt(text, "warp beam oiled heddle frames replaced", 4000)
    assert "warp beam is oiled" in e.text and "heddle frames are replaced" in e.text
    assert len(e.spans) == 3


def test_cuts_land_on_line_ends():
    text = doc_with("ANSWER LINE with the keyword zircon inside it.", 12_000)
    e = excerpt(text, "zircon", 3000)
    for start, end in e.spans:
        assert start == 0 or text[start - 1] == "\n"
        assert end == len(text) or text[end - 1] == "\n"


def test_terms_drop_function_words_and_repeat():
    assert terms("What is the Tension of the tension gauge?") == ["tensio", "gauge"]
    assert terms("Où est la température du bain?") == ["tempér", "bain"]  # 2 letters: out


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=0, max_size=6000), question=st.text(max_size=60),
       budget=st.integers(min_value=40, max_value=5000),
       head=st.integers(min_value=0, max_value=3000))
def test_never_exceeds_the_budget_and_spans_are_real(text, question, budget, head):
    e = excerpt(text, question, budget, head)
    assert len(e.text) <= budget
    for start, end in e.spans:
        assert 0 <= start <= end <= len(text)
        assert text[start:end] in e.text
    if e.cut and len(e.spans) > 1:  # head + window(s): the head is at most a quarter
        assert e.spans[0] == (0, e.spans[0][1]) and e.spans[0][1] <= min(head, budget // 4)


def test_identifiers_match_their_parts():
    from loomcli.search.excerpt import _occurrences, terms

    assert terms("what does panic_on_oops do to maxUserWatches on ext4?") == [
        "panic_", "panic", "oops", "maxuse", "max", "user", "watche", "ext4", "ext"]
    text = "kernel.panic_on_oops=1\nfs.inotify.max_user_watches\nuse maxUserWatches\n"
    occ = _occurrences(text.lower(), ["oops", "watche", "user"], text)
    assert {stem: [text[p:p + 6] for p in found] for stem, found in occ.items()} == {
        "oops": ["oops=1"], "watche": ["watche", "Watche"], "user": ["user_w", "UserWa"]}
    long = "filler line\n" * 400
    question = "how many user watches?"
    text = long + "fs.inotify.max_user_watches = 8192\n" + long
    assert "max_user_watches = 8192" in excerpt(text, question, 1500, 200).text


def _occurrences_by_definition(text: str, stems: list[str]) -> dict[str, list[int]]:
    """Every place a stem starts a word: after a non-alphanumeric (or `_`), or where a
    lower-case ASCII letter meets an upper-case one."""
    lower = text.lower()
    found: dict[str, list[int]] = {}
    for p in range(len(lower)):
        if (p == 0 or not lower[p - 1].isalnum()
                or ("a" <= text[p - 1] <= "z" and "A" <= text[p] <= "Z")):
            for stem in stems:
                if lower.startswith(stem, p):
                    found.setdefault(stem, []).append(p)
    return found


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abAB_ 1é.xX\n", max_size=60),
       st.lists(st.text(alphabet="ab_1éx", min_size=1, max_size=3), min_size=1, max_size=4,
                unique=True))
def test_occurrences_are_every_word_start(text, stems):
    from loomcli.search.excerpt import _occurrences

    assert _occurrences(text.lower(), stems, text) == _occurrences_by_definition(text, stems)


# -- a larger budget never sends less -------------------------------------------------------

def covered(spans: list[tuple[int, int]]) -> set[int]:
    return {i for a, b in spans for i in range(a, b)}


WORDS = ["loom", "warp", "weft", "heddle", "shuttle", "madder", "indigo", "vat", "beam",
         "tension", "gauge", "reed", "the", "of", "and", "panic_on_oops", "maxUserWatches"]


@st.composite
def documents(draw: st.DrawFn) -> str:
    """Filler lines with the question's words on a few of them, in one place or several
    (or on most lines). Hypothesis draws the shape (how many lines, how rare the words)
    and a seed; the words come from a Random on that seed: drawing each of a document's
    thousands of words through Hypothesis took three quarters of this file's time, for
    the same documents (a failure is still replayed exactly, only shrunk less)."""
    import random

    filler = ["lorem", "ipsum", "dolor", "sit", "amet", "the", "of", "and"]
    rare = draw(st.integers(1, 60))  # one line in `rare` holds question words
    count = draw(st.integers(5, 400))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    lines = []
    for n in range(count):
        width = rng.randint(2, 14)
        pool = WORDS if rng.randint(0, rare) == 0 else filler
        lines.append(" ".join(rng.choices(pool, k=width)))
        if n and rng.randint(0, 30) == 0:  # now and then a long paragraph line
            lines[-1] += " " + " ".join(filler * rng.randint(5, 40))
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(text=documents(),
       question=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
       budgets=st.lists(st.integers(min_value=40, max_value=9000), min_size=2, max_size=4),
       head=st.integers(min_value=0, max_value=1500),
       front=st.integers(min_value=0, max_value=400),
       near=st.lists(st.tuples(st.integers(0, 20_000), st.integers(50, 1500),
                               st.floats(0, 1)), max_size=6))
def test_a_larger_budget_sends_everything_a_smaller_one_sent(text, question, budgets, head,
                                                             front, near):
    """Per file and question, at any budgets b1 < b2, what b1 sends is inside what b2
    sends."""
    passages = [(a, a + n, s) for a, n, s in near]
    front = min(front, len(text))
    sent = [excerpt(text, question, b, head, passages, start=front)
            for b in sorted(budgets)]
    for smaller, larger in zip(sent, sent[1:], strict=False):
        assert covered(smaller.spans) <= covered(larger.spans)
    for b, part in zip(sorted(budgets), sent, strict=True):
        assert len(part.text) <= b
        for a, z in part.spans:
            assert front <= a <= z <= len(text) and text[a:z] in part.text


def test_one_excerpter_asked_at_many_budgets_is_the_same_as_one_call_each():
    from loomcli.search.excerpt import Excerpter

    text = FILLER[:9000] + "\nThe madder vat must stay below sixty degrees.\n" + FILLER[9000:]
    cutter = Excerpter(text, "madder vat degrees", 1200)
    for budget in (100, 700, 2500, 6000, 9000, 40_000):
        alone = excerpt(text, "madder vat degrees", budget, 1200)
        assert (cutter.at(budget).text, cutter.at(budget).spans) == (alone.text, alone.spans)


KERNEL_DOCS = Path("/usr/share/doc/linux-doc-6.1/Documentation")


@pytest.mark.parametrize(("path", "question", "answer", "budget"), [
    # tests/bench/bench_window.py, questions 8 and 9: sent at a 4k window (these excerpt
    # budgets), lost at 8k when a larger budget chose its windows anew.
    ("networking/ip-sysctl.rst.gz",
     "Let a normal user's program listen on port 80 without being root",
     "ip_unprivileged_port_start", 1752),
    ("admin-guide/sysctl/kernel.rst.gz",
     "Turn off the random placement of program memory so debugging is repeatable",
     "randomize_va_space", 1785),
])
def test_the_answers_a_4k_window_sent_stay_at_every_larger_budget(path, question, answer,
                                                                  budget):
    source = KERNEL_DOCS / path
    if not source.exists():
        pytest.skip(f"{source} is not installed (Debian's linux-doc-6.1)")
    text = gzip.decompress(source.read_bytes()).decode()
    assert answer in excerpt(text, question, budget).text
    for larger in range(budget + 100, 8000, 100):
        assert answer in excerpt(text, question, larger).text, larger
