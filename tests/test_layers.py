"""The layers hold: edges (the CLI, the fast path, MCP, HTTP, the page, watch) call the
operations, which call the rest; nothing below the operations imports them or an edge,
each package below them imports only the packages under it (MAY_IMPORT, the table of
docs/architecture.md), and no module imports one that imports it back. Imports inside
functions (kept there for start-up time) count as much as those at the top; those only
for type checking (`if TYPE_CHECKING:`) do not run, so they do not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "loomcli"
# The edges: each parses what a user or a client sends, calls the operations, renders.
EDGES = {"__main__", "cli", "fastpath", "mcp_server", "http_server", "webpage", "watch",
         "reading", "scanning", "console", "grep_printer", "evaluate"}
OPERATIONS = "operations"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_nodes(tree: ast.AST, typing: bool = False):
    for node in ast.iter_child_nodes(tree):
        if (not typing and isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            for child in node.orelse:
                yield child
                yield from _runtime_nodes(child)
            continue
        yield node
        yield from _runtime_nodes(node, typing)


def import_graph(typing: bool = False) -> dict[str, dict[str, int]]:
    """module -> {loomcli module it imports: line}. `from pkg import sub` imports `sub`
    (its package runs first, but is not what the importer uses). `typing`: the imports
    for type checking only count too."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8")), typing):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                subs = [f"{source}.{a.name}" for a in node.names
                        if f"{source}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [source, *subs]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].setdefault(target, node.lineno)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _short(module: str) -> str:
    return module.removeprefix("loomcli.")


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    cycles = _cycles(graph)
    described = [" <-> ".join(_short(m) for m in c) + ": " + "; ".join(
        f"{_short(a)}:{line} imports {_short(b)}" for a in c for b, line in graph[a].items()
        if b in c) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def test_nothing_below_the_operations_imports_them_or_an_edge():
    graph = import_graph()
    above = {f"loomcli.{e}" for e in EDGES} | {f"loomcli.{OPERATIONS}"}
    wrong = [f"{_short(m)}:{line} imports {_short(t)}" for m, targets in graph.items()
             if m not in above for t, line in targets.items() if t in above]
    assert not wrong, "upward imports:\n" + "\n".join(wrong)


def test_the_ask_package_knows_the_corpus_only_by_what_it_is_given():
    """ask.session takes the corpus's public API (ask.session.Notes): nothing in the ask
    package imports the operations, not even for a type, so nothing there can call back
    into a private method of Corpus."""
    graph = import_graph(typing=True)
    wrong = [f"{_short(m)}:{line} imports {_short(t)}" for m, targets in graph.items()
             if m == "loomcli.ask" or m.startswith("loomcli.ask.")
             for t, line in targets.items() if t == f"loomcli.{OPERATIONS}"]
    assert not wrong, "the ask package imports the operations:\n" + "\n".join(wrong)


def test_the_check_sees_imports_inside_functions_and_not_type_only_ones(tmp_path, monkeypatch):
    """The two rules above would pass on anything if the graph missed imports: a cycle
    through a function-level import is found, one through a type-only import is not."""
    package = tmp_path / "loomcli"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from loomcli import b\n")
    (package / "b.py").write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n"
                                  "    from loomcli import c\nimport loomcli.a\n")
    (package / "c.py").write_text("from loomcli.b import x\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["PACKAGE"]), "PACKAGE", package)
    graph = import_graph()
    assert graph["loomcli.a"] == {"loomcli.b": 2}
    assert graph["loomcli.b"] == {"loomcli.a": 4}
    assert _cycles(graph) == [["loomcli.a", "loomcli.b"]]
    assert import_graph(typing=True)["loomcli.b"] == {"loomcli.c": 3, "loomcli.a": 4}


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_every_edge_named_here_exists(edge):
    assert f"loomcli.{edge}" in _modules()


# Below the operations: one package per concern, each importing only the packages listed
# for it (docs/architecture.md draws them). The top-level modules that are neither an edge
# nor an operation are shared (config, records, errors, limits, paths, sanitize, tools ...);
# migrations.py is the SQLite store's schema, so of the store's layer.
MAY_IMPORT: dict[str, set[str]] = {
    "ask": {"search", "providers", "store"},      # excerpts to send; the store's rows
    "index": {"extract", "embeddings", "store"},  # read files, embed passages, write
    "search": {"store"},                          # rank, snippets, vectors, grep
    "embeddings": {"extract", "providers"},       # extract's worker pool; remote models
    "store": {"extract"},                         # stores what extract made (Extracted)
    "providers": set(),
    "extract": set(),
    "shared": {"extract"},                        # config: the kinds extract reads
}
TOP_LEVEL_LAYER = {"migrations": "store"}
# The rules a scan and a query must apply alike (what a word is, what a pattern needs,
# what a glob matches): pure, they import only shared modules and each other, and any
# layer may use them. Nothing else of search/ or index/ is imported from a lower layer.
RULES = {"loomcli.search.text", "loomcli.search.scripts", "loomcli.search.trigrams",
         "loomcli.index.ignore"}


def layer_of(module: str) -> str:
    """edges, operations, shared, or the package below the operations `module` is in."""
    short = _short(module)
    if short in EDGES:
        return "edges"
    if short in (OPERATIONS, "migrate"):
        return "operations"
    top = short.split(".")[0]
    if top in MAY_IMPORT and (top != short or Path(_modules()[module]).name == "__init__.py"):
        return top
    return TOP_LEVEL_LAYER.get(short, "shared")


def wrong_layers(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each import below the operations that crosses into a layer not listed for it."""
    wrong = []
    for module, targets in graph.items():
        mine = layer_of(module)
        if mine not in MAY_IMPORT:
            continue
        for target, line in targets.items():
            theirs = layer_of(target)
            allowed = (theirs in (mine, "shared") or theirs in MAY_IMPORT[mine]
                       or (target in RULES and module not in RULES))
            if module in RULES:  # a rule: shared modules and the other rules only
                allowed = theirs == "shared" or target in RULES
            if not allowed:
                wrong.append(f"{_short(module)}:{line} ({mine}) imports {_short(target)} "
                             f"({theirs})")
    return wrong


def test_each_layer_imports_only_the_layers_below_it():
    wrong = wrong_layers(import_graph())
    assert not wrong, "imports across the layers:\n" + "\n".join(wrong)


def test_the_layer_check_finds_an_upward_import():
    """The rule above would pass on anything if it missed one: search importing the
    indexer, the store importing the ranking, a rule importing the store, each planted
    in the real graph, are found."""
    for module, target in [("loomcli.search.retrieve", "loomcli.index.indexer"),
                           ("loomcli.store.sqlite", "loomcli.search.retrieve"),
                           ("loomcli.search.text", "loomcli.store.rows"),
                           ("loomcli.extract.pdf", "loomcli.search.hits"),
                           ("loomcli.config", "loomcli.index.discover")]:
        graph = import_graph()
        graph[module][target] = 1
        assert wrong_layers(graph) == [
            f"{_short(module)}:1 ({layer_of(module)}) imports {_short(target)} "
            f"({layer_of(target)})"], (module, target)


def test_the_layer_table_names_every_package():
    packages = {name.split(".")[1] for name, path in _modules().items()
                if path.name == "__init__.py" and name.count(".") == 1}
    assert packages == set(MAY_IMPORT) - {"shared"}
    assert all(target in MAY_IMPORT for targets in MAY_IMPORT.values() for target in targets)


# The store: only its package speaks SQL. migrations.py (the schema, applied by the SQLite
# store) and conversations.py (ask's own small file) are SQLite's too; everything else
# reaches the index through the seam (store/seam.py).
SQLITE_MAY_IMPORT = ("loomcli.store", "loomcli.migrations", "loomcli.conversations")
# What the store package may import: the modules below it (pure rules and records).
BELOW_THE_STORE = {"loomcli.records", "loomcli.errors", "loomcli.compat",
                   "loomcli.search.scripts", "loomcli.search.text", "loomcli.search.trigrams",
                   "loomcli.migrations", "loomcli.extract", "loomcli.extract.markdown"}


def _runtime_imports_of(path: Path, module: str) -> list[int]:
    """Lines where a file imports `module` (at the top or inside a function)."""
    def imports(node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name == module for a in node.names)
        return isinstance(node, ast.ImportFrom) and node.module == module and not node.level

    return [node.lineno for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8")))
            if imports(node)]


def test_only_the_store_imports_sqlite3():
    wrong = [f"{_short(name)}:{line}" for name, path in _modules().items()
             if not name.startswith(SQLITE_MAY_IMPORT)
             for line in _runtime_imports_of(path, "sqlite3")]
    assert not wrong, "sqlite3 imported outside the store:\n" + "\n".join(wrong)


def test_the_store_imports_nothing_above_it():
    graph = import_graph()
    reached, todo = set(), [m for m in graph if m.startswith("loomcli.store")]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph[module]
    above = sorted(m for m in reached
                   if not m.startswith("loomcli.store") and m not in BELOW_THE_STORE)
    assert not above, f"the store package reaches {above}"


def test_nobody_outside_the_store_touches_its_connection():
    """Transactions go through the seam (begin/commit/transaction), not `store.conn`."""
    wrong = []
    for name, path in _modules().items():
        if name.startswith("loomcli.store"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "conn":
                owner = node.value
                held = owner.attr if isinstance(owner, ast.Attribute) else getattr(
                    owner, "id", "")
                if "store" in held.lower():
                    wrong.append(f"{_short(name)}:{node.lineno}")
    assert not wrong, "store.conn used outside the store:\n" + "\n".join(wrong)


def test_the_sqlite_store_implements_every_method_of_the_seam():
    """What store/postgres.py implements too: every method of IndexStore, with the same
    parameters (mypy checks the types where open_store returns the SQLite store)."""
    import inspect

    from loomcli.store.seam import IndexStore
    from loomcli.store.sqlite import Store

    names = [n for n, v in vars(IndexStore).items()
             if not n.startswith("_") and (callable(v) or isinstance(v, property))]
    assert {"rank", "candidates", "transaction", "write_lock", "location"} <= set(names)
    for name in names:
        ours, theirs = getattr(Store, name, None), getattr(IndexStore, name)
        assert ours is not None, f"SQLite's store lacks {name}"
        if callable(theirs):
            assert (list(inspect.signature(ours).parameters)
                    == list(inspect.signature(theirs).parameters)), name


def test_each_text_rule_is_written_once():
    """The word pattern and the 6-letter stem live in text.py only; the page asks the
    API for a query's stems (POST /terms) instead of keeping its own copy."""
    word = re.compile(r"""re\.compile\(r["']\\w\+["']""")
    stem = re.compile(r"\[:\s*(6|STEM\w*)\]|STEM\w*\s*=\s*6")
    wrong = [f"{_short(name)}:{n}" for name, path in _modules().items()
             if name != "loomcli.search.text"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if word.search(line) or stem.search(line)]
    page = (PACKAGE / "web" / "app.js").read_text(encoding="utf-8")
    wrong += [f"web/app.js:{n}" for n, line in enumerate(page.splitlines(), 1)
              if re.search(r"(slice|substring|substr)\(0,\s*6\)|\{6\}", line)]
    assert not wrong, "a text rule written again:\n" + "\n".join(wrong)


def test_the_seam_is_imported_for_the_type_checker_only():
    """store/seam.py imports typing (a Protocol): a command must not pay for it."""
    graph = import_graph()
    wrong = [f"{_short(m)}:{targets['loomcli.store.seam']}" for m, targets in graph.items()
             if "loomcli.store.seam" in targets]
    assert not wrong, "store.seam imported at run time:\n" + "\n".join(wrong)
