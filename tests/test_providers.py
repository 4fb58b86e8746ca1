"""The provider seam against loopback servers speaking each API: text, tool calls in each
API's own shape, the window each server tells, and malformed or endless streams."""

from __future__ import annotations

import json
import resource

import pytest

from loomcli import config, providers
from loomcli.errors import ContextExceeded, ProviderError, ToolsUnsupported
from loomcli.providers import Message, ToolCall, ToolSpec

from .conftest import write
from .llm_server import FakeLLM

KINDS = ["ollama", "openai", "anthropic"]
SEARCH = ToolSpec("search", "Search the notes", {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server
    providers._WINDOWS.clear()  # each server is new; so is what it said


def provider(loom_home, kind: str, endpoint: str, **extra: object) -> providers.Provider:
    lines = [f'[llm]\nprovider = "{kind}"\nmodel = "test-model"\nendpoint = "{endpoint}"',
             "timeout_s = 5"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    write(loom_home / "config.toml", "\n".join(lines) + "\n")
    return providers.from_config(config.load())


@pytest.fixture(autouse=True)
def anthropic_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")


# -- tool calls, each in its API's own shape ---------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_chat_yields_text_then_tool_calls(loom_home, llm, kind):
    llm.behaviour.answer = ["Let me ", "look."]
    llm.behaviour.tool_calls = [("search", {"query": "warp threads", "limit": 3}),
                                ("search", {"query": "weft"})]
    p = provider(loom_home, kind, llm.url)
    out = list(p.chat([Message("system", "be brief"), Message("user", "what is warp?")],
                      tools=[SEARCH]))
    assert out == ["Let me ", "look.",
                   ToolCall(out[2].id, "search", {"query": "warp threads", "limit": 3}),
                   ToolCall(out[3].id, "search", {"query": "weft"})]
    assert out[2].id and out[2].id != out[3].id
    body = llm.chats()[-1]["body"]
    if kind == "anthropic":
        assert body["system"] == "be brief"
        assert [m["role"] for m in body["messages"]] == ["user"]
        assert body["tools"] == [{"name": "search", "description": "Search the notes",
                                  "input_schema": SEARCH.parameters}]
    else:
        assert body["messages"][0] == {"role": "system", "content": "be brief"}
        assert body["tools"] == [{"type": "function", "function": {
            "name": "search", "description": "Search the notes",
            "parameters": SEARCH.parameters}}]


def test_openai_non_streamed_answer_with_tool_calls(loom_home, llm):
    llm.behaviour.non_stream = True
    llm.behaviour.answer = ["Whole answer."]
    llm.behaviour.tool_calls = [("search", {"query": "heddle"})]
    out = list(provider(loom_home, "openai", llm.url).chat([Message("user", "q")],
                                                           tools=[SEARCH]))
    assert out == ["Whole answer.", ToolCall("call_0", "search", {"query": "heddle"})]


@pytest.mark.parametrize("kind", KINDS)
def test_tool_results_go_back_in_the_apis_shape(loom_home, llm, kind):
    call = ToolCall("c1", "search", {"query": "warp"})
    history = [Message("system", "sys"), Message("user", "q"),
               Message("assistant", "", tool_calls=[call]),
               Message("tool", "3 hits", tool_call_id="c1", name="search")]
    list(provider(loom_home, kind, llm.url).chat(history, tools=[SEARCH]))
    msgs = llm.chats()[-1]["body"]["messages"]
    if kind == "ollama":
        assert msgs[2]["tool_calls"] == [{"function": {"name": "search",
                                                       "arguments": {"query": "warp"}}}]
        assert msgs[3] == {"role": "tool", "content": "3 hits", "tool_name": "search"}
    elif kind == "openai":
        assert msgs[2]["tool_calls"] == [{"id": "c1", "type": "function", "function": {
            "name": "search", "arguments": '{"query": "warp"}'}}]
        assert msgs[3] == {"role": "tool", "content": "3 hits", "tool_call_id": "c1",
                           "name": "search"}
    else:
        assert msgs[1] == {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "search", "input": {"query": "warp"}}]}
        assert msgs[2] == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "3 hits"}]}


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_a_model_without_tools_is_tools_unsupported(loom_home, llm, kind):
    llm.behaviour.no_tools = True
    p = provider(loom_home, kind, llm.url)
    with pytest.raises(ToolsUnsupported, match="does not take tools"):
        list(p.chat([Message("user", "q")], tools=[SEARCH]))
    assert list(p.stream("s", "u"))  # without tools the same model answers


# -- the window each server tells --------------------------------------------------------------

def test_ollama_window_from_api_show_and_num_ctx_sent(loom_home, llm):
    llm.behaviour.model_length = 131072
    p = provider(loom_home, "ollama", llm.url)
    assert p.window() == providers.Window(131072, "ollama /api/show")
    assert p.window().tokens == 131072
    assert [r["path"] for r in llm.requests] == ["/api/show"]  # asked once
    list(p.chat([Message("user", "q")], context_tokens=8192, max_tokens=512))
    assert llm.chats()[-1]["body"]["options"] == {"num_ctx": 8192, "num_predict": 512}


def test_llama_cpp_window_from_props(loom_home, llm):
    llm.behaviour.window = 4096
    assert provider(loom_home, "openai", llm.url).window() == providers.Window(
        4096, "llama.cpp /props")


@pytest.mark.parametrize("told_by,source", [("vllm", "vllm /v1/models"),
                                            ("lmstudio", "lm studio /api/v0/models")])
def test_vllm_and_lm_studio_windows(loom_home, llm, told_by, source):
    llm.behaviour.window, llm.behaviour.told_by = 6144, told_by
    assert provider(loom_home, "openai", llm.url + "/v1").window() == providers.Window(
        6144, source)


def test_openai_without_a_told_window_is_the_default(loom_home, llm):
    assert provider(loom_home, "openai", llm.url).window() == providers.Window(
        providers.DEFAULT_WINDOW, "default")


@pytest.mark.parametrize("kind", KINDS)
def test_config_context_tokens_wins(loom_home, llm, kind):
    llm.behaviour.window = 4096
    p = provider(loom_home, kind, llm.url, context_tokens=3000)
    assert p.window() == providers.Window(3000, "config")


def test_anthropic_known_window(loom_home, llm):
    assert provider(loom_home, "anthropic", llm.url).window().tokens == 200_000


def test_llama_cpp_refusal_is_context_exceeded(loom_home, llm):
    llm.behaviour.window = 64
    p = provider(loom_home, "openai", llm.url)
    with pytest.raises(ContextExceeded, match="exceeds the available context size") as err:
        list(p.stream("instructions " * 200, "question"))
    assert "context_tokens" in err.value.hint


# -- malformed, oversized and endless streams --------------------------------------------------

ODD_SHAPES = {
    "openai": [b'data: {"choices": "oops"}\n\n', b"data: [null]\n\n", b'data: "a string"\n\n',
               b'data: {"choices": [{"delta": {"content": 5}}]}\n\n',
               b'data: {"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}\n\n'],
    "ollama": [b'{"message": "x"}\n', b"[null]\n", b'"a string"\n', b"not json\n",
               b'{"message": {"content": ["a"]}}\n'],
    # (tool arguments that are not an object: a tool error for the model, test_agent_hostile)
    "anthropic": [b'data: {"type": "content_block_delta", "delta": "x"}\n\n',
                  b"data: [1, 2]\n\n",
                  b'data: {"type": "content_block_delta", "delta": {"text": {"a": 1}}}\n\n'],
}


@pytest.mark.parametrize("kind,raw", [(k, r) for k, rs in ODD_SHAPES.items() for r in rs])
def test_valid_json_of_another_shape_is_one_provider_error(loom_home, llm, kind, raw):
    llm.behaviour.raw = [raw]
    p = provider(loom_home, kind, llm.url)
    with pytest.raises(ProviderError) as err:
        list(p.chat([Message("user", "q")], tools=[SEARCH]))
    assert type(err.value) is ProviderError
    assert "shape" in err.value.message and "\n" not in str(err.value)


def test_a_600_mb_line_stops_at_the_cap_in_bounded_memory(loom_home, llm):
    llm.behaviour.huge_line_bytes = 600 << 20
    p = provider(loom_home, "ollama", llm.url)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with pytest.raises(ProviderError, match="a line of more than"):
        list(p.stream("s", "u"))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 3 * providers.MAX_LINE_BYTES / (1 << 20) + 16


def test_an_endless_answer_stops_at_the_cap(loom_home, llm):
    llm.behaviour.endless = True
    p = provider(loom_home, "ollama", llm.url)
    pieces = 0
    with pytest.raises(ProviderError, match="more than .* bytes for one answer"):
        for _ in p.stream("s", "u"):
            pieces += 1
    assert pieces > 1000
    assert llm.closed.wait(30)  # the server saw loom hang up
