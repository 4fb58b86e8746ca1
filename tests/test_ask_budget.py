"""What ask sends when the window is tight: a file over its share is shortened (never
dropped whole, never stopping the files after it), a window too small for any file says
so, Ollama's num_ctx is stable across requests, and a window that is not a number is
never taken as one."""

from __future__ import annotations

import json
import random

import pytest

from loomcli.ask import assemble
from loomcli.ask import tokens as estimate
from loomcli.extract import Extracted
from loomcli.store import Store

from .conftest import bm25_hits, write
from .llm_server import FakeLLM
from .test_window import configure, loom

QUESTION = "What is the default kernel.watchdog_thresh value and how is the softlockup " \
    "threshold derived from it?"
SYSCTLS = ["watchdog_thresh", "softlockup_panic", "nmi_watchdog", "hung_task_timeout",
           "panic_on_oops", "sched_rt_runtime", "printk_ratelimit", "perf_event_paranoid"]


def sysctl_doc(i: int, chars: int = 4329) -> str:
    """A dense sysctl reference (identifiers, hex, numbers: many tokens a character), the
    kind of file whose whole text was over its share."""
    rng = random.Random(i)
    lines = [f"kernel.watchdog_thresh reference {i}\n\nwatchdog_thresh softlockup threshold\n"]
    while sum(map(len, lines)) < chars:
        lines.append(f"kernel.{rng.choice(SYSCTLS)}_{rng.randint(0, 999)} = "
                     f"0x{rng.getrandbits(32):08x} ({rng.randint(1, 99)}s, "
                     f"cpu{i}n{rng.randint(0, 64)})\n")
    return "".join(lines)[:chars]


def emoji_doc() -> str:
    """Text no 600-character block of which fits a small share (rare symbols: tokens by
    their bytes), ranked first by the question's words."""
    symbols = "".join(chr(0x1F300 + (i * 7) % 700) for i in range(60))
    return "".join(f"watchdog_thresh softlockup {symbols}\n" for _ in range(60))


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


def store_of(tmp_path, texts: list[str]) -> Store:
    store = Store.open(tmp_path / "i.db", create=True)
    with store.transaction():
        root = store.ensure_root(tmp_path)
        for i, body in enumerate(texts):
            store.add_file(root.id, f"f{i}.md", "note", 1, 1, bytes([i]),
                           Extracted(body, f"F{i}"))
    return store


def fixed_tokens(question: str) -> int:
    return (estimate.estimate(assemble.INSTRUCTIONS)
            + estimate.estimate("\n" + assemble.question_block(question))
            + assemble.TEMPLATE_TOKENS)


def test_a_whole_file_over_its_share_is_shortened_and_the_others_still_sent(tmp_path):
    """The kernel.watchdog_thresh case: every file is whole (shorter than 8,000 characters)
    and a little over its fifth of the room. Shrinking from 8,000 characters never got
    below the file's own length, so the first file was left out and stopped every other."""
    store = store_of(tmp_path, [sysctl_doc(i) for i in range(5)])
    try:
        hits = bm25_hits(store, "watchdog_thresh softlockup", 15, "OR")
        assert len(hits) == 5
        text = store.text_bytes(hits[0].file_id, 0, 1 << 20).decode()
        block, _, _ = assemble._block(hits[0], text, QUESTION, 8000, 1200, None, None)
        whole = estimate.estimate(block) + 1
        share = int(whole / 1.04)  # the whole file is 4% over its share
        done = assemble.assemble_blocks(store, QUESTION, hits, top_k=5, budget=8000,
                                        head_chars=1200,
                                        tokens_max=fixed_tokens(QUESTION) + 5 * share)
    finally:
        store.close()
    assert len(done.used) == 5, [a.to_dict() for a in done.account]
    first = done.account[0]
    assert (first.status, first.reason) == ("trimmed", "window")
    assert first.tokens <= share
    assert done.prompt_tokens <= fixed_tokens(QUESTION) + 5 * share


def test_a_file_that_cannot_fit_never_stops_the_files_after_it(tmp_path):
    store = store_of(tmp_path, [emoji_doc()] + [sysctl_doc(i) for i in range(1, 4)])
    try:
        hits = bm25_hits(store, "watchdog_thresh softlockup", 15, "OR")
        assert hits[0].path == "f0.md"
        done = assemble.assemble_blocks(store, QUESTION, hits, top_k=4, budget=8000,
                                        head_chars=1200,
                                        tokens_max=fixed_tokens(QUESTION) + 4 * 700)
    finally:
        store.close()
    assert [(a.path, a.status, a.reason) for a in done.account][0] == \
        ("f0.md", "left out", "no room")
    assert sorted(u.path for u in done.used) == ["f1.md", "f2.md", "f3.md"]


@pytest.fixture
def emoji_notes(tmp_path, loom_home):
    root = tmp_path / "dense"
    write(root / "symbols.md", emoji_doc())
    write(root / "more.md", emoji_doc() + "\n")
    proc = loom("scan", str(root))
    assert proc.returncode == 0, proc.stderr
    return root


def test_files_that_match_but_cannot_fit_say_so_not_no_match(emoji_notes, loom_home, llm):
    configure(loom_home, "openai", llm.url, context_tokens=600)
    proc = loom("ask", QUESTION)
    assert proc.returncode == 2 and proc.stdout == "" and llm.chats() == []
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "2 indexed files match the question, but none fits the model's window" \
        in proc.stderr
    assert "600 tokens (config)" in proc.stderr and "smallest block (600 characters" \
        in proc.stderr
    assert "raise [llm] context_tokens" in proc.stderr and "no indexed file" not in proc.stderr


def test_ollama_num_ctx_does_not_follow_the_request_top_k(tmp_path, loom_home, llm):
    """Clients alternating top_k must not make Ollama reload the model (top_k 50 asked for
    131,072 tokens, top_k 1 for 4,096)."""
    root = tmp_path / "n"
    for i in range(8):
        write(root / f"n{i}.md", sysctl_doc(i, 9000))
    assert loom("scan", str(root)).returncode == 0
    llm.behaviour.model_length = 131072
    configure(loom_home, "ollama", llm.url)
    sizes = []
    for k in ("1", "50", "5", "50"):
        proc = loom("ask", "--json", "--top-k", k, QUESTION)
        assert proc.returncode == 0, proc.stderr
        sizes.append(llm.chats()[-1]["body"]["options"]["num_ctx"])
        assert llm.kept[-1] == llm.sent[-1]  # nothing cut at any top_k
    assert sizes == [16384] * 4


@pytest.mark.parametrize("told", [True, False, "8192", 0, -5, 2.5, [4096]])
def test_a_window_that_is_not_a_number_falls_back_with_one_warning(tmp_path, loom_home, llm,
                                                                    told):
    root = tmp_path / "n"
    write(root / "a.md", sysctl_doc(0))
    assert loom("scan", str(root)).returncode == 0
    llm.behaviour.show_length = told
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "--json", QUESTION)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["context"]["source"] == "default"
    assert data["context"]["window_tokens"] == 8192
    assert llm.chats()[-1]["body"]["options"]["num_ctx"] == 8192
    if told is not None:
        [warning] = [w for w in data["warnings"] if "/api/show" in w]
        assert "not a number of tokens" in warning and "context_tokens" in warning


# -- a kept huge answer: the summary call fits the window, estimates stay bounded --------------

MIXED = ["The warp tension is fine. ", "工作坊记录每一匹布。", "Привет мир. ", "ひらがなカタカナ",
         "🤖→∞ ", "0x1f3a sn9c102 ", "snake_case_name ", "\r\n"]


def mixed_answer(chars: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        out.append(rng.choice(MIXED))
        size += len(out[-1])
    return "".join(out)[:chars]


def test_every_request_of_a_follow_up_fits_the_window_after_a_huge_answer(tmp_path, loom_home,
                                                                          llm):
    """The rolling summary's call sent the whole kept answer (8.3 MB with num_ctx 16,384)."""
    from . import tokens

    root = tmp_path / "n"
    for i in range(3):
        write(root / f"n{i}.md", sysctl_doc(i))
    assert loom("scan", str(root)).returncode == 0
    llm.behaviour.window = llm.behaviour.model_length = 16384
    configure(loom_home, "ollama", llm.url)
    huge = mixed_answer(1_500_000)
    llm.behaviour.answer = [huge[i:i + 20_000] for i in range(0, len(huge), 20_000)]
    assert loom("ask", QUESTION).returncode == 0
    llm.behaviour.answer = ["It is 10 seconds [n0.md]."]
    for follow_up in ("and the softlockup threshold?", "and hung tasks?", "shorter?"):
        proc = loom("ask", "-c", follow_up)
        assert proc.returncode == 0, proc.stderr
    chats = llm.chats()
    assert len(chats) >= 5  # the first ask, three follow-ups and at least one summary
    assert any("Summarise the conversation" in c["body"]["messages"][0]["content"]
               for c in chats)
    for chat, sent, kept in zip(chats, llm.sent, llm.kept, strict=True):
        num_ctx = chat["body"]["options"]["num_ctx"]
        assert num_ctx == 16384
        assert tokens.count(sent) + chat["body"]["options"]["num_predict"] <= num_ctx
        assert kept == sent


@pytest.mark.parametrize("turns", [1, 2])
def test_recalling_a_huge_kept_answer_costs_what_the_budget_does(turns):
    """A follow-up after a kept 7.8 MB answer of mixed scripts: 14 s of CPU (one turn) and
    2.6 s (two) were spent estimating the same answer again and again."""
    import time

    from loomcli.ask import history
    from loomcli.conversations import Conversation, Turn

    answer = mixed_answer(7_800_000)
    kept = [Turn(1, "q1?", answer)] + ([Turn(2, "q2?", "a short answer")] if turns == 2
                                      else [])
    conv = Conversation("c1", "t", 0.0, 0.0, turns=kept)
    started = time.process_time()
    got = history.recall(conv, 5000, estimate.estimate)
    spent = time.process_time() - started
    assert 0 < got.tokens <= 5000
    assert spent < 1.0, spent
