"""The rest of the commands on both backends (tests/test_backends.py runs scan, files,
status, grep, get, search and forget): ask (plain, --agent, a follow-up -c), serve's HTTP
endpoints, an MCP client session, watch and eval — each through real `loom` processes,
once on the embedded SQLite index and once on a real PostgreSQL (tests/pg.py). The
answers must be the same, and so must what the loopback stand-in LLM was sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import FIXTURES, write
from tests.test_backends import both, loom, same

LOOM = [sys.executable, "-m", "loomcli"]
QUESTION = "which invoice covers the madder root and the warp tension gauge?"


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "data" / "notes"
    shutil.copytree(FIXTURES / "notes", folder)
    return folder


@pytest.fixture
def backends(tmp_path: Path, pg_url: str) -> dict[str, dict[str, str]]:
    """Each backend's environment (its own LOOM_HOME; PostgreSQL's also the url)."""
    return {"sqlite": {"LOOM_HOME": str(tmp_path / "home-sqlite")},
            "postgresql": {"LOOM_HOME": str(tmp_path / "home-pg"),
                           "LOOM_DATABASE_URL": pg_url}}


def configure(backends: dict[str, dict[str, str]], text: str) -> None:
    for env in backends.values():
        write(Path(env["LOOM_HOME"]) / "config.toml", text)


def llm_config(url: str) -> str:
    return (f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{url}"\ntimeout_s = 60\n'
            "[ask]\ntop_k = 3\n")


def scan(backends: dict[str, dict[str, str]], folder: Path) -> None:
    """Scan `folder` into each backend, and check each is the one it says."""
    for name, run in both(backends, "scan", str(folder)).items():
        assert "error" not in run.stderr.lower(), run.stderr
        status = json.loads(loom(backends[name], "status", "--json").stdout)
        assert status["backend"] == name and status["files"] > 5, status


def answer_of(stdout: str) -> dict[str, Any]:
    """`ask --json` but for what differs between any two runs (times, ids)."""
    out = json.loads(stdout)
    for key in ("timings", "conversation_id"):
        out.pop(key, None)
    for step in out.get("steps") or []:
        step.pop("ms", None)
    return out


def test_ask_plain_and_a_follow_up_send_the_same_prompts(backends, notes) -> None:
    from tests.llm_server import FakeLLM

    with FakeLLM() as llm:
        configure(backends, llm_config(llm.url))
        scan(backends, notes)
        sent: dict[str, list[str]] = {}
        answers: dict[str, list[dict[str, Any]]] = {}
        for name, env in backends.items():
            start = len(llm.sent)
            first = loom(env, "ask", "--json", QUESTION)
            again = loom(env, "ask", "--json", "-c", "and the warp tension gauge?")
            sent[name] = llm.sent[start:]
            answers[name] = [answer_of(first.stdout), answer_of(again.stdout)]
    assert len(sent["sqlite"]) == 2 and "madder" in sent["sqlite"][0].lower()
    assert sent["sqlite"] == sent["postgresql"]
    # The follow-up carries the first turn: the conversation was kept on both.
    assert QUESTION in sent["postgresql"][1]
    assert answers["sqlite"] == answers["postgresql"]


def test_ask_agent_calls_the_same_tools_and_gets_the_same_results(backends, notes) -> None:
    from tests.tool_llm_server import ToolLLM, investigator

    with ToolLLM(investigator("madder")) as llm:
        configure(backends, llm_config(llm.url))
        scan(backends, notes)
        turns: dict[str, list[Any]] = {}
        answers: dict[str, dict[str, Any]] = {}
        for name, env in backends.items():
            start = len(llm.chats())
            done = loom(env, "ask", "--agent", "--json", QUESTION)
            answers[name] = answer_of(done.stdout)
            turns[name] = [[(t.role, t.content, [(c.name, c.arguments) for c in t.calls])
                            for t in chat["turns"]] for chat in llm.chats()[start:]]
    assert [s["tool"] for s in answers["sqlite"]["steps"]] == ["loom_grep", "loom_get_file"]
    assert answers["sqlite"] == answers["postgresql"]
    assert turns["sqlite"] == turns["postgresql"]


class Server:
    """`loom serve` on a free port, in `env`."""

    def __init__(self, env: dict[str, str]) -> None:
        import re

        self.proc = subprocess.Popen([*LOOM, "serve", "--port", "0"], stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **env})
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        m = re.search(r"http://[\d.]+:(\d+)", line)
        assert m, line + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def call(self, path: str, body: object) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def test_serve_answers_the_same_over_http(backends, notes) -> None:
    from tests.llm_server import FakeLLM

    with FakeLLM() as llm:
        configure(backends, llm_config(llm.url))
        scan(backends, notes)
        replies: dict[str, list[tuple[int, Any]]] = {}
        for name, env in backends.items():
            server = Server(env)
            try:
                got = [server.call("/search", {"query": "warp tension", "limit": 3}),
                       server.call("/grep", {"pattern": "E-4471", "context": 1}),
                       server.call("/grep", {"pattern": "madder",
                                             "path": "manuals/field-guide.pdf"})]
                match = got[1][1]["matches"][0]
                got.append(server.call("/file", {"path": match["path"],
                                                 "offset": match["offset"], "length": 40}))
                got.append(server.call("/file", {"path": "nope.md"}))
                status, answer = server.call("/ask", {"question": QUESTION})
                got.append((status, answer_of(json.dumps(answer))))
                # a scan while serving, then the new file is found by the kept store
                write(notes / "served.md", f"# Served\nkumquat {name}\n")
                got.append(server.call("/scan", {})[0:1])
                got.append(server.call("/grep", {"pattern": "kumquat"}))
                (notes / "served.md").unlink()
            finally:
                server.stop()
            replies[name] = got
    lite, pg = replies["sqlite"], replies["postgresql"]
    assert [r[0] for r in lite] == [200, 200, 200, 200, 404, 200, 200, 200]
    for a, b in zip(lite[:-1], pg[:-1], strict=True):
        assert _rounded(a) == _rounded(b)
    assert lite[1][1]["matches"] and lite[0][1]["hits"]
    assert [m["path"] for m in pg[-1][1]["matches"]] == ["served.md"]
    assert [m["line"] for m in pg[-1][1]["matches"]] == [m["line"] for m in lite[-1][1][
        "matches"]]


def _rounded(value: Any) -> Any:
    """Scores to three places (float rounding differs between the two stores' sums)."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items() if k not in ("ms", "took_ms")}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def test_an_mcp_session_is_the_same(backends, notes) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    scan(backends, notes)

    def session(env: dict[str, str]) -> list[Any]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "loomcli", "mcp"],
                                       env={**os.environ, **env})

        async def main() -> list[Any]:
            async with Client(params) as client:
                out = []
                grep = await client.call_tool("loom_grep", {"pattern": "warp"})
                out.append(_content(grep))
                first = _content(grep)["matches"][0]
                out.append(_content(await client.call_tool(
                    "loom_get_file", {"path": first["path"], "offset": first["offset"],
                                      "length": 30})))
                out.append(_content(await client.call_tool(
                    "loom_search", {"query": "madder root", "excerpt_chars": 200})))
                files = _content(await client.call_tool("loom_list_files", {}))
                for f in files["files"]:
                    f.pop("indexed_at", None)
                out.append(files)
                bad = await client.call_tool("loom_grep", {"pattern": "(unclosed"})
                out.append((bad.is_error, bad.content[0].text))
                write(notes / "invoices" / "april.md", "# April\nFT-2026-0207 paid\n")
                report = _content(await client.call_tool("loom_scan", {}))
                out.append({k: report[k] for k in ("added", "updated", "removed", "failed")})
                out.append(_content(await client.call_tool("loom_grep",
                                                           {"pattern": "FT-2026-0207"})))
                (notes / "invoices" / "april.md").unlink()
                report = _content(await client.call_tool("loom_scan", {}))
                out.append({k: report[k] for k in ("added", "updated", "removed", "failed")})
                return out

        return anyio.run(main)

    lite, pg = (session(env) for env in backends.values())
    assert lite[0]["matches"] and lite[2]["hits"] and lite[3]["files"]
    assert lite[5]["added"] == 1 and lite[7]["removed"] == 1
    assert [m["path"] for m in pg[6]["matches"]] == ["invoices/april.md"]
    assert _rounded(lite) == _rounded(pg)


def _content(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def test_watch_picks_up_a_new_file_on_both(backends, notes, tmp_path) -> None:
    from tests.test_watch import Watch

    greps = {}
    for name, env in backends.items():
        folder = tmp_path / f"watched-{name}"
        shutil.copytree(notes, folder)
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            w = Watch(folder)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k)
                else:
                    os.environ[k] = v
        try:
            write(folder / "new.md", "# New\nkumquat marmalade\n")
            w.expect({"change": "added", "path": "new.md"})
            (folder / "new.md").rename(folder / "journal" / "jam.md")
            w.expect({"change": "moved", "path": "journal/jam.md", "from": "new.md"})
            (folder / "ideas.org").unlink()
            w.expect({"change": "removed", "path": "ideas.org"})
            greps[name] = loom(env, "grep", "kumquat").stdout
        finally:
            assert w.stop() == 0
    assert greps["sqlite"] == greps["postgresql"] == "journal/jam.md:2:6:kumquat marmalade\n"
    files = {name: [f["path"] for f in json.loads(r.stdout)["files"]]
             for name, r in both(backends, "files", "--json").items()}
    assert files["sqlite"] == files["postgresql"]
    assert "ideas.org" not in files["sqlite"]


EVAL = '''
[[q]]
q = "warp tension"
targets = ["projects/loom-controller.md"]
answer = "tension"

[[q]]
q = "sourdough bread"
targets = ["recipes/bread.md"]

[[q]]
q = "madder root invoice"
targets = ["manuals/field-guide.pdf"]
answer = "madder"

[[q]]
q = "nothing holds these words qwxz"
targets = ["welcome.md"]
'''


def test_eval_reports_the_same_figures_and_asks_the_same(backends, notes, tmp_path
                                                         ) -> None:
    from tests.llm_server import FakeLLM

    with FakeLLM() as llm:
        llm.behaviour.answer = ["The tension is in ", "[projects/loom-controller.md]."]
        configure(backends, llm_config(llm.url))
        scan(backends, notes)
        write(tmp_path / "q.toml", EVAL)
        report = json.loads(same(backends, "eval", "--json", str(tmp_path / "q.toml")))
        sent = {}
        for name, env in backends.items():
            start = len(llm.sent)
            loom(env, "eval", "--json", "--answers", "--mode", "bm25",
                 str(tmp_path / "q.toml"))
            sent[name] = llm.sent[start:]
    assert report["questions"] == 4
    assert report["modes"]["bm25"]["recall_10"] >= 0.5
    assert len(sent["sqlite"]) >= 4 and sent["sqlite"] == sent["postgresql"]


def test_serve_outlives_a_restart_of_the_database_server(backends, notes, pg_server
                                                         ) -> None:
    """A kept connection the server closed (a restart, a failover) is opened anew: no
    request fails after the server is back (SQLite has nothing to restart)."""
    env = backends["postgresql"]
    scan({"postgresql": env}, notes)
    server = Server(env)
    try:
        before = [server.call("/search", {"query": "warp"}),
                  server.call("/grep", {"pattern": "warp"})]
        done = pg_server._run(str(pg_server.bin / "pg_ctl"), "-D", str(pg_server.data),
                              "-l", str(pg_server.base / "log"), "-w", "-m", "fast",
                              "restart")
        assert done.returncode == 0, done.stderr
        after = [server.call("/search", {"query": "warp"}),
                 server.call("/grep", {"pattern": "warp"})]
    finally:
        server.stop()
    assert before[0][0] == before[1][0] == 200 and before[0][1]["hits"]
    assert _rounded(after) == _rounded(before)
