"""The reading tools are defined once: MCP offers what the agent offers, and a result
capped for a model's window keeps its shape and its `loom get` meaning."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli import tools
from loomcli.errors import QueryError
from loomcli.operations import Corpus

from .conftest import write
from .test_mcp import run_session


def _plain(schema: dict) -> dict:
    """A JSON schema without pydantic's titles, for comparison."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def test_mcp_offers_the_agents_tool_definitions(scanned_notes, loom_home):
    async def body(client):
        return {t.name: t for t in (await client.list_tools()).tools}

    listed = run_session(loom_home, body)
    for tool in tools.READING.values():
        got = listed[tool.name]
        assert got.description == tool.description
        schema = _plain(got.input_schema)
        assert schema["required"] == tool.parameters["required"]
        assert set(schema["properties"]) == set(tool.parameters["properties"])
        for name, prop in tool.parameters["properties"].items():
            mine = {k: v for k, v in prop.items() if k != "enum"}
            assert schema["properties"][name] == mine, (tool.name, name)


@pytest.fixture
def corpus(tmp_path, loom_home):
    import subprocess
    import sys

    notes = tmp_path / "notes"
    write(notes / "codes.md", "".join(f"line {i}: code FT-2026-{i:04d} paid\n"
                                      for i in range(400)))
    write(notes / "long.md", "# Long\n\n" + "Ünïcode wörds and «quotes» \"here\".\n" * 3000)
    subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                   capture_output=True)
    from loomcli import config

    return Corpus(config.load())


def test_a_call_with_unknown_or_missing_arguments_is_refused(corpus):
    with pytest.raises(QueryError, match="unknown argument 'patern'"):
        tools.GREP.call(corpus, {"patern": "x"})
    with pytest.raises(QueryError, match="pattern is required"):
        tools.GREP.call(corpus, {})
    with pytest.raises(QueryError, match="limit must be a whole number"):
        tools.GREP.call(corpus, {"pattern": "x", "limit": "5"})


def test_results_are_the_operations_json(corpus):
    got = tools.GREP.call(corpus, {"pattern": "FT-2026-0007"})
    assert got == corpus.grep("FT-2026-0007").to_dict()
    assert tools.GREP.summary(got) == "1 match"


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(chars=st.integers(200, 20_000), offset=st.integers(0, 120_008))  # long.md's length
def test_fit_caps_each_result_and_keeps_its_meaning(corpus, chars, offset):
    grep = tools.fit("loom_grep", tools.GREP.call(corpus, {"pattern": "FT-2026",
                                                           "limit": 500}), chars)
    assert tools.size(grep) <= chars
    full = corpus.grep("FT-2026", limit=500).to_dict()["matches"]
    assert grep["matches"] == full[: len(grep["matches"])]
    assert grep["truncated"] is True
    read = tools.fit("loom_get_file", tools.GET_FILE.call(
        corpus, {"path": "long.md", "offset": offset, "length": 50_000}), chars)
    assert tools.size(read) <= chars
    again = corpus.get("long.md", read["offset"], read["length"]).to_dict()
    assert again["content"] == read["content"]  # still exactly what loom get returns
    found = tools.fit("loom_search", tools.SEARCH.call(
        corpus, {"query": "unicode words", "excerpt_chars": 20_000}), max(chars, 600))
    assert tools.size(found) <= max(chars, 600)
    json.dumps(found)


def test_an_offset_past_the_end_is_an_error_naming_the_length(corpus):
    with pytest.raises(QueryError, match="whose text is 120,008 bytes"):
        tools.GET_FILE.call(corpus, {"path": "long.md", "offset": 120_009})
