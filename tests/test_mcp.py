"""`loom mcp` driven by the MCP SDK's own stdio client, as an agent would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import anyio
import pytest

from .conftest import FIXTURES, write

LOOM = [sys.executable, "-m", "loomcli"]
TOOLS = {"loom_search", "loom_ask", "loom_grep", "loom_get_file", "loom_scan",
         "loom_list_files"}


def structured(result) -> dict:
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


@pytest.fixture
def notes(tmp_path, loom_home):
    folder = tmp_path / "notes"
    shutil.copytree(FIXTURES / "notes", folder)
    write(folder / "invoices" / "march.md",
          "# March invoices\n\n| code | amount |\n|---|---|\n| FT-2026-0101 | 120 € |\n"
          "| FT-2026-0102 | 80 € |\n")
    subprocess.run([*LOOM, "scan", str(folder)], check=True, capture_output=True)
    return folder


def run_session(loom_home, body):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "loomcli", "mcp"],
                                   env={**os.environ, "LOOM_HOME": str(loom_home)})

    async def main():
        async with Client(params) as client:
            return await body(client)

    return anyio.run(main)


def test_agent_session_lists_tools_greps_reads_scans_and_gets_tool_errors(notes, loom_home):
    async def body(client):
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        descriptions = {t.name: t.description for t in tools.tools}
        grep = structured(await client.call_tool("loom_grep",
                                                 {"pattern": r"FT-2026-0\d{3}"}))
        reads = []
        for m in grep["matches"]:
            got = structured(await client.call_tool(
                "loom_get_file", {"path": m["path"], "offset": m["offset"], "length": 12}))
            reads.append(got["content"])
        (notes / "invoices" / "april.md").write_text("# April\nFT-2026-0207 paid\n")
        scan = structured(await client.call_tool("loom_scan", {}))
        escape = await client.call_tool("loom_get_file", {"path": "../../etc/passwd"})
        bad = await client.call_tool("loom_grep", {"pattern": "(unclosed"})
        search = structured(await client.call_tool(
            "loom_search", {"query": "madder root", "excerpt_chars": 400}))
        files = structured(await client.call_tool("loom_list_files", {}))
        return names, descriptions, grep, reads, scan, escape, bad, search, files

    names, descriptions, grep, reads, scan, escape, bad, search, files = run_session(
        loom_home, body)
    assert names == TOOLS
    assert "loom_get_file" in descriptions["loom_grep"]
    codes = sorted(reads)
    # One result per line: 0398 and 0415 share a line, the first one is returned.
    assert codes == ["FT-2026-0101", "FT-2026-0102", "FT-2026-0398", "FT-2026-0412"]
    assert {m["page"] for m in grep["matches"] if m["path"].endswith(".pdf")} == {4}
    assert (scan["added"], scan["failed"]) == (1, 0)
    assert list(scan) == ["added", "updated", "moved", "removed", "skipped", "failed",
                          "duration_ms", "errors", "skips", "unchanged"]
    from loomcli.extract import DOCUMENTS

    kinds = {"note", *DOCUMENTS.values()}
    assert all(kind in descriptions["loom_list_files"] for kind in kinds)
    assert "note or pdf" not in descriptions["loom_list_files"]
    assert {f["kind"] for f in files["files"]} <= kinds
    assert escape.is_error and "escapes the index" in escape.content[0].text
    assert "root:" not in escape.content[0].text
    assert bad.is_error and "invalid pattern" in bad.content[0].text
    assert search["hits"][0]["content_len"] > 0 and len(search["hits"][0]["content"]) <= 400
    assert any(f["path"] == "invoices/april.md" for f in files["files"])


def test_ask_tool_reports_an_unreachable_llm_as_a_tool_error(notes, loom_home):
    write(loom_home / "config.toml",
          '[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "http://127.0.0.1:9"\n')

    async def body(client):
        return await client.call_tool("loom_ask", {"question": "madder root"})

    result = run_session(loom_home, body)
    assert result.is_error and "cannot reach ollama at http://127.0.0.1:9" in \
        result.content[0].text


def test_ask_sends_the_same_files_over_cli_mcp_and_http_with_the_configured_top_k(
        notes, loom_home):
    from .llm_server import FakeLLM
    from .test_http import Server

    question = "which invoice covers the madder root and the warp tension gauge?"
    with FakeLLM() as llm:
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n'
              "[ask]\ntop_k = 2\n")
        subprocess.run([*LOOM, "ask", question], check=True, capture_output=True,
                       env={**os.environ, "LOOM_HOME": str(loom_home)})

        async def body(client):
            return structured(await client.call_tool("loom_ask", {"question": question}))

        mcp_answer = run_session(loom_home, body)
        server = Server()
        try:
            status, http_answer = server.call("POST", "/ask", {"question": question})
        finally:
            server.stop()
    assert status == 200
    prompts = [r["body"]["messages"][-1]["content"] for r in llm.chats()]
    assert len(prompts) == 3 and prompts[0] == prompts[1] == prompts[2]
    assert prompts[0].count("\n## [") + prompts[0].startswith("## [") == 2  # [ask] top_k
    assert [u["path"] for u in mcp_answer["used"]] == [u["path"] for u in http_answer["used"]]
    assert len(mcp_answer["used"]) == 2
    # The same account of the window over both edges (timings differ, of course).
    assert mcp_answer["context"] == http_answer["context"]
    assert mcp_answer["context"]["source"] == "ollama /api/show"
    assert set(mcp_answer["timings"]) == {"retrieve_ms", "excerpts_ms", "first_token_ms",
                                          "model_ms", "total_ms"}


def test_no_match_is_an_empty_result_not_an_error(notes, loom_home):
    async def body(client):
        search = structured(await client.call_tool("loom_search", {"query": "qwxzzy"}))
        grep = structured(await client.call_tool("loom_grep", {"pattern": "qwxzzy"}))
        ask = structured(await client.call_tool("loom_ask", {"question": "qwxzzy?"}))
        return search, grep, ask

    search, grep, ask = run_session(loom_home, body)
    assert search == {"hits": []}
    assert grep == {"matches": [], "truncated": False}
    assert ask == {"answer": "", "citations": [], "used": [], "sources": [], "quotes": [],
                   "context": None, "timings": {}, "conversation_id": None, "steps": []}


def test_search_narrows_by_folder_and_glob_as_http_does(notes, loom_home):
    """loom_search takes `path` and `glob` as HTTP's /search does: an agent narrows a
    search to a folder or kind of file as an app can."""
    async def body(client):
        every = structured(await client.call_tool("loom_search", {"query": "warp"}))
        folder = structured(await client.call_tool(
            "loom_search", {"query": "warp", "path": "manuals", "excerpt_chars": 0}))
        globbed = structured(await client.call_tool(
            "loom_search", {"query": "warp", "glob": ["*.md"], "excerpt_chars": 0}))
        excluded = structured(await client.call_tool(
            "loom_search", {"query": "warp", "glob": ["!manuals/*"], "excerpt_chars": 0}))
        return every, folder, globbed, excluded

    every, folder, globbed, excluded = run_session(loom_home, body)
    paths = {h["path"] for h in every["hits"]}
    assert any(p.startswith("manuals/") for p in paths) and any(p.endswith(".md") for p in paths)
    assert {h["path"] for h in folder["hits"]} == {p for p in paths if p.startswith("manuals/")}
    assert {h["path"] for h in globbed["hits"]} == {p for p in paths if p.endswith(".md")}
    assert {h["path"] for h in excluded["hits"]} == {
        p for p in paths if not p.startswith("manuals/")}
