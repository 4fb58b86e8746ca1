"""`loom ask --agent`, conversations and `loom chat`, as real `loom` processes against
scripted tool-calling models on loopback (tests/tool_llm_server.py), one per protocol."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli import tools
from loomcli.ask import agent
from loomcli.operations import AGENT_MAX_CALLS

from .conftest import write
from .tool_llm_server import (
    LLAMACPP_NO_TOOLS,
    OLLAMA_NO_TOOLS,
    VLLM_NO_TOOLS,
    Call,
    Limits,
    ToolLLM,
    Turn,
    investigator,
    never_stops,
    plain,
    repeater,
)

LOOM = [sys.executable, "-m", "loomcli"]
SYSRQ = ("The magic SysRq key is a key combination the kernel still listens to when "
         "everything else is frozen.")
PROTOCOLS = {  # name -> (provider, how the stand-in answers)
    "ollama": ("ollama", None),
    "openai-streamed": ("openai", None),
    "openai-whole": ("openai", False),
    "anthropic": ("anthropic", None),  # its API always streams when asked to
}


@pytest.fixture
def kernel_notes(tmp_path, loom_home):
    notes = tmp_path / "notes"
    filler = "".join(f"Paragraph {i} describes another part of the admin guide.\n"
                     for i in range(300))
    write(notes / "admin" / "sysrq.rst", "Linux Magic System Request Key Hacks\n"
          "=====================================\n\n" + filler + SYSRQ + " Press Alt, "
          "SysRq and a command key together; Alt+SysRq+B reboots at once.\n" + filler)
    write(notes / "admin" / "caches.rst", "Freeing memory\n==============\n\nWriting 3 to "
          "/proc/sys/vm/drop_caches frees the page cache, dentries and inodes.\n")
    write(notes / "finance" / "invoices.md", "# Invoices\n\nInvoices FT-2026-0398 and "
          "FT-2026-0415 are paid by transfer. The ledger of invoices is kept by Marta in "
          "the blue binder.\n")
    write(notes / "bakery" / "ledger.md", "# Bakery\n\nThe bakery's flour ledger is kept by "
          "Paolo, who keeps it next to the ovens.\n")
    subprocess.run([*LOOM, "scan", str(notes)], check=True, capture_output=True)
    return notes


def configure(loom_home: Path, provider: str, url: str, **ask: object) -> None:
    lines = [f'[llm]\nprovider = "{provider}"\nmodel = "test-model"\nendpoint = "{url}"\n'
             "timeout_s = 20\n"]
    if ask:
        lines.append("[ask]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in ask.items()))
    write(loom_home / "config.toml", "".join(lines))


def loom(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-test"}
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=120)


def conversation_turns(loom_home: Path) -> list[tuple[str, int, str]]:
    if not (loom_home / "conversations.db").exists():
        return []  # no turn kept yet: a failed ask makes no file
    db = sqlite3.connect(loom_home / "conversations.db")
    try:
        return db.execute("SELECT conversation_id, n, question FROM turns ORDER BY "
                          "conversation_id, n").fetchall()
    finally:
        db.close()


# -- the loop, over each protocol ---------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_model_greps_reads_the_range_and_answers_quoting_it(kernel_notes, loom_home,
                                                           protocol):
    provider, stream = PROTOCOLS[protocol]
    with ToolLLM(investigator("SysRq"), Limits(stream=stream)) as llm:
        configure(loom_home, provider, llm.url)
        done = loom("ask", "--agent", "my PC froze: is there a key combination the kernel "
                    "still listens to?", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [s["tool"] for s in out["steps"]] == ["loom_grep", "loom_get_file"]
    assert all(set(s) == {"tool", "arguments", "result_chars", "ms"} for s in out["steps"])
    assert out["steps"][0]["arguments"] == {"pattern": "SysRq"}
    grep_hit = [r for r in chats[1]["turns"] if r.role == "tool"][0].result()["matches"][0]
    assert out["steps"][1]["arguments"]["offset"] == grep_hit["offset"] - 200
    assert SYSRQ in out["answer"]
    assert out["citations"] == ["admin/sysrq.rst"]
    assert [u["path"] for u in out["used"]] == ["admin/sysrq.rst"]
    assert len(chats) == 3  # grep, read, answer
    # The quote is checked against what the tools returned, in `loom get` terms.
    [quote] = out["quotes"]
    assert quote["verified"] is True and quote["path"] == "admin/sysrq.rst"
    got = loom("get", "admin/sysrq.rst", "--offset", str(quote["offset"]), "--length",
               str(quote["length"]))
    assert got.stdout.rstrip("\n") == SYSRQ.rstrip(".")  # the checker drops end marks
    assert out["context"]["window_tokens"] > 0 and out["context"]["files_sent"] == 1
    # What the model got back is the MCP tools' JSON, byte for byte where it was not cut.
    from loomcli import config
    from loomcli.operations import Corpus

    corpus = Corpus(config.load())
    sent = [t for t in chats[1]["turns"] if t.role == "tool"][0]
    assert json.loads(sent.content) == tools.GREP.call(corpus, {"pattern": "SysRq"})
    assert out["steps"][0]["result_chars"] == len(sent.content)
    read = [t for t in chats[2]["turns"] if t.role == "tool"][-1].result()
    assert read == tools.GET_FILE.call(corpus, out["steps"][1]["arguments"])
    assert not any(r.get("refused") for r in chats)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_agent_reads_each_server_s_count_and_learns_from_it(kernel_notes, loom_home,
                                                                protocol):
    """Every request of the loop is counted by the server as its API reports it; the
    count is in the context, as a plain ask's, and teaches the model's ratio (kept in
    the home for the next ask)."""
    provider, stream = PROTOCOLS[protocol]
    with ToolLLM(investigator("SysRq"), Limits(stream=stream)) as llm:
        configure(loom_home, provider, llm.url)
        done = loom("ask", "--agent", "--json", "which key combination does the kernel "
                    "listen to?")
        counted = [r["tokens"] for r in llm.chats()]
    assert done.returncode == 0, done.stderr
    context = json.loads(done.stdout)["context"]
    assert context["server_prompt_tokens"] == counted[-1] > 0
    [model] = json.loads((loom_home / "token_ratios.json").read_text())["models"]
    assert (model["provider"], model["model"]) == (provider, "test-model")
    assert len(model["ratios"]) == len(counted) == 3  # grep, read, answer
    # the last request is the largest: its estimate is the context's prompt_tokens
    assert model["ratios"][-1] == round(counted[-1] / context["prompt_tokens"], 4)


def test_a_request_ollama_cut_silently_is_warned_once_and_teaches_nothing(kernel_notes,
                                                                          loom_home):
    """A server holding less than the num_ctx sent (here [llm] context_tokens over its
    real 2,048) cuts the request with three big grep results and counts only what it
    kept: that is said once, and the count is not taken for the tokenizer's."""
    def greps_then_answers(turns: list[Turn], tools_offered: bool) -> list:
        if any(t.role == "tool" for t in turns) or not tools_offered:
            return ["Done [admin/sysrq.rst]."]
        return [Call("loom_grep", {"pattern": f"Paragraph {n}"}) for n in (1, 2, 3)]

    with ToolLLM(greps_then_answers, Limits(window=2048)) as llm:
        write(loom_home / "config.toml", f'[llm]\nprovider = "ollama"\nmodel = "m"\n'
              f'endpoint = "{llm.url}"\ncontext_tokens = 8192\n')
        done = loom("ask", "--agent", "--json", "what do the paragraphs say?")
        first, second = llm.chats()
    assert done.returncode == 0, done.stderr
    assert not first["cut"] and second["cut"]
    assert done.stderr.count(agent.CUT_WORDS) == 1
    out = json.loads(done.stdout)
    assert out["context"]["server_prompt_tokens"] == 2048
    [model] = json.loads((loom_home / "token_ratios.json").read_text())["models"]
    assert len(model["ratios"]) == 1  # the first request's count only


def test_a_made_up_quote_is_marked_unverified(kernel_notes, loom_home):
    def liar(turns: list[Turn], tools_offered: bool) -> list:
        if not any(t.role == "tool" for t in turns):
            return [Call("loom_grep", {"pattern": "SysRq"})]
        return ['It says "the kernel reboots when you press Escape three times" '
                "[admin/sysrq.rst]."]

    with ToolLLM(liar) as llm:
        configure(loom_home, "ollama", llm.url)
        done = loom("ask", "--agent", "which key?")
        as_json = json.loads(loom("ask", "--agent", "which key?", "--json").stdout)
    assert 'unverified quote: "the kernel reboots when you press Escape three times"' \
        in done.stdout
    assert as_json["quotes"] == [{"text": "the kernel reboots when you press Escape three "
                                  "times", "path": None, "offset": None, "length": None,
                                  "page": None, "verified": False}]


def test_steps_are_printed_on_stderr_as_they_happen(kernel_notes, loom_home):
    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "ollama", llm.url)
        done = loom("ask", "--agent", "which key combination does the kernel listen to?")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("→ loom_grep SysRq · 1 match · ") and lines[0].endswith(" ms")
    assert lines[1].startswith("→ loom_get_file admin/sysrq.rst ")
    assert " · 900 of " in lines[1]
    assert done.stdout.startswith("The notes say: \"" + SYSRQ)
    assert "Sources:\n  admin/sysrq.rst@" in done.stdout


def test_agent_is_the_default_with_the_config_key(kernel_notes, loom_home):
    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "openai", llm.url, agent=True)
        on = loom("ask", "which key?", "--json")
        off = loom("ask", "--no-agent", "which key?", "--json")
    assert [s["tool"] for s in json.loads(on.stdout)["steps"]] == ["loom_grep",
                                                                   "loom_get_file"]
    assert json.loads(off.stdout)["steps"] == []


# -- bounded ------------------------------------------------------------------------------

def test_a_model_that_never_stops_gets_a_last_call_without_tools(kernel_notes, loom_home):
    with ToolLLM(never_stops(answers_without_tools=True)) as llm:
        configure(loom_home, "openai", llm.url, max_steps=4)
        done = loom("ask", "--agent", "warp?", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["steps"]) == 4
    assert out["answer"] == "After 4 searches: the loom notes mention warp threads."
    assert len(chats) == 5
    assert all(c["body"].get("tools") for c in chats[:4]) and "tools" not in chats[4]["body"]
    assert chats[4]["turns"][-1].content == agent.LAST_CALL


def test_a_model_that_calls_tools_even_when_offered_none_is_stopped_with_one_line(
        kernel_notes, loom_home):
    with ToolLLM(never_stops(), Limits(calls_without_tools=True)) as llm:
        configure(loom_home, "ollama", llm.url)
        done = loom("ask", "--agent", "warp?")
        chats = llm.chats()
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith("loom: the model kept calling tools after "
                                                   "7 calls and 6 steps and gave no answer — ")
    assert len([x for x in done.stderr.splitlines() if x.startswith("loom:")]) == 1
    assert len(chats) == 7  # six steps, then the last call (default [ask] max_steps)
    assert conversation_turns(loom_home) == []  # no answer, nothing kept


def test_a_repeated_call_is_answered_already_done_and_model_calls_are_capped(kernel_notes,
                                                                              loom_home):
    with ToolLLM(repeater()) as llm:
        configure(loom_home, "anthropic", llm.url)
        done = loom("ask", "--agent", "warp?", "--json")
        chats = llm.chats()
    out = json.loads(done.stdout)
    assert [s["tool"] for s in out["steps"]] == ["loom_search", "loom_search"]
    assert out["answer"] == "Done searching."
    assert "already done, see above" in chats[2]["turns"][-1].content

    def same_call(turns: list[Turn], tools_offered: bool) -> list:
        return [Call("loom_grep", {"pattern": "warp"})] if tools_offered else ["gave up"]

    with ToolLLM(same_call) as llm:
        configure(loom_home, "ollama", llm.url, max_steps=50)
        done = loom("ask", "--agent", "warp?", "--json")
        chats = llm.chats()
    out = json.loads(done.stdout)
    assert len(chats) == AGENT_MAX_CALLS
    assert "tools" not in chats[-1]["body"] and out["answer"] == "gave up"
    assert len(out["steps"]) == AGENT_MAX_CALLS - 1  # one grep, then "already done"


def test_many_calls_in_one_answer_run_only_up_to_the_step_limit(kernel_notes, loom_home):
    def greedy(turns: list[Turn], tools_offered: bool) -> list:
        if not tools_offered or any(t.role == "tool" for t in turns):
            return ["enough"]
        return [Call("loom_search", {"query": f"q{i}"}) for i in range(40)]

    with ToolLLM(greedy) as llm:
        configure(loom_home, "anthropic", llm.url, max_steps=3)
        out = json.loads(loom("ask", "--agent", "x?", "--json").stdout)
        chats = llm.chats()
    assert len(out["steps"]) == 3 and out["answer"] == "enough"
    # The first 16 calls kept get a result each, as the API requires; the 17th says the
    # limit for itself and the 23 after it, which are not kept (nor re-sent).
    [asked] = [t for t in chats[1]["turns"] if t.calls]
    assert len(asked.calls) == agent.CALLS_PER_MESSAGE + 1
    results = [t for t in chats[1]["turns"] if t.role == "tool"]
    assert len(results) == agent.CALLS_PER_MESSAGE + 1
    assert sum(agent.NOT_RUN in t.content for t in results) == agent.CALLS_PER_MESSAGE - 3
    assert "24 more were left out" in results[-1].result()["error"]
    assert not any(c.get("refused") for c in chats)


def test_a_bad_tool_call_goes_back_to_the_model_as_an_error(kernel_notes, loom_home):
    def clumsy(turns: list[Turn], tools_offered: bool) -> list:
        results = [t.result() for t in turns if t.role == "tool"]
        if len(results) < 3 and tools_offered:
            return [Call("loom_grep", {"pattern": "(unclosed"}), Call("loom_teleport", {}),
                    Call("loom_get_file", {"path": "../../etc/passwd"})]
        return [json.dumps(results)]

    with ToolLLM(clumsy) as llm:
        configure(loom_home, "openai", llm.url)
        done = loom("ask", "--agent", "x?", "--json")
    out = json.loads(done.stdout)
    errors = [r["error"] for r in json.loads(out["answer"])]
    assert "invalid pattern" in errors[0] or "pattern" in errors[0]
    assert errors[1].startswith("no tool named 'loom_teleport'")
    assert "escapes the index" in errors[2]


# -- fallback -----------------------------------------------------------------------------

@pytest.mark.parametrize("provider,refusal", [("ollama", OLLAMA_NO_TOOLS),
                                              ("openai", LLAMACPP_NO_TOOLS),
                                              ("openai", VLLM_NO_TOOLS)])
def test_a_model_without_tools_gets_the_plain_ask_with_one_warning(kernel_notes, loom_home,
                                                                   provider, refusal):
    with ToolLLM(plain("Press Alt+SysRq+B [admin/sysrq.rst]."),
                 Limits(supports_tools=False, no_tools_error=refusal)) as llm:
        configure(loom_home, provider, llm.url)
        done = loom("ask", "--agent", "SysRq reboot key", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    warnings = done.stderr.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("loom: warning: test-model takes no "
                                                         "tools")
    assert warnings[0].endswith("; asking without --agent")
    out = json.loads(done.stdout)
    assert out["citations"] == ["admin/sysrq.rst"] and out["steps"] == []
    assert "tools" in chats[0]["body"] and "tools" not in chats[-1]["body"]
    assert "## [admin/sysrq.rst]" in json.dumps(chats[-1]["body"])


def test_show_context_prints_the_tools_and_the_first_request_and_calls_nothing(kernel_notes,
                                                                              loom_home):
    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "ollama", llm.url)
        done = loom("ask", "--agent", "--show-context", "which key?")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    assert chats == []
    head, rest = done.stdout.split("\n\n[system]\n", 1)
    listed = json.loads(head.removeprefix("[tools]\n"))
    assert [t["name"] for t in listed] == ["loom_search", "loom_grep", "loom_get_file"]
    assert listed[1]["parameters"] == tools.GREP.parameters
    assert rest.startswith(agent.INSTRUCTIONS) and rest.endswith("\n\n[user]\nwhich key?\n")


# -- conversations ------------------------------------------------------------------------

def test_a_follow_up_retrieves_with_the_conversation_and_carries_it(kernel_notes, loom_home):
    with ToolLLM(plain("They are paid by transfer [finance/invoices.md].")) as llm:
        configure(loom_home, "ollama", llm.url, top_k=1)
        first = loom("ask", "how are the FT-2026 invoices paid?", "--json")
        alone = loom("ask", "and who keeps the ledger of it?", "--json")
        follow = loom("ask", "--cid", cid_of(first), "and who keeps the ledger of it?",
                      "--json")
        chats = llm.chats()
        last = loom("ask", "-c", "and is it blue?", "--json")
        again = loom("ask", "-c", "--show-context", "and where is it kept?")
    cid = json.loads(first.stdout)["conversation_id"]
    assert json.loads(follow.stdout)["conversation_id"] == cid
    assert json.loads(alone.stdout)["conversation_id"] not in (None, cid)
    assert json.loads(alone.stdout)["used"][0]["path"] == "bakery/ledger.md"
    assert json.loads(follow.stdout)["used"][0]["path"] == "finance/invoices.md"
    sent = json.dumps(chats[-1]["body"], ensure_ascii=False)
    # The earlier question and answer travel with the follow-up (and not with the new ask).
    assert "how are the FT-2026 invoices paid?" in sent
    assert "They are paid by transfer" in sent
    assert "FT-2026 invoices paid" not in json.dumps(chats[1]["body"])
    # -c continues the conversation used last; --show-context shows what a follow-up sends.
    assert cid_of(last) == cid
    assert "how are the FT-2026 invoices paid?" in again.stdout
    assert "and who keeps the ledger of it?" in again.stdout
    listed = loom("conversations", "--json")
    rows = json.loads(listed.stdout)["conversations"]
    assert [r["id"] for r in rows] == [cid, json.loads(alone.stdout)["conversation_id"]]
    assert rows[0]["turns"] == 3 and rows[0]["title"] == "how are the FT-2026 invoices paid?"
    human = loom("conversations")
    assert human.stdout.splitlines()[0].startswith(cid + "  ")
    bad = loom("ask", "--cid", "nope", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("loom: no conversation 'nope' — ")


def cid_of(done: subprocess.CompletedProcess[str]) -> str:
    return json.loads(done.stdout)["conversation_id"]


def summarising(brain):
    """The brain, and a short summary when loom asks for one."""

    def both(turns: list[Turn], tools_offered: bool) -> list:
        if turns and turns[0].content.startswith("Summarise the conversation"):
            return ["Summary: the user asked about invoices and ledgers [finance/invoices.md]."]
        return brain(turns, tools_offered)

    return both


def long_answer(turns: list[Turn], tools_offered: bool) -> list:
    n = sum(1 for t in turns if t.role == "user")
    return [f"Answer {n}: " + "the ledger of invoices is kept by Marta in the blue binder, "
            "as the note says; " * 40 + "[finance/invoices.md]."]


@pytest.mark.parametrize("summaries", ["by the model", "shortened when the model fails"])
def test_ten_long_follow_ups_on_a_4k_window_none_cut(kernel_notes, loom_home, summaries):
    if summaries == "by the model":
        brain = summarising(long_answer)
    else:
        def brain(turns: list[Turn], tools_offered: bool) -> list:
            if turns and turns[0].content.startswith("Summarise the conversation"):
                return []  # an empty answer: loom falls back to shortening
            return long_answer(turns, tools_offered)
    with ToolLLM(brain, Limits(window=4096)) as llm:
        configure(loom_home, "ollama", llm.url)
        assert loom("ask", "who keeps the ledger of invoices?").returncode == 0
        for i in range(10):
            done = loom("ask", "-c", f"and follow-up number {i} about the ledger of invoices?")
            assert done.returncode == 0, done.stderr
        chats = llm.chats()
    assert all(not c["cut"] for c in chats), [c["tokens"] for c in chats]
    assert all(c["tokens"] <= c["window"] for c in chats)
    (cid, _, _), *_ = turns = conversation_turns(loom_home)
    assert len(turns) == 11 and {t[0] for t in turns} == {cid}
    last = json.dumps(chats[-1]["body"], ensure_ascii=False)
    assert "and follow-up number 8 about the ledger" in last  # the latest turn, verbatim
    assert "Earlier in this conversation (a summary)" in last
    if summaries == "by the model":
        assert "Summary: the user asked about invoices" in last
    else:
        assert "Q: who keeps the ledger" in last or "Q: and follow-up" in last


def test_agent_follow_up_gets_the_earlier_turns_as_messages(kernel_notes, loom_home):
    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "anthropic", llm.url)
        loom("ask", "--agent", "which key does the kernel listen to?")
        done = loom("ask", "--agent", "-c", "and how do I reboot with it?", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    follow = chats[3]["body"]["messages"]
    assert follow[0] == {"role": "user", "content": "which key does the kernel listen to?"}
    assert follow[1]["role"] == "assistant" and SYSRQ in json.dumps(follow[1])
    assert follow[2]["content"] == "and how do I reboot with it?"


def test_chat_asks_in_a_loop_from_stdin_lines(kernel_notes, loom_home):
    with ToolLLM(plain("Paid by transfer [finance/invoices.md].")) as llm:
        configure(loom_home, "openai", llm.url)
        done = loom("chat", stdin="how are invoices paid?\n\nand the ledger?\nexit\nnot asked\n")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Paid by transfer [finance/invoices.md].") == 2
    assert len(chats) == 2
    assert [t[1:] for t in conversation_turns(loom_home)] == [
        (1, "how are invoices paid?"), (2, "and the ledger?")]
    assert "how are invoices paid?" in json.dumps(chats[1]["body"])


# -- Ctrl-C ------------------------------------------------------------------------------

def test_ctrl_c_in_the_loop_exits_130_and_keeps_the_last_complete_turn(kernel_notes,
                                                                      loom_home):
    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "ollama", llm.url)
        assert loom("ask", "--agent", "which key?").returncode == 0
        llm.stall_at = len(llm.requests) + 2  # the follow-up's second model call
        proc = subprocess.Popen(
            [*LOOM, "ask", "--agent", "-c", "and how do I reboot?"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env={**os.environ},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert llm.arrived.wait(60), "the second model call never came"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        llm.release.set()
    assert proc.returncode == 130, err
    assert "→ loom_grep SysRq" in err  # the first step ran and was shown
    assert "Traceback" not in err
    assert [t[1:] for t in conversation_turns(loom_home)] == [(1, "which key?")]


# -- MCP and HTTP -------------------------------------------------------------------------

def test_mcp_loom_ask_takes_and_returns_conversation_id_and_steps(kernel_notes, loom_home):
    from .test_mcp import run_session, structured

    async def body(client):
        first = structured(await client.call_tool("loom_ask", {
            "question": "which key does the kernel listen to?", "agent": True}))
        follow = structured(await client.call_tool("loom_ask", {
            "question": "and how do I reboot?", "agent": True,
            "conversation_id": first["conversation_id"]}))
        unknown = await client.call_tool("loom_ask", {"question": "x",
                                                      "conversation_id": "nope"})
        return first, follow, unknown

    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "ollama", llm.url)
        first, follow, unknown = run_session(loom_home, body)
    assert [s["tool"] for s in first["steps"]] == ["loom_grep", "loom_get_file"]
    assert follow["conversation_id"] == first["conversation_id"]
    assert SYSRQ in follow["answer"]
    assert unknown.is_error and "no conversation 'nope'" in unknown.content[0].text
    assert [t[1] for t in conversation_turns(loom_home)] == [1, 2]


def test_http_ask_takes_conversation_id_and_streams_steps(kernel_notes, loom_home):
    import urllib.request

    from .test_http import Server

    with ToolLLM(investigator("SysRq")) as llm:
        configure(loom_home, "openai", llm.url)
        s = Server()
        try:
            status, first = s.call("POST", "/ask", {"question": "which key?", "agent": True})
            request = urllib.request.Request(
                s.url + "/ask", method="POST", headers={"Content-Type": "application/json"},
                data=json.dumps({"question": "and how do I reboot?", "agent": True,
                                 "stream": True,
                                 "conversation_id": first["conversation_id"]}).encode())
            with urllib.request.urlopen(request, timeout=60) as resp:
                events = [json.loads(line) for line in resp]
            bad = s.call("POST", "/ask", {"question": "x", "conversation_id": 5})
            missing = s.call("POST", "/ask", {"question": "x", "conversation_id": "nope",
                                              "stream": True})
        finally:
            s.stop()
    assert status == 200 and [st["tool"] for st in first["steps"]] == ["loom_grep",
                                                                      "loom_get_file"]
    assert [e["step"]["tool"] for e in events if "step" in e] == ["loom_grep",
                                                                 "loom_get_file"]
    done = events[-1]
    assert done["done"] is True and done["conversation_id"] == first["conversation_id"]
    assert SYSRQ in "".join(e.get("text", "") for e in events)
    assert bad[0] == 400 and "conversation_id must be a" in bad[1]["error"]
    assert missing[0] == 404 and "no conversation 'nope'" in missing[1]["error"]
