"""Shared fixtures: every test gets its own LOOM_HOME (no test touches ~/.loom)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# 31 odd real PDFs (py-pdf/sample-files, CC-BY-SA-4.0; see its LICENSE and files.json)
PDF_SAMPLES = FIXTURES / "pdf-samples"


def sigint_default() -> None:
    """`preexec_fn` for the loom processes a test interrupts with SIGINT. A suite started
    with SIGINT ignored (`pytest &` in a script) passes the ignored signal on to every
    child, and a Python child that starts with SIGINT ignored never sees Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def pytest_configure(config: pytest.Config) -> None:
    """As root, this session's temp folders live in a folder of their own: pytest sets
    /tmp/pytest-of-root back to mode 0700 whenever any session starts, and the tests
    that drop privileges (as_user) need their folders' parents open to that user — a
    second suite started meanwhile made them fail at random."""
    if os.geteuid() == 0 and not config.option.basetemp and not hasattr(config, "workerinput"):
        import tempfile

        base = tempfile.mkdtemp(prefix="loom-tests-")
        config.option.basetemp = os.path.join(base, "basetemp")
        config.stash[_OWN_BASETEMP] = base


def pytest_unconfigure(config: pytest.Config) -> None:
    base = config.stash.get(_OWN_BASETEMP, None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[str]()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: twice the cores, at most four more than them. Most tests wait on
    processes they start (loom, servers, a browser, PostgreSQL, pip): with one worker a
    core the suite kept the machine 70% busy; two a core (four on 2 cores) took 702 s
    to about 310 s, every wait still on an event."""
    cores = os.cpu_count() or 1
    return min(2 * cores, cores + 4)


@pytest.fixture(autouse=True)
def loom_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "loom-home"
    monkeypatch.setenv("LOOM_HOME", str(home))
    monkeypatch.delenv("LOOM_CONFIG", raising=False)
    monkeypatch.delenv("LOOM_DEBUG", raising=False)
    return home


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A fresh copy of fixtures/notes to scan and modify."""
    dest = tmp_path / "notes"
    shutil.copytree(FIXTURES / "notes", dest)
    return dest


@pytest.fixture
def scanned_notes(notes: Path) -> Path:
    """fixtures/notes copied and indexed by a real `loom scan`."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                   capture_output=True)
    return notes


def imported(stderr: str) -> set[str]:
    """The modules a `python -X importtime` run imported, from its stderr."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def git_unignored(root: Path, exclude: list[str] | None = None) -> set[str]:
    """Files git would not ignore under `root` (its own verdict, via ls-files)."""
    import subprocess

    gitdir = root.parent / (root.name + ".gitdir")
    env = {**os.environ, "GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(root),
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root.parent)}
    if not gitdir.exists():
        subprocess.run(["git", "init", "-q"], env=env, check=True, cwd=root)
    info = gitdir / "info"
    info.mkdir(exist_ok=True)
    (info / "exclude").write_text("\n".join(exclude or []) + "\n", encoding="utf-8")
    out = subprocess.run(
        ["git", "-c", "core.ignorecase=false", "ls-files", "-z", "--others",
         "--exclude-standard", "--exclude-per-directory=.loomignore"],
        env=env, cwd=root, check=True, capture_output=True,
    ).stdout
    return {p.decode() for p in out.split(b"\0") if p}


NOBODY = 65534


def as_user(*trees: Path) -> list[str]:
    """A command prefix that runs as a normal user who owns `trees` (permissions mean
    nothing to root). Empty when the tests already run as a normal user."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop "
                    "privileges to test permissions")
    import loomcli

    for tree in trees:
        tree.mkdir(parents=True, exist_ok=True)
    # The user must reach the trees, the interpreter and loom's source (an editable
    # install in a clone under a private temp folder).
    for place in (*trees, Path(sys.prefix), Path(loomcli.__file__).resolve().parent):
        for parent in place.parents:
            if parent == Path(parent.anchor):
                break
            parent.chmod(parent.stat().st_mode | 0o011)
    for tree in trees:
        for p in [tree, *tree.rglob("*")]:
            os.chown(p, NOBODY, NOBODY, follow_symlinks=False)
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def scanned_with_meaning(home: Path, notes: Path, loom: Any) -> Path:
    """`home` made to index `notes` with the built-in model's vectors, and an LLM endpoint
    nothing listens on (ask must not call it); scanned by `loom` (a module-scoped
    fixture's, so LOOM_HOME is set for the scan by hand and put back)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    write(home / "config.toml", "[embeddings]\nenabled = true\n[llm]\nprovider = "
          f'"ollama"\nendpoint = "http://127.0.0.1:{closed}"\n')
    old = os.environ.get("LOOM_HOME")
    os.environ["LOOM_HOME"] = str(home)
    try:
        loom("scan", str(notes))
    finally:
        if old is not None:
            os.environ["LOOM_HOME"] = old
    return home


def bm25_hits(store: Any, query: str, limit: int, operator: str = "auto") -> list[Any]:
    """Files by BM25 with their snippets, as a search composes them (retrieve.rank_files,
    then hits.hits): what the store's old `search` gave."""
    from loomcli.search.hits import hits
    from loomcli.search.retrieve import rank_files

    return hits(store, rank_files(store, query, limit, operator), query)


def _postgresql(why: str | None, start: Any, what: str) -> Any:
    """A server from `start()` for a session fixture, stopped and removed at its end; skips
    with `why` (or why it would not start) where it cannot run."""
    if why is not None:
        pytest.skip(why)
    try:
        server = start()
    except RuntimeError as exc:
        pytest.skip(f"{what} could not be started: {exc}")
    yield server
    server.stop()
    shutil.rmtree(server.base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Any:
    """A real PostgreSQL for the session (tests/pg.py), stopped at its end; the tests that
    use it skip, with the reason, where none can be started."""
    from tests import pg

    yield from _postgresql(pg.reason(), pg.start_server, "PostgreSQL")


@pytest.fixture
def pg_url(pg_server: Any) -> str:
    """The url of a new, empty database on the session's PostgreSQL."""
    return str(pg_server.create_db())


@pytest.fixture(scope="session")
def pgvector_server() -> Any:
    """A real PostgreSQL that has pgvector (tests/pg.py: vector_bin), for the session; the
    tests that use it skip, with the reason, where none can be started."""
    from tests import pg

    why = pg.vector_reason()
    yield from _postgresql(why, lambda: pg.start_server(pg.vector_bin()),
                           "PostgreSQL with pgvector")


@pytest.fixture
def pgvector_url(pgvector_server: Any) -> str:
    """The url of a new, empty database on the session's PostgreSQL with pgvector."""
    return str(pgvector_server.create_db())


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, monkeypatch) -> str:
    """Each backend in turn: PostgreSQL (tests/pg.py) through LOOM_DATABASE_URL; where
    none can be started, its run skips saying why."""
    if request.param == "postgresql":
        monkeypatch.setenv("LOOM_DATABASE_URL", request.getfixturevalue("pg_url"))
    return request.param
