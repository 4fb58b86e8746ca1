"""loom ask against a real HTTP server on loopback speaking each provider's API."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli import ask, config
from loomcli.extract import Extracted
from loomcli.search.text import retrieval_query
from loomcli.store import Store

from .conftest import bm25_hits, write
from .llm_server import FakeLLM

LOOM = [sys.executable, "-m", "loomcli"]
pytestmark = pytest.mark.plain  # also run on a plain install (.ci/run)


@pytest.fixture
def indexed(scanned_notes):
    return scanned_notes


@pytest.fixture
def llm():
    with FakeLLM() as server:
        yield server


def configure(loom_home, provider: str, endpoint: str, **extra: str) -> None:
    lines = [f'[llm]\nprovider = "{provider}"\nmodel = "test-model"\nendpoint = "{endpoint}"']
    lines += [f'{k} = "{v}"' for k, v in extra.items()]
    write(loom_home / "config.toml", "\n".join(lines) + "\ntimeout_s = 3\n")


def loom(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


# -- the prompt -----------------------------------------------------------------------------

def big_store(tmp_path) -> Store:
    s = Store.open(tmp_path / "i.db", create=True)
    with s.transaction():
        root = s.ensure_root(tmp_path / "n")
        for i in range(8):
            body = "".join(f"Line {j} of file {i} about looms and warp threads.\n"
                           for j in range(300 + 50 * i))
            s.add_file(root.id, f"f{i}.md", "note", 1, 1, bytes([i]), Extracted(body, f"F{i}"))
        s.add_file(root.id, "copy.md", "note", 1, 1, bytes([0]),
                   Extracted("".join(f"Line {j} of file 0 about looms and warp threads.\n"
                                     for j in range(300)), "F0"))
    return s


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(question=st.text(min_size=1, max_size=80), top_k=st.integers(1, 10),
       budget=st.integers(200, 6000), head=st.integers(0, 3000))
def test_prompt_never_exceeds_top_k_budgets_plus_instructions(tmp_path_factory, question,
                                                              top_k, budget, head):
    store = big_store(tmp_path_factory.mktemp("p"))
    hits = bm25_hits(store, retrieval_query(question + " warp"), top_k * 2, "OR")
    prompt = ask.build_prompt(store, question + " warp", hits, top_k=top_k, budget=budget,
                              head_chars=head)
    assert prompt is not None
    fixed = len(ask.INSTRUCTIONS) + len("\n" + ask.question_block(question + " warp"))
    assert len(prompt.system) + len(prompt.user) <= top_k * budget + fixed
    assert len(prompt.used) <= top_k
    store.close()


def test_same_content_is_sent_once(tmp_path):
    store = big_store(tmp_path)
    hits = bm25_hits(store, "file 0 looms warp", 18, "OR")
    prompt = ask.build_prompt(store, "file 0 looms warp", hits, top_k=9, budget=2000,
                              head_chars=300)
    assert prompt is not None
    paths = [u.path for u in prompt.used]
    assert not {"f0.md", "copy.md"} <= set(paths)


def test_citations_are_only_paths_that_were_sent():
    used = [ask.UsedFile("a.md", "A", 1), ask.UsedFile("b/c.pdf", "C", 1)]
    text = "See [a.md] and [b/c.pdf, a.md] but not [z.md] or [1]."
    assert ask.citations(text, used) == ["a.md", "b/c.pdf"]


# -- providers through the CLI ----------------------------------------------------------------

@pytest.mark.parametrize("provider,path", [("ollama", "/api/chat"),
                                           ("openai", "/v1/chat/completions"),
                                           ("anthropic", "/v1/messages")])
def test_streams_the_answer_then_the_cited_sources(indexed, loom_home, llm, provider, path):
    configure(loom_home, provider, llm.url, api_key_env="LOOM_TEST_KEY")
    proc = loom("ask", "Which", "invoice", "covers", "the", "madder", "root?",
                env={"LOOM_TEST_KEY": "sk-secret"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("The answer is here [manuals/field-guide.pdf].\n\nSources:\n"
                           "  manuals/field-guide.pdf@0 pp. 1-5  Field Guide to the Loom "
                           "Workshop\n")
    [req] = llm.chats()
    assert req["path"] == path
    body = req["body"]
    assert body["model"] == "test-model" and body["stream"] is True
    system = body["system"] if provider == "anthropic" else body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    assert system == ask.INSTRUCTIONS
    assert "## [manuals/field-guide.pdf pp. 1-5] Field Guide to the Loom Workshop" in user
    assert "Invoice FT-2026-0412 covers the madder root" in user
    assert user.endswith("Question: Which invoice covers the madder root?\n")
    headers = {k.lower(): v for k, v in req["headers"].items()}
    if provider == "openai":
        assert headers["authorization"] == "Bearer sk-secret"
    if provider == "anthropic":
        assert headers["x-api-key"] == "sk-secret" and headers["anthropic-version"]
    assert "sk-secret" not in (loom_home / "config.toml").read_text()


def test_json_output(indexed, loom_home, llm):
    configure(loom_home, "openai", llm.url + "/v1")
    data = json.loads(loom("ask", "madder root invoice", "--json").stdout)
    assert list(data) == ["answer", "citations", "used", "sources", "quotes", "context",
                          "timings", "conversation_id", "steps"]
    assert data["citations"] == ["manuals/field-guide.pdf"]
    assert list(data["used"][0]) == ["path", "title", "content_len"]


def test_show_context_prints_the_prompt_and_calls_nothing(indexed, loom_home, llm):
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "--show-context", "madder root invoice")
    assert proc.returncode == 0 and llm.chats() == []
    header, _, rest = proc.stdout.partition("\n")
    assert header.startswith("[context] window 16,384 tokens (ollama /api/show), prompt ~")
    assert rest.startswith("[system]\n" + ask.INSTRUCTIONS + "\n\n[user]\n## [")
    assert proc.stdout.endswith("Question: madder root invoice\n")


def test_no_match_says_so_and_calls_nothing(indexed, loom_home, llm):
    configure(loom_home, "ollama", llm.url)
    proc = loom("ask", "xylophone quasar zeppelin")
    assert proc.returncode == 1 and llm.chats() == []
    assert "no indexed file matches the question" in proc.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_provider_is_one_clear_line(indexed, loom_home):
    endpoint = f"http://127.0.0.1:{free_port()}"
    configure(loom_home, "ollama", endpoint)
    proc = loom("ask", "madder root")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"loom: cannot reach ollama at {endpoint}: ")
    assert "ollama serve" in proc.stderr


@pytest.mark.parametrize("status,expect", [
    (401, " refused the API key (HTTP 401): bad key — set a valid key in $LOOM_TEST_KEY"),
    (404, ": model 'test-model' or its API was not found (HTTP 404): bad key — "
          "check [llm] model and [llm] endpoint"),
    (500, " answered HTTP 500: bad key — check the server's log, or try again"),
])
def test_provider_errors_name_the_endpoint_and_the_next_step(indexed, loom_home, llm, status,
                                                               expect):
    configure(loom_home, "openai", llm.url, api_key_env="LOOM_TEST_KEY")
    llm.behaviour.status, llm.behaviour.error = status, "bad key"
    proc = loom("ask", "madder root", env={"LOOM_TEST_KEY": "sk-wrong"})  # unset: said first
    assert proc.returncode == 2
    assert proc.stderr == f"loom: {llm.url}{expect}\n"


def test_timeout_is_reported(indexed, loom_home, llm):
    configure(loom_home, "ollama", llm.url)
    llm.behaviour.stall_s = 5
    proc = loom("ask", "madder root")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"loom: no answer from {llm.url} within 3s")


def test_missing_model_and_key_are_config_errors(indexed, loom_home):
    write(loom_home / "config.toml", '[llm]\nprovider = "ollama"\n')
    assert "loom config set llm.model" in loom("ask", "madder").stderr
    write(loom_home / "config.toml", '[llm]\nprovider = "anthropic"\nmodel = "m"\n'
                                     'api_key_env = "LOOM_UNSET_KEY_X"\n')
    proc = loom("ask", "madder")
    assert proc.returncode == 2 and "$LOOM_UNSET_KEY_X is not set" in proc.stderr


def test_config_defaults_are_used(tmp_path):
    cfg = config.load()
    assert (cfg.get("ask.top_k"), cfg.get("ask.file_budget_chars"),
            cfg.get("ask.head_chars")) == (5, 8000, 1200)
