"""What the server counts: each API's own prompt count is read, an Ollama silent cut is
told apart from a prompt cache's lower count (warned once, sent again within what it
kept), and the ratio learned from the counts gives a model more room without overflow."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from loomcli import ask
from loomcli.ask import window
from loomcli.extract import Extracted
from loomcli.store import Store

from . import tokens
from .conftest import bm25_hits
from .llm_server import FakeLLM
from .test_window import QUESTION, configure, long_note, loom


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


@pytest.fixture
def notes(tmp_path, loom_home):
    root = tmp_path / "long"
    for i in range(6):
        (root / f"note-{i}.md").parent.mkdir(parents=True, exist_ok=True)
        (root / f"note-{i}.md").write_text(long_note(i), encoding="utf-8")
    proc = loom("scan", str(root))
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize("provider", ["ollama", "openai", "openai-whole", "anthropic"])
def test_each_api_s_own_prompt_count_is_read(notes, loom_home, llm, provider):
    llm.behaviour.cache_lowers = provider == "anthropic"  # counted apart, added back
    llm.behaviour.non_stream = provider == "openai-whole"
    name = provider.removesuffix("-whole")
    configure(loom_home, name, llm.url, context_tokens=8192)
    for _ in range(2):  # the second: its prefix is in Anthropic's cache
        proc = loom("ask", "--json", QUESTION)
        assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["context"]["server_prompt_tokens"] == tokens.count(llm.sent[-1]) > 0
    if name == "openai":
        assert llm.chats()[-1]["body"]["stream_options"] == {"include_usage": True}


def ollama_plan(llm, loom_home, **behaviour: object) -> None:
    llm.behaviour.window = llm.behaviour.model_length = 16384
    for k, v in behaviour.items():
        setattr(llm.behaviour, k, v)
    configure(loom_home, "ollama", llm.url)


@pytest.mark.parametrize("cut", [{"real_window": 4096},
                                 {"real_window": 8192, "cut_half": True}])
def test_an_ollama_silent_cut_is_warned_once_and_sent_again_within_it(notes, loom_home, llm,
                                                                      cut):
    ollama_plan(llm, loom_home, **cut)
    proc = loom("ask", "--json", QUESTION)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    first, second = llm.chats()
    assert first["body"]["options"]["num_ctx"] == 16384 and llm.kept[0] != llm.sent[0]
    assert llm.kept[1] == llm.sent[1]  # the second prompt fits what the server holds
    [warning] = [w for w in data["warnings"] if "cut the prompt silently" in w]
    assert f"evaluated only {llm.counts[0]:,}" in warning and "sent again" in warning
    assert "context_tokens" in warning
    assert data["context"]["server_prompt_tokens"] == tokens.count(llm.sent[1])


def test_a_streamed_answer_from_a_cut_prompt_stands_with_one_warning(notes, loom_home, llm):
    ollama_plan(llm, loom_home, real_window=4096)
    proc = loom("ask", QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert len(llm.chats()) == 1  # streamed: not asked twice
    assert proc.stderr.count("cut the prompt silently") == 1
    assert "this answer saw only the prompt's end" in proc.stderr


@pytest.mark.parametrize("ollama", [{}, {"cache_lowers": True}])
def test_an_uncut_prompt_is_never_reported_cut(notes, loom_home, llm, ollama):
    """An older Ollama counts only the tokens past its cached prefix: the same question
    again reports almost nothing, and that is no cut."""
    ollama_plan(llm, loom_home, **ollama)
    for question in (QUESTION, QUESTION, QUESTION + " Per thread?"):
        proc = loom("ask", "--json", question)
        assert proc.returncode == 0, proc.stderr
        assert "cut" not in proc.stderr
        assert not any("cut" in w for w in json.loads(proc.stdout).get("warnings", []))
    assert len(llm.chats()) == 3 and llm.kept == llm.sent
    if ollama:
        assert min(llm.counts) < 100  # the cache lowered the counts


class Model:
    """The provider fields the ratio is kept by."""

    def __init__(self, model: str) -> None:
        self.name, self.endpoint, self.model = "ollama", "http://127.0.0.1:1", model


def english_note(i: int) -> str:
    """A long note of English and Italian prose only (no Chinese paragraphs)."""
    return "\n\n".join(p for p in long_note(i).split("\n\n")
                         if not any("\u4e00" <= c <= "\u9fff" for c in p))


LONG_WORDS = ["documentation", "configuration", "implementation", "international",
              "understanding", "relationship", "establishment", "temperature", "measurement",
              "tensioning", "weaving", "heddle", "frame", "humidity", "threads", "evenly",
              "because", "otherwise", "selvedges", "puckering"]


def long_word_note(i: int) -> str:
    """English whose words the estimate over-counts (long, common words: one or two real
    tokens, three by the estimate)."""
    rng = random.Random(i)
    return "\n\n".join(" ".join(rng.choice(LONG_WORDS) for _ in range(60)).capitalize()
                       + ". Warp tension on the heddle frame." for _ in range(120))


NOTES = {"notes": long_note, "english": english_note, "long words": long_word_note}


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(seeds=st.lists(st.integers(0, 40), min_size=2, max_size=4, unique=True),
       size=st.sampled_from([2048, 4096, 8192, 16384]), top_k=st.integers(1, 5),
       kind=st.sampled_from(["notes", "english", "long words"]))
def test_the_learned_ratio_gives_more_room_and_never_overflows(tmp_path_factory, seeds, size,
                                                                top_k, kind):
    """With a real vocabulary (cl100k_base) counting as a server would, on English,
    Italian and Chinese notes: once the counts of three asks are learned, the same
    questions get more of the window, and no prompt goes over it."""
    store = Store.open(tmp_path_factory.mktemp("r") / "i.db", create=True)
    with store.transaction():
        root = store.ensure_root(tmp_path_factory.mktemp("n"))
        for i in seeds:
            store.add_file(root.id, f"n{i}.md", "note", 1, 1, bytes([i]),
                           Extracted(NOTES[kind](i), f"N{i}"))
    model = Model(f"m{size}-{top_k}-{kind}-{'-'.join(map(str, seeds))}")
    plan = window.plan("ollama", size, "test", top_k=top_k, file_budget_chars=8000,
                       max_answer_tokens=None)
    questions = [QUESTION, "warp tension humidity heddle?", "heddle frame warp?",
                 "What changes the warp tension?"]

    def sent(question: str, budget: window.Budget) -> tuple[int, int, bool]:
        hits = bm25_hits(store, question, top_k * 3, "OR")
        prompt = ask.build_prompt(store, question, hits, top_k=top_k, budget=8000,
                                  head_chars=1200, window=budget)
        if prompt is None:  # no file matches (the Chinese question, English notes)
            return 0, 0, False
        return (tokens.count(prompt.system + "\n" + prompt.user), prompt.prompt_tokens,
                any(a.reason in ("window", "no room") for a in prompt.account))

    try:
        before = [sent(q, plan) for q in questions]
        for (real, estimated, _) in [b for b in before if b[1]][:3]:
            window.observe(model, estimated, real + 20)  # + a chat template's tokens
        ratio = window.learned_ratio(model)
        after = [sent(q, plan.__class__(**{**plan.__dict__, "ratio": ratio}))
                 for q in questions]
    finally:
        store.close()
    assert ratio >= window.RATIO_FLOOR
    for real_after, _, _ in after:
        assert real_after + 20 <= plan.prompt_tokens  # never over the window
    if kind == "long words":
        assert ratio < 0.9
    if ratio <= 0.9 and any(tight for _, _, tight in before):
        # what the margin over-counted is room the prompt now gets (a few percent can
        # move no cut, or move one the other way: excerpts end on line ends)
        assert sum(r for r, _, _ in after) > sum(r for r, _, _ in before)


def test_a_ratio_needs_evidence_and_stays_within_bounds():
    model = Model("bounds")
    assert window.learned_ratio(model) == 1.0
    window.observe(model, 1000, 600)
    window.observe(model, 1000, 620)
    assert window.learned_ratio(model) == 1.0  # two counts are not evidence yet
    window.observe(model, 1000, 610)
    assert window.learned_ratio(model) == pytest.approx(0.62 * window.RATIO_SAFETY)
    assert not window.observe(model, 1000, 300)  # a cached prompt's count: not kept
    assert window.learned_ratio(model) == pytest.approx(0.62 * window.RATIO_SAFETY)
    for _ in range(window.RATIO_KEEP):
        window.observe(model, 1000, 3000)  # a tokenizer that counts 3x: capped
    assert window.learned_ratio(model) == window.RATIO_CEILING
    low = Model("low")
    for _ in range(5):
        window.observe(low, 1000, 501)
    assert window.learned_ratio(low) == window.RATIO_FLOOR
