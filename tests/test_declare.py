"""Each operation is declared once (loomcli/declare.py): every edge is made from the
declaration or checked against it here — typer's options, the fast path's tables, the
MCP server's tools (a real session), the HTTP server's checks (a real server) and the
tables of docs/reference.md — and an edge that leaves a parameter out says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli import declare
from loomcli.declare import CLI, EDGES, HTTP, MCP, OPERATIONS

from .test_http import Server
from .test_mcp import run_session, structured
from .test_tools import _plain

ROOT = Path(__file__).resolve().parent.parent
# typer commands that are not an operation over a corpus's index: the edges themselves,
# the config file and conversations (each with its own options, checked by its tests).
NOT_OPERATIONS = {"chat", "config", "conversations", "init", "mcp", "serve", "watch"}


def test_every_edge_a_parameter_is_not_on_says_why() -> None:
    for op in OPERATIONS.values():
        for p in op.params:
            for edge in EDGES:
                if not op.offered(edge):
                    continue  # the whole operation is not there (op.why says why)
                assert p.offered(edge) != (edge in p.why), (op.name, p.name, edge)
        for edge, has in ((CLI, op.command), (MCP, op.tool), (HTTP, op.route)):
            assert (has is not None) != (edge in op.why), (op.name, edge)


def test_every_typer_option_is_the_declared_one() -> None:
    """Names, defaults and help of every option and argument of every command that runs
    an operation, in both directions: an option added to cli.py, or one declared and
    not in cli.py, fails here."""
    import typer
    from typer.core import TyperOption

    from loomcli.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    declared_commands = {op.command for op in OPERATIONS.values() if op.command}
    assert set(commands) == declared_commands | NOT_OPERATIONS
    for op in OPERATIONS.values():
        if op.command is None:
            continue
        by_param: dict[str, list[declare.Option]] = {}
        for p in op.params:
            for o in p.cli:
                by_param.setdefault(o.param, []).append(o)
        for param in commands[op.command].params:
            if "--help" in getattr(param, "opts", ()):
                continue
            options = by_param.pop(param.name, None)
            assert options is not None, f"{op.command}: {param.name} is not declared"
            if isinstance(param, TyperOption):
                typer_names = {*param.opts, *param.secondary_opts}
            else:
                typer_names = set()
                assert options[0].kind == declare.ARGUMENT, (op.command, param.name)
            assert typer_names == {n for o in options for n in o.names}, (op.command,
                                                                          param.name)
            assert param.default == options[0].default, (op.command, param.name)
            assert param.help == options[0].help, (op.command, param.name)
        assert not by_param, f"{op.command}: declared, not in cli.py: {sorted(by_param)}"


def test_the_fast_path_s_tables_are_the_declaration_s() -> None:
    """fastpath.py writes its tables out (the declaration is not imported on a cold
    command's way); they must be what the declaration makes."""
    from loomcli import fastpath

    assert (fastpath.FLAG, fastpath.OFF, fastpath.TEXT, fastpath.NUMBER, fastpath.COUNT,
            fastpath.MANY) == (declare.FLAG, declare.OFF, declare.TEXT, declare.NUMBER,
                               declare.COUNT, declare.MANY)
    hint = "paste `python -m loomcli.declare --fast` into fastpath.py"
    for op, options, defaults in [
            (declare.GREP, fastpath._GREP_OPTIONS, fastpath._GREP_DEFAULTS),
            (declare.SEARCH, fastpath._SEARCH_OPTIONS, fastpath._SEARCH_DEFAULTS),
            (declare.GET, fastpath._GET_OPTIONS, fastpath._GET_DEFAULTS),
            (declare.SCAN, fastpath._SCAN_OPTIONS, fastpath._SCAN_DEFAULTS)]:
        assert options == declare.fast_options(op), hint
        assert defaults == declare.fast_defaults(op), hint
    source = declare.fast_source()
    namespace: dict[str, object] = {n: getattr(declare, n) for n in (
        "FLAG", "OFF", "TEXT", "NUMBER", "COUNT", "MANY")}
    exec(source, namespace)  # what --fast prints is the tables
    assert namespace["_GREP_OPTIONS"] == fastpath._GREP_OPTIONS
    assert namespace["_SCAN_DEFAULTS"] == fastpath._SCAN_DEFAULTS


def test_a_cold_command_does_not_import_the_declaration(tmp_path) -> None:
    import os

    for args in (["--version"], ["grep", "x"], ["search", "x"]):
        out = subprocess.run([sys.executable, "-X", "importtime", "-m", "loomcli", *args],
                             capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "LOOM_HOME": str(tmp_path)})
        assert "loomcli.declare" not in out.stderr, args


def test_the_mcp_server_offers_the_declared_tools_and_arguments(scanned_notes,
                                                                loom_home) -> None:
    async def body(client):
        return {t.name: t for t in (await client.list_tools()).tools}

    listed = run_session(loom_home, body)
    assert set(listed) == {op.tool for op in OPERATIONS.values() if op.tool}
    for op in OPERATIONS.values():
        if op.tool is None:
            continue
        schema = _plain(listed[op.tool].input_schema)
        declared = declare.schema(op)
        assert schema.get("required", []) == declared["required"], op.tool
        assert list(schema["properties"]) == list(declared["properties"]), op.tool
        for name, prop in declared["properties"].items():
            # The SDK's schema has no enum (a str in a signature): the declaration's does.
            assert schema["properties"][name] == {k: v for k, v in prop.items()
                                                  if k != "enum"}, (op.tool, name)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """One `loom serve` over the fixture notes for this module's HTTP checks."""
    import os
    import shutil

    home = tmp_path_factory.mktemp("home")
    notes = tmp_path_factory.mktemp("n") / "notes"
    shutil.copytree(ROOT / "fixtures" / "notes", notes)
    env = {"LOOM_HOME": str(home)}
    subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                   capture_output=True, env={**os.environ, **env})
    s = Server(env=env)
    yield s
    s.stop()


def _posts() -> list[declare.Operation]:
    return [op for op in OPERATIONS.values() if op.route and op.method == "POST"]


def _required(op: declare.Operation) -> dict[str, object]:
    given = {"question": "q", "query": "warp", "pattern": "warp",
             "path": "projects/loom-controller.md"}
    return {p.name: given[p.name] for p in op.on(HTTP) if p.required}


def test_http_refuses_a_field_its_route_does_not_take(served) -> None:
    """Every field the declaration does not offer on HTTP — another edge's (`here`,
    `rebuild`, `lines`, `fixed`) or a typo — is a 400 naming it, before any work (loom
    0.1 to this round ignored them: `{"query": "x", "limt": 3}` ran with 10)."""
    for op in _posts():
        others = [p.name for p in op.params if not p.offered(HTTP)] + ["limt"]
        for name in others:
            status, body = served.call("POST", op.route, {**_required(op), name: True})
            assert status == 400, (op.name, name, body)
            assert f"unknown field '{name}'" in body["error"], (op.name, name, body)


def test_http_checks_every_declared_type_and_lower_bound(served) -> None:
    for op in _posts():
        for p in op.on(HTTP):
            wrong = {declare.INTEGER: "5", declare.BOOLEAN: "yes", declare.STRING: 5,
                     declare.STRINGS: [1]}[p.kind]
            status, body = served.call("POST", op.route, {**_required(op), p.name: wrong})
            assert status == 400 and p.name in body["error"], (op.name, p.name, body)
            if p.lo is not None:
                status, body = served.call("POST", op.route,
                                           {**_required(op), p.name: p.lo - 1})
                assert status == 400, (op.name, p.name, body)
                assert f"{p.name} must be {p.lo} or more" in body["error"]
            for bad in ("nope",) if p.choices else ():
                status, body = served.call("POST", op.route, {**_required(op), p.name: bad})
                assert status == 400 and "must be one of" in body["error"], (op.name, p.name)


def test_http_takes_every_declared_field_of_the_reading_routes(served) -> None:
    """Each field the declaration offers, at its default, is answered (ask and scan
    are left out: they would call an LLM or scan)."""
    for op in (declare.SEARCH, declare.GREP, declare.GET, declare.PAGES, declare.TERMS,
               declare.LINKS):
        for p in op.on(HTTP):
            if p.required or p.name == "corpus":
                continue
            body = {**_required(op), p.name: p.default}
            status, got = served.call("POST", op.route, body)
            assert status == 200, (op.name, body, got)


def test_grep_s_case_is_the_same_on_every_edge(scanned_notes, loom_home, served) -> None:
    """`case` (smart | ignore | sensitive, default smart) on the CLI, MCP and HTTP;
    `case_sensitive`, the older boolean of MCP and HTTP, still works (loom 0.1 to this
    round: MCP and HTTP had only the boolean, default false = ignore)."""
    def cli(*args: str) -> list[tuple[str, int]]:
        out = subprocess.run([sys.executable, "-m", "loomcli", "grep", "--json", *args],
                             capture_output=True, text=True, cwd=scanned_notes)
        return [(m["path"], m["offset"]) for m in json.loads(out.stdout)["matches"]]

    def http(body: dict) -> list[tuple[str, int]]:
        status, got = served.call("POST", "/grep", body)
        assert status == 200, got
        return [(m["path"], m["offset"]) for m in got["matches"]]

    async def mcp(client, args: dict) -> list[tuple[str, int]]:
        got = structured(await client.call_tool("loom_grep", args))
        return [(m["path"], m["offset"]) for m in got["matches"]]

    async def body(client):
        return {name: await mcp(client, args) for name, args in [
            ("smart", {"pattern": "Loom"}), ("ignore", {"pattern": "Loom", "case": "ignore"}),
            ("sensitive", {"pattern": "loom", "case": "sensitive"}),
            ("old true", {"pattern": "loom", "case_sensitive": True}),
            ("old false", {"pattern": "Loom", "case_sensitive": False})]}

    got = run_session(loom_home, body)
    smart, ignore, sensitive = cli("Loom"), cli("-i", "Loom"), cli("-s", "loom")
    assert smart and len(smart) < len(ignore) and sensitive and sensitive != ignore
    assert got["smart"] == smart == http({"pattern": "Loom"})
    assert got["ignore"] == ignore == http({"pattern": "Loom", "case": "ignore"})
    assert got["sensitive"] == sensitive == http({"pattern": "loom", "case": "sensitive"})
    assert got["old true"] == sensitive == http({"pattern": "loom", "case_sensitive": True})
    assert got["old false"] == ignore == http({"pattern": "Loom", "case_sensitive": False})
    status, clash = served.call("POST", "/grep", {"pattern": "loom", "case": "ignore",
                                                 "case_sensitive": True})
    assert status == 400 and "disagree" in clash["error"]


def test_the_reference_s_tables_are_the_declaration() -> None:
    """docs/reference.md holds each operation's table as `python -m loomcli.declare`
    prints them (paste its output between the two markers after changing declare.py)."""
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    start, end = "<!-- parameters: python -m loomcli.declare -->\n", "<!-- /parameters -->"
    assert start in text and end in text, "docs/reference.md lacks the parameter tables"
    held = text.split(start, 1)[1].split(end, 1)[0]
    assert held.strip() == declare.tables().strip()


def test_the_operations_refuse_what_the_declaration_bounds(scanned_notes) -> None:
    """MCP and HTTP check a value's lower bound from the declaration before calling; the
    CLI reaches the operation unchecked: the operation must refuse below the same bound
    and take the bound itself (a bound changed in one place only fails here)."""
    from loomcli import config
    from loomcli.errors import QueryError
    from loomcli.operations import Corpus

    corpus = Corpus(config.load())
    path = "projects/loom-controller.md"
    calls = {
        ("search", "limit"): lambda v: corpus.search("warp", limit=v),
        ("search", "excerpt_chars"): lambda v: corpus.search("warp", excerpt_chars=v),
        ("grep", "context"): lambda v: corpus.grep("warp", context=v),
        ("grep", "limit"): lambda v: corpus.grep("warp", limit=v),
        ("grep", "after"): lambda v: list(corpus.grep_lines("warp", after=v)),
        ("grep", "before"): lambda v: list(corpus.grep_lines("warp", before=v)),
        ("grep", "max_count"): lambda v: list(corpus.grep_lines("warp", max_count=v)),
        ("get", "offset"): lambda v: corpus.get(path, offset=v),
        ("get", "length"): lambda v: corpus.get(path, length=v),
        ("ask", "top_k"): lambda v: corpus.check_ask("why", top_k=v),
    }
    bounded = {(op.name, p.name) for op in OPERATIONS.values() for p in op.params
               if p.lo is not None}
    assert bounded == set(calls)
    for (op, name), call in calls.items():
        lo = OPERATIONS[op].param(name).lo
        assert lo is not None
        call(lo)
        with pytest.raises(QueryError, match=f"{name} must be {lo} or more"):
            call(lo - 1)


def _object_keys(source: str, start: int) -> list[str]:
    """The top-level keys of the JavaScript object literal opening at source[start]."""
    import re

    depth, part, parts = 0, "", []
    for ch in source[start + 1:]:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            if depth == 0:
                parts.append(part)
                break
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    return [re.match(r"\s*(\w+)", p)[1] for p in parts if p.strip()]  # type: ignore[index]


def page_fields() -> dict[str, set[str]]:
    """What the web page sends each POST route, read from app.js: an object literal in
    the call, or `body` — its literal and the `body.x = ` after it."""
    import re

    source = (ROOT / "loomcli" / "web" / "app.js").read_text(encoding="utf-8")
    sent: dict[str, set[str]] = {}
    for call in re.finditer(r'call(?:JSON)?\("POST", "(/\w+)", (\{|body\b)', source):
        if call[2] == "{":
            keys = _object_keys(source, call.end() - 1)
        else:
            made = source.rfind("const body = {", 0, call.start())
            keys = _object_keys(source, source.index("{", made))
            keys += re.findall(r"\bbody\.(\w+) =", source[made:call.start()])
        sent.setdefault(call[1], set()).update(keys)
    return sent


def test_the_page_sends_what_the_declaration_says_it_does() -> None:
    sent = page_fields()
    routes = {op.route: op for op in _posts() if op.offered("page")}
    assert set(sent) == set(routes)
    for route, op in routes.items():
        declared = {p.name for p in op.on("page") if p.name != "corpus"}
        assert sent[route] == declared, route  # `corpus`: added to every call (call())


def test_an_empty_required_field_is_missing_on_every_edge() -> None:
    """HTTP answered `{"query": ""}` with 'missing "query"' while MCP passed "" on to the
    operation: the declaration's check now refuses it for both, naming the field."""
    from loomcli.errors import QueryError

    for op in OPERATIONS.values():
        for edge in (MCP, HTTP):
            for p in op.on(edge):
                if not p.required:
                    continue
                args = {q.name: "x" for q in op.on(edge) if q.required}
                with pytest.raises(QueryError, match=f"{p.name} is required"):
                    declare.check(op, {**args, p.name: ""}, edge)
