"""Hostile models against `loom ask` (plain and --agent) and text that is not UTF-8 on
loom's command line: real `loom` processes, scripted models on loopback
(tests/tool_llm_server.py, tests/llm_server.py) in each API's own shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.ask import agent
from loomcli.providers import Message, ToolCall

from .conftest import write
from .llm_server import FakeLLM
from .test_agent import PROTOCOLS, SYSRQ, configure, loom
from .tool_llm_server import Call, Endless, Limits, ToolLLM, Turn

FAST = [sys.executable, "-m", "loomcli"]  # the console entry: grep and get take the fast path
TYPER = [sys.executable, "-c", "from loomcli.cli import main; main()"]  # typer always
ESCAPES = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066")  # none may reach the terminal raw


@pytest.fixture
def notes_k(tmp_path, loom_home):
    notes = tmp_path / "notes"
    filler = "".join(f"Paragraph {i} describes another part of the guide.\n" for i in range(50))
    write(notes / "admin" / "sysrq.rst", f"SysRq\n=====\n\n{filler}{SYSRQ}\n{filler}")
    write(notes / "loom" / "warp.md", "# Warp\n\nThe warp threads run lengthwise.\n")
    subprocess.run([*FAST, "scan", str(notes)], check=True, capture_output=True)
    return notes


def configure_llm(loom_home: Path, provider: str, url: str, **llm: object) -> None:
    """As test_agent.configure, with more [llm] keys."""
    configure(loom_home, provider, url)
    with open(loom_home / "config.toml", "a", encoding="utf-8") as f:
        f.write("".join(f"{k} = {json.dumps(v)}\n" for k, v in llm.items()))


def tools_then(calls: list[Call], answer: str = "done") -> object:
    """A brain that makes `calls` in its first message, then answers with what the tools
    returned (so a test sees what came back)."""

    def brain(turns: list[Turn], tools_offered: bool) -> list:
        results = [t.result() for t in turns if t.role == "tool"]
        if tools_offered and not results:
            return list(calls)
        return [answer + " " + json.dumps(results)]

    return brain


# -- 1. many calls in one message; one huge argument ----------------------------------------

def test_fitting_a_request_is_linear_in_its_messages() -> None:
    """2,000 tool results far over the budget: each message's tokens are estimated about
    once (a running total), not the whole request again for every result folded."""
    older, newest = 1990, 10
    calls = [ToolCall(f"c{i}", "loom_search", {"query": f"q{i}"})
             for i in range(older + newest)]
    messages = [Message("system", agent.INSTRUCTIONS), Message("user", "q?"),
                Message("assistant", "", tool_calls=calls[:older])]
    messages += [Message("tool", json.dumps({"hits": [{"path": f"f{i}.md", "content":
                                                      "warp " * 200}]}),
                         tool_call_id=f"c{i}", name="loom_search") for i in range(older)]
    messages.append(Message("assistant", "", tool_calls=calls[older:]))
    messages += [Message("tool", json.dumps({"hits": []}), tool_call_id=f"c{i}",
                         name="loom_search") for i in range(older, older + newest)]
    estimated = [0]

    def estimate(text: str) -> int:
        estimated[0] += 1
        return (len(text.encode("utf-8")) + 2) // 3

    budget = 20_000
    fitted = agent.fit_messages(messages, agent.specs(), budget, estimate)
    assert agent.request_tokens(fitted, agent.specs(), lambda t: (len(t.encode()) + 2) // 3) \
        <= budget
    # messages, their calls, and each changed message once or twice more
    assert estimated[0] < 4 * (len(messages) + len(calls)), estimated[0]
    assert fitted[-newest - 1] == messages[-newest - 1]  # the newest round, with its results
    assert [m.tool_call_id for m in fitted[-newest:]] == [f"c{i}" for i in range(older, 2000)]


@pytest.mark.parametrize("protocol", ["ollama", "openai-streamed", "anthropic"])
def test_a_message_with_a_thousand_calls_runs_at_most_its_share(notes_k, loom_home,
                                                                protocol):
    provider, stream = PROTOCOLS[protocol]
    calls = [Call("loom_search", {"query": f"warp {i}"}) for i in range(1000)]
    with ToolLLM(tools_then(calls), Limits(stream=stream)) as llm:
        configure(loom_home, provider, llm.url)
        done = loom("ask", "--agent", "warp?", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["steps"]) == 6  # [ask] max_steps
    [asked] = [t for t in chats[1]["turns"] if t.calls]
    assert len(asked.calls) == agent.CALLS_PER_MESSAGE + 1  # the rest are not re-sent
    results = [t.result() for t in chats[1]["turns"] if t.role == "tool"]
    assert len(results) == agent.CALLS_PER_MESSAGE + 1
    assert "at most 16 tool calls of one message are run, and 984 more were left out" \
        in results[-1]["error"]


def test_a_7_mb_argument_is_not_run_nor_sent_again(notes_k, loom_home):
    huge = "warp " * ((7 << 20) // 5)
    calls = [Call("loom_search", {"query": huge}), Call("loom_grep", {"pattern": "warp"})]
    # OpenAI streams arguments in fragments: 512 KB each, every event under the line cap.
    with ToolLLM(tools_then(calls), Limits(fragment_chars=512 << 10)) as llm:
        configure(loom_home, "openai", llm.url)
        done = loom("ask", "--agent", "warp?", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(chats) == 2
    later = json.dumps(chats[1]["body"])
    assert len(later) < 100_000  # not the 7 MB again
    [asked] = [t for t in chats[1]["turns"] if t.calls]
    assert asked.calls[0].arguments == {"cut": f"{len(json.dumps({'query': huge})):,} "
                                               "characters of arguments, left out"}
    first, second = [t.result() for t in chats[1]["turns"] if t.role == "tool"]
    assert "more than the 4,000 a call may have" in first["error"]
    assert second["matches"]  # the sane call beside it ran
    assert [s["tool"] for s in out["steps"]] == ["loom_search", "loom_grep"]
    assert len(json.dumps(out["steps"])) < 2000


# -- 5. arguments that are not JSON, or not an object --------------------------------------

BAD_ARGUMENTS = {"not JSON": '{"query": "warp', "a list": "[1, 2]", "a string": '"warp"',
                 "a number": "7"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_arguments_that_are_not_a_json_object_go_back_to_the_model(notes_k, loom_home,
                                                                   protocol):
    provider, stream = PROTOCOLS[protocol]
    calls = [Call("loom_search", {}, raw=raw) for raw in BAD_ARGUMENTS.values()]
    calls.append(Call("loom_grep", {"pattern": "SysRq"}))
    with ToolLLM(tools_then(calls), Limits(stream=stream)) as llm:
        configure(loom_home, provider, llm.url)
        done = loom("ask", "--agent", "which key?", "--json")
        chats = llm.chats()
    assert done.returncode == 0, done.stderr
    results = [t.result() for t in chats[1]["turns"] if t.role == "tool"]
    assert len(results) == 5 and results[-1]["matches"]
    errors = [r["error"] for r in results[:4]]
    assert "not JSON" in errors[0]
    assert "a JSON list, not an object" in errors[1]
    # Ollama sends a JSON value; a string there is taken as JSON text, as some builds send
    assert ("not JSON: 'warp'" if provider == "ollama" else "a JSON str, not an object") \
        in errors[2]
    assert "a JSON int, not an object" in errors[3]
    assert all("must be one JSON object" in e for e in errors)
    assert not any(c.get("refused") for c in chats)  # what went back was each API's shape


def test_bad_arguments_are_a_step_line_not_the_end(notes_k, loom_home):
    calls = [Call("loom_grep", {}, raw="pattern=SysRq")]
    with ToolLLM(tools_then(calls, "no luck")) as llm:
        configure(loom_home, "openai", llm.url)
        done = loom("ask", "--agent", "which key?")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("→ loom_grep · bad arguments · ")
    assert done.stdout.startswith("no luck")


# -- 6. text that is not UTF-8 -------------------------------------------------------------

def run_bytes(way: list[str], *args: bytes, stdin: bytes | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*way, *args], capture_output=True, input=stdin, timeout=120,
                          cwd=cwd, env={**os.environ, "LC_ALL": "C.UTF-8"})


@pytest.fixture
def odd_names(tmp_path, loom_home):
    notes = tmp_path / "notes"
    write(notes / "café.md", "# Café\n\nThe espresso machine is descaled on Fridays.\n")
    write(notes / "plain.md", "# Plain\n\nNothing odd here.\n")
    subprocess.run([*FAST, "scan", str(notes)], check=True, capture_output=True)
    return notes


@pytest.mark.parametrize("way", [FAST, TYPER], ids=["fast", "typer"])
@pytest.mark.parametrize("args,name", [
    ((b"grep", b"caf\xe9"), b"pattern 'caf\\xe9'"),
    ((b"grep", b"espresso", b"--path", b"caf\xe9.md"), b"path 'caf\\xe9.md'"),
    ((b"grep", b"espresso", b"-g", b"caf\xe9*"), b"glob 'caf\\xe9*'"),
    ((b"get", b"caf\xe9.md"), b"path 'caf\\xe9.md'"),
    ((b"get", b"./caf\xe9.md"), b"path './caf\\xe9.md'"),
    ((b"search", b"caf\xe9"), b"query 'caf\\xe9'"),
])
def test_argv_bytes_that_are_not_utf8_are_one_clear_line(odd_names, way, args, name):
    done = run_bytes(way, *args, cwd=odd_names)
    assert done.returncode == 2, done.stderr
    assert done.stderr == b"loom: " + name + b" is not valid UTF-8 text \xe2\x80\x94 loom's " \
        b"index holds UTF-8 text and names only: give it in UTF-8\n"


@pytest.mark.parametrize("way", [FAST, TYPER], ids=["fast", "typer"])
def test_a_name_given_as_utf8_bytes_finds_the_file(odd_names, way):
    got = run_bytes(way, b"get", "café.md".encode(), cwd=odd_names)
    assert got.returncode == 0 and b"espresso" in got.stdout
    on_disk = run_bytes(way, b"get", "./café.md".encode(), cwd=odd_names)
    assert on_disk.stdout == got.stdout
    grep = run_bytes(way, b"grep", b"espresso", b"--path", "café.md".encode())
    assert grep.returncode == 0 and grep.stdout.startswith("café.md:3:".encode())


def test_a_question_or_chat_line_with_bytes_not_utf8_is_asked(odd_names, loom_home):
    with FakeLLM() as llm:
        llm.behaviour.answer = ["Fridays [café.md]."]
        configure(loom_home, "ollama", llm.url)
        asked = run_bytes(TYPER, b"ask", b"when is the espresso machine descaled \xff?")
        chat = run_bytes(TYPER, b"chat", stdin=b"espresso descaled \xfe\xff?\n")
        sent = [c["body"]["messages"][-1]["content"] for c in llm.chats()]
    assert asked.returncode == 0, asked.stderr
    assert chat.returncode == 0, chat.stderr
    assert asked.stdout.startswith(b"Fridays")
    assert "descaled \ufffd?" in sent[0] and "descaled \ufffd\ufffd?" in sent[1]


@pytest.mark.parametrize("protocol", ["ollama", "openai-streamed", "anthropic"])
def test_a_lone_surrogate_from_the_model_is_never_an_internal_error(notes_k, loom_home,
                                                                    protocol):
    provider, stream = PROTOCOLS[protocol]
    calls = [Call("loom_grep", {}, raw='{"pattern": "SysRq\\udcff"}'),
             Call("loom_search\\ud800", {}, raw='{"query": "x"}')]
    with ToolLLM(tools_then(calls, "answer \udcff"), Limits(stream=stream)) as llm:
        configure(loom_home, provider, llm.url)
        as_json = loom("ask", "--agent", "which key?", "--json")
        plain = loom("ask", "--agent", "which key?")
    for done in (as_json, plain):
        assert done.returncode == 0, done.stderr
        assert "internal error" not in done.stderr
    out = json.loads(as_json.stdout)
    assert out["answer"].startswith("answer \ufffd")
    assert out["steps"][0]["arguments"] == {"pattern": "SysRq\ufffd"}
    assert "\\udcff" not in plain.stderr


# -- 8. what the model says reaches the terminal inert -------------------------------------

def test_escape_sequences_from_the_model_are_shown_not_run(notes_k, loom_home):
    calls = [Call("loom_grep\x1b]0;owned\x07", {"pattern": "x"}),
             Call("loom_grep", {"pattern": "\x1b[2J\x1b[H\u202eSysRq\u2066\x9b31m"})]
    with ToolLLM(tools_then(calls, "The answer\x1b[2J is \u202eevil\x1b]0;title\x07.\n"
                                   "Second line.")) as llm:
        configure(loom_home, "openai", llm.url)
        done = loom("ask", "--agent", "which key?")
        as_json = loom("ask", "--agent", "which key?", "--json")
    assert done.returncode == 0, done.stderr
    for shown in (done.stderr, done.stdout):
        assert not any(c in shown for c in ESCAPES), repr(shown)
    lines = done.stderr.splitlines()
    assert lines[0].startswith("→ loom_grep\\x1b]0;owned\\x07 x · unknown tool · ")
    assert lines[1].startswith("→ loom_grep \\x1b[2J\\x1b[H\\u202eSysRq\\u2066\\x9b31m · ")
    assert done.stdout.startswith("The answer\\x1b[2J is \\u202eevil\\x1b]0;title\\x07.\n"
                                  "Second line.")
    # --json stays exact: JSON escapes them itself.
    assert json.loads(as_json.stdout)["answer"].startswith("The answer\x1b[2J")


def test_a_server_error_message_is_shown_inert(notes_k, loom_home):
    with FakeLLM() as llm:
        llm.behaviour.status, llm.behaviour.error = 500, "boom\x1b[2J\x1b]0;t\x07\u202e"
        configure(loom_home, "openai", llm.url)
        done = loom("ask", "which key?")
    assert done.returncode == 2
    assert not any(c in done.stderr for c in ESCAPES), repr(done.stderr)
    assert "boom\\x1b[2J\\x1b]0;t\\x07\\u202e" in done.stderr


# -- 13. a model that never stops ----------------------------------------------------------

@pytest.mark.parametrize("protocol", ["ollama", "openai-streamed", "anthropic"])
def test_an_endless_answer_is_cut_at_twice_its_reserve_and_kept(notes_k, loom_home,
                                                                protocol):
    provider, _ = PROTOCOLS[protocol]
    with ToolLLM(lambda turns, tools_offered: ["Alt+SysRq+B reboots. ", Endless("more ")]
                 ) as llm:
        configure_llm(loom_home, provider, llm.url, max_answer_tokens=300)
        done = loom("ask", "which key reboots?")
        assert llm.hung_up.wait(30)  # loom hung up on it
        conversation = loom("ask", "--continue", "and then?", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Alt+SysRq+B reboots. more more ")
    answer = done.stdout.split("\n\nSources:")[0]
    assert 600 < answer.count("more") < 1000  # 2 x 300 tokens, estimated in runs
    [warning] = [x for x in done.stderr.splitlines() if x.startswith("loom:")]
    assert warning == ("loom: warning: the model went on past ~600 tokens, twice the "
                       "answer's reserve: its answer is cut there")
    assert conversation.returncode == 0  # the cut answer was kept as the turn


def test_a_slow_endless_agent_answer_shows_progress_and_stops_at_the_deadline(notes_k,
                                                                               loom_home):
    def brain(turns: list[Turn], tools_offered: bool) -> list:
        if tools_offered and not any(t.role == "tool" for t in turns):
            return [Call("loom_grep", {"pattern": "SysRq"})]
        return ["Slowly: ", Endless("more ", every_s=0.5)]

    with ToolLLM(brain) as llm:
        configure_llm(loom_home, "ollama", llm.url, answer_timeout_s=7)
        done = loom("ask", "--agent", "which key?", "--json")
        assert llm.hung_up.wait(30)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"].startswith("Slowly: more more")
    assert 5 < out["answer"].count("more") < 20
    lines = done.stderr.splitlines()
    assert lines[0].startswith("→ loom_grep SysRq · ")
    assert any(x.startswith("… the model is writing (call 2: ") for x in lines), lines
    assert lines[-1] == (f"loom: warning: {llm.url} was still answering after 7s: the "
                         "answer is cut there")
    assert out["warnings"] == [lines[-1].removeprefix("loom: warning: ")]
