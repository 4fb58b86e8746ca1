"""loom ask never loses the answer on the way to the model: the prompt fits the model's
real window (kept == sent), a server that still refuses gets one retry at half the budget
then one clear line, quotes are checked, pages shown, near-copies skipped."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli import ask, providers
from loomcli.ask import tokens as estimate
from loomcli.ask.window import Budget, plan
from loomcli.extract import Extracted
from loomcli.store import Store

from . import tokens
from .conftest import bm25_hits, write
from .llm_server import FakeLLM

LOOM = [sys.executable, "-m", "loomcli"]
QUESTION = "How tight should the warp tension be on the heddle frame?"
_WORDS = ("bolt cloth weaver colour weight floor shuttle reed loom yarn spool bobbin dye "
         "madder woad weld linen wool cotton silk pattern twill satin plain weave card "
         "treadle beam apron batten selvedge fringe knot skein hank")
_ITALIAN = ("il laboratorio tiene un registro di ogni pezza stoffa che lascia reparto con suo "
           "peso nome della tessitrice filo colore telaio navetta")
WORDS, ITALIAN = _WORDS.split(), _ITALIAN.split()
CHINESE = "工作坊记录每一匹离开车间的布包括重量颜色和完成它的织工名字"


def paragraph(rng: random.Random, n: int) -> str:
    kind = n % 3
    if kind == 2:
        return "".join(rng.choice(CHINESE) for _ in range(160)) + "。\n\n"
    words = WORDS if kind == 0 else ITALIAN
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 16))).capitalize()
                 + "." for _ in range(6)]
    return " ".join(sentences) + "\n\n"


def long_note(i: int) -> str:
    """About 30,000 characters of text of its own; the answer sentence deep inside, the
    question's words spread through it so every file ranks."""
    rng = random.Random(i)
    body = [f"# Warp tension notes {i}\n\n"]
    for n in range(60):
        body.append(paragraph(rng, n) + paragraph(rng, n + 3))
        if n % 7 == 3:
            body.append(f"Heddle frame {i}.{n}: the warp tension changes with humidity.\n\n")
        if n == 40:
            body.append(f"Answer {i}: the warp tension on the heddle frame should be "
                        f"{20 + i} newtons per thread.\n\n")
    return "".join(body)


@pytest.fixture
def long_notes(tmp_path, loom_home):
    root = tmp_path / "long"
    for i in range(6):
        write(root / f"note-{i}.md", long_note(i))
    subprocess.run([*LOOM, "scan", str(root)], check=True, capture_output=True)
    return root


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


def configure(loom_home, provider: str, endpoint: str, **extra: object) -> None:
    lines = [f'[llm]\nprovider = "{provider}"\nmodel = "test-model"\nendpoint = "{endpoint}"',
             "timeout_s = 10"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    write(loom_home / "config.toml", "\n".join(lines) + "\n")


def loom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True,
                          env={**os.environ, "ANTHROPIC_API_KEY": "sk-x"}, timeout=120)


# -- the stand-in keeps a window the way Ollama does ------------------------------------------

def test_the_ollama_stand_in_cuts_a_prompt_sent_without_num_ctx(loom_home, llm):
    """What main's code did: no num_ctx, so 2,048 tokens and the prompt's start is lost."""
    llm.behaviour.window = 2048
    configure(loom_home, "ollama", llm.url)
    from loomcli import config

    p = providers.from_config(config.load())
    system, user = ask.INSTRUCTIONS, long_note(0) * 2 + "Question: " + QUESTION
    list(p.stream(system, user))
    sent, kept = llm.sent[-1], llm.kept[-1]
    assert kept != sent and sent.endswith(kept)
    assert ask.INSTRUCTIONS not in kept
    assert tokens.count(kept) <= 2048


@pytest.mark.parametrize("length", [2048, 4096, 32768])
def test_ollama_keeps_everything_loom_sends(long_notes, loom_home, llm, length):
    llm.behaviour.window, llm.behaviour.model_length = length, length
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "--json", QUESTION)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    [chat] = llm.chats()
    num_ctx = chat["body"]["options"]["num_ctx"]
    assert num_ctx == min(length, 16384)  # stable: the configured bounds' size
    assert llm.kept == llm.sent  # nothing was cut by the window
    sent = llm.sent[0]
    assert sent.startswith(ask.INSTRUCTIONS) and sent.endswith(f"Question: {QUESTION}\n")
    context = data["context"]
    assert context["window_tokens"] == num_ctx and context["source"] == "ollama /api/show"
    assert chat["body"]["options"]["num_predict"] == context["answer_tokens"]
    assert tokens.count(sent) <= num_ctx - context["answer_tokens"]
    assert context["prompt_tokens"] >= tokens.count(sent)  # the estimate is conservative
    assert context["files_sent"] == len(data["used"]) >= 1
    if length == 2048:
        assert context["files_sent"] < 5 or "[...]" in sent  # fitted: fewer or shorter


def test_show_context_header_names_the_window(long_notes, loom_home, llm):
    llm.behaviour.window = llm.behaviour.model_length = 4096
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "--show-context", QUESTION)
    header = proc.stdout.partition("\n")[0]
    assert header.startswith("[context] window 4,096 tokens (ollama /api/show), prompt ~")
    assert "answer 512 reserved" in header and llm.chats() == []


# -- llama.cpp: a window told by /props, a 400 past it ------------------------------------------

def test_llama_cpp_window_is_learned_and_never_exceeded(long_notes, loom_home, llm):
    llm.behaviour.window = 4096
    configure(loom_home, "openai", llm.url)
    proc = loom("ask", "--json", QUESTION)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert llm.refused == 0 and len(llm.chats()) == 1
    assert data["context"]["source"] == "llama.cpp /props"
    assert data["context"]["window_tokens"] == 4096
    assert tokens.count(llm.sent[0]) <= 4096 - data["context"]["answer_tokens"]


def test_a_server_that_still_refuses_gets_one_retry_at_half_the_budget(long_notes, loom_home,
                                                                        llm):
    llm.behaviour.window = 4000  # what it really holds
    configure(loom_home, "openai", llm.url, context_tokens=8000)  # what the user said
    proc = loom("ask", "--json", QUESTION)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert llm.refused == 1 and len(llm.chats()) == 2, (data["context"], llm.sent[0][-300:])
    assert tokens.count(llm.sent[1]) < tokens.count(llm.sent[0])
    assert any("sent again at half the budget" in w for w in data["warnings"])


def test_a_server_that_refuses_twice_is_one_clear_line(long_notes, loom_home, llm):
    llm.behaviour.window = 600
    configure(loom_home, "openai", llm.url, context_tokens=32768)
    proc = loom("ask", QUESTION)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "window of 32,768 tokens (config)" in proc.stderr
    assert "context_tokens" in proc.stderr and len(llm.chats()) == 2


def test_a_question_longer_than_the_window_is_refused_before_any_call(long_notes, loom_home,
                                                                       llm):
    configure(loom_home, "openai", llm.url, context_tokens=1024)
    proc = loom("ask", QUESTION + " warp" * 2000)
    assert proc.returncode == 2 and "take about" in proc.stderr and llm.chats() == []


# -- the budget invariant ------------------------------------------------------------------

TEXT = st.text(st.sampled_from(list("abcdefghij klmnopqrstuvwxyzàèéìòù ,.;:-=*`\n\t0123456789"
                                    "工作坊记录每一匹离开车间的布ひらがなカタカナ한국어Привет"
                                    "Γειά🤖→∞")), min_size=0, max_size=3000)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXT, min_size=1, max_size=6), window=st.integers(700, 20000),
       budget=st.integers(300, 12000), top_k=st.integers(1, 6),
       rule=st.sampled_from(["fewer", "shorter"]))
def test_the_prompt_always_fits_the_window(tmp_path_factory, texts, window, budget, top_k,
                                           rule):
    store = Store.open(tmp_path_factory.mktemp("w") / "i.db", create=True)
    with store.transaction():
        root = store.ensure_root(tmp_path_factory.mktemp("n"))
        for i, body in enumerate(texts):
            store.add_file(root.id, f"f{i}.md", "note", 1, 1, bytes([i]),
                           Extracted("warp " + body, f"F{i}"))
    limits = plan("openai", window, "test", top_k=top_k, file_budget_chars=budget,
                  max_answer_tokens=None)
    try:
        hits = bm25_hits(store, "warp", top_k * 3, "OR")
        prompt = ask.build_prompt(store, "warp tension?", hits, top_k=top_k, budget=budget,
                                  head_chars=300, window=limits, rule=rule)
    finally:
        store.close()
    if prompt is None:
        return
    sent = prompt.system + "\n" + prompt.user
    assert tokens.count(sent) <= limits.prompt_tokens
    assert prompt.prompt_tokens <= limits.prompt_tokens
    assert prompt.system == ask.INSTRUCTIONS
    assert prompt.user.endswith("Question: warp tension?\n")
    assert len(prompt.used) <= top_k
    assert all(len(b) <= budget for b in prompt.user.split("\n## [")[1:])


def test_answer_reserve_and_ollama_sizes():
    assert plan("ollama", 131072, "ollama /api/show", top_k=5, file_budget_chars=8000,
                max_answer_tokens=None) == Budget(16384, 2048, "ollama /api/show", 16384,
                                                  131072)
    assert plan("ollama", 131072, "s", top_k=1, file_budget_chars=6000,
                max_answer_tokens=None).window_tokens == 4096
    assert plan("openai", 2048, "s", top_k=5, file_budget_chars=8000,
                max_answer_tokens=4000).answer_tokens == 1024  # at most half the window
    assert estimate.estimate("") == 1


# -- quotes and pages -------------------------------------------------------------------

def test_quotes_are_checked_and_located_with_pages(scanned_notes, loom_home, llm):
    llm.behaviour.answer = [
        'The invoice is named: "Invoice FT-2026-0412 covers the madder\n  root delivered '
        'in March." [manuals/field-guide.pdf p. 4] and the guide says “a slack warp gives '
        'an uneven cloth”, but also "the loom was invented by a cat in 1802".']
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "--json", "Which invoice covers the madder root?")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    q1, q2, q3 = data["quotes"]
    assert q1["verified"] and q1["path"] == "manuals/field-guide.pdf" and q1["page"] == 4
    assert q2["verified"] and q2["page"] == 3
    assert q3 == {"text": "the loom was invented by a cat in 1802", "path": None,
                  "offset": None, "length": None, "page": None, "verified": False}
    got = json.loads(loom("get", q1["path"], "--offset", str(q1["offset"]), "--length",
                          str(q1["length"]), "--json").stdout)
    assert got["content"] == "Invoice FT-2026-0412 covers the madder root delivered in March"
    assert data["citations"] == ["manuals/field-guide.pdf"]
    [source] = data["sources"]
    assert source["pages"] == [1, 2, 3, 4, 5] and source["spans"][0]["offset"] == 0
    assert "## [manuals/field-guide.pdf pp. 1-5] " in llm.sent[0]
    human = loom("ask", "Which invoice covers the madder root?")
    assert 'unverified quote: "the loom was invented by a cat in 1802"' in human.stdout
    assert "invoice" not in human.stdout.split("unverified quote:")[1].split("\n")[0]
    assert f"  manuals/field-guide.pdf@{q1['offset']} pp. 1-5  Field Guide" in human.stdout


def test_verbose_prints_context_and_timings(scanned_notes, loom_home, llm):
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "-v", "Which invoice covers the madder root?")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("loom: context: window 16,384 tokens (ollama /api/show)")
    assert lines[1].startswith("loom: timings: retrieve ")  # before the answer
    assert lines[2].startswith("loom: timings: first_token ")  # after it
    for stage in ("retrieve", "excerpts", "first_token", "model", "total"):
        assert f"{stage} " in lines[1] + lines[2]


# -- near-copies -------------------------------------------------------------------------

def test_a_near_copy_gives_its_slot_to_the_next_best_file(tmp_path, loom_home, llm):
    root = tmp_path / "copies"
    original = long_note(1)
    write(root / "guide.md", original)
    write(root / "export/guide-copy.md", original + "\nExported on 2026-03-01.\n")
    write(root / "guide.rst.txt", original.replace("\n\n", "\n\n\n"))
    write(root / "other.md", long_note(2))
    subprocess.run([*LOOM, "scan", str(root)], check=True, capture_output=True)
    configure(loom_home, "ollama", llm.url)
    write(loom_home / "config.toml", (loom_home / "config.toml").read_text()
          + "[ask]\ntop_k = 2\n")
    data = json.loads(loom("ask", "--json", QUESTION).stdout)
    sent = [u["path"] for u in data["used"]]
    assert len(sent) == 2 and "other.md" in sent
    assert data["context"]["files_left_out"] == 2


def test_unit_near_copy_rule():
    from loomcli.ask.assemble import near_copy, shingles

    a = shingles(long_note(1))
    assert near_copy(shingles(long_note(1) + "one more line here"), [("a", a)]) == "a"
    assert near_copy(shingles(long_note(2)), [("a", a)]) is None


def test_window_header_line_lists_what_was_left_out():
    prompt = ask.Prompt("s", "u", [], account=[
        ask.FileAccount("a.md", "whole"), ask.FileAccount("b.md", "left out", "no room")],
        budget=Budget(4096, 512, "llama.cpp /props"), prompt_tokens=3000)
    assert prompt.header_line() == ("[context] window 4,096 tokens (llama.cpp /props), "
                                    "prompt ~3,000, answer 512 reserved; 0 files sent, 1 left "
                                    "out (b.md: no room)")


# -- over HTTP: odd streams end with an error line (streamed) or a 502 (not streamed) ------

@pytest.mark.parametrize("raw", [b'{"message": "x"}\n', b"[null]\n", b'"a string"\n'])
def test_http_ask_with_a_malformed_stream(scanned_notes, loom_home, llm, raw):
    from .test_http import Server

    llm.behaviour.raw = [raw]
    configure(loom_home, "ollama", llm.url)
    server = Server()
    try:
        status, body = server.call("POST", "/ask", {"question": "madder root invoice"})
        request = urllib.request.Request(
            server.url + "/ask", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"question": "madder root invoice", "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=30) as resp:
            events = [json.loads(line) for line in resp]
    finally:
        server.stop()
    assert status == 502 and "not the ollama API's shape" in body["error"]
    assert list(events[-1]) == ["error"] and "shape" in events[-1]["error"]


def test_http_streamed_ask_ends_with_context_quotes_and_timings(scanned_notes, loom_home,
                                                                  llm):
    from .test_http import Server

    llm.behaviour.answer = ['It says "Invoice FT-2026-0412 covers the madder root".']
    configure(loom_home, "ollama", llm.url)
    server = Server()
    try:
        request = urllib.request.Request(
            server.url + "/ask", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"question": "madder root invoice", "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=30) as resp:
            events = [json.loads(line) for line in resp]
    finally:
        server.stop()
    final = events[-1]
    assert final["done"] is True and final["context"]["source"] == "ollama /api/show"
    assert final["quotes"][0]["verified"] and final["quotes"][0]["page"] == 4
    assert set(final["timings"]) == {"retrieve_ms", "excerpts_ms", "first_token_ms",
                                     "model_ms", "total_ms"}
