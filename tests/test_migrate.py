"""`loom migrate --to`: an index scanned into SQLite, copied into a real PostgreSQL
(tests/pg.py) and from there into a new SQLite file, answers every command the same on
all three — without a file being read again (the copies are made after the folders are
gone)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, write
from tests.test_backends import PATTERNS, QUERIES, _ranked, loom

FOLDERS = ("notes", "documents", "long", "scripts", "vault", "encodings", "bad")


@pytest.fixture
def homes(tmp_path: Path, pg_url: str) -> dict[str, dict[str, str]]:
    """Each index's environment: the scanned SQLite one, the PostgreSQL copy, and the
    SQLite copy made back from PostgreSQL (its file given to `migrate --to`)."""
    return {"sqlite": {"LOOM_HOME": str(tmp_path / "home-sqlite")},
            "postgresql": {"LOOM_HOME": str(tmp_path / "home-pg"),
                           "LOOM_DATABASE_URL": pg_url},
            "back": {"LOOM_HOME": str(tmp_path / "home-back")}}


def _scan(tmp_path: Path, env: dict[str, str], names: tuple[str, ...]) -> list[Path]:
    folders = []
    for name in names:
        shutil.copytree(FIXTURES / name, tmp_path / "data" / name)
        folders.append(tmp_path / "data" / name)
    loom(env, "scan", *map(str, folders), check=None)
    return folders


def _digest(home: str) -> str:
    """The SQLite index's bytes (the file and its write-ahead log)."""
    h = hashlib.sha256()
    for name in ("index.db", "index.db-wal"):
        path = Path(home) / name
        h.update(path.read_bytes() if path.exists() else b"")
    return h.hexdigest()


def _outputs(env: dict[str, str], paths: list[str]) -> dict[str, Any]:
    """What the reading commands print, keyed by the command."""
    out: dict[str, Any] = {}
    files = json.loads(loom(env, "files", "--json").stdout)["files"]
    for f in files:
        assert f.pop("indexed_at") > 0  # the destination's clock: not copied
    out["files"] = files
    out["files -l"] = loom(env, "files", "-l").stdout
    for pattern in PATTERNS:
        out[f"grep {pattern}"] = loom(env, "grep", "--json", *pattern, check=None).stdout
    out["grep pages"] = loom(env, "grep", "--json", "-i", "chapter|page").stdout
    for path in paths:
        out[f"get {path}"] = loom(env, "get", path).stdout
        out[f"get --json {path}"] = loom(env, "get", "--json", "--offset", "5", "--length",
                                         "300", path).stdout
    for query in (*QUERIES, "#recipe"):
        hits = json.loads(loom(env, "search", "--json", "--mode", "bm25", query,
                               check=None).stdout)
        out[f"search {query}"] = (_ranked(hits), sorted(
            (h["path"], h["snippet"], h.get("page"), h.get("offset")) for h in hits["hits"]))
    out["failed"] = loom(env, "status", "--failed").stdout
    out["skipped"] = loom(env, "status", "--skipped").stdout
    status = json.loads(loom(env, "status", "--json").stdout)
    out["status"] = {k: status[k] for k in ("files", "notes", "pdfs", "documents", "failed",
                                            "skipped", "text_bytes")}
    return out


def test_an_index_moves_to_postgresql_and_back_without_reading_a_file(tmp_path, homes
                                                                      ) -> None:
    folders = _scan(tmp_path, homes["sqlite"], FOLDERS)
    vault_note = next(p for p in (folders[4]).rglob("*.md"))
    links_of = str(vault_note.relative_to(folders[4]))
    before = _digest(homes["sqlite"]["LOOM_HOME"])
    shutil.move(tmp_path / "data", tmp_path / "gone")  # a copy must not read a file
    run = loom(homes["sqlite"], "migrate", "--to", homes["postgresql"]["LOOM_DATABASE_URL"])
    assert "copied" in run.stdout and "migrate: building grep's index" in run.stderr
    assert _digest(homes["sqlite"]["LOOM_HOME"]) == before  # the source is only read
    back = Path(homes["back"]["LOOM_HOME"]) / "index.db"
    done = json.loads(loom(homes["postgresql"], "migrate", "--json", "--to",
                           str(back)).stdout)
    assert done["files"] > 30 and done["failed"] >= 1 and done["skipped"] >= 1, done
    shutil.move(tmp_path / "gone", tmp_path / "data")

    paths = [f["path"] for f in json.loads(loom(homes["sqlite"], "files",
                                                "--json").stdout)["files"]]
    outputs = {name: _outputs(env, paths[::3]) for name, env in homes.items()}
    for key, value in outputs["sqlite"].items():
        assert outputs["postgresql"][key] == value, key
        assert outputs["back"][key] == value, key
    assert "truncated.pdf" in outputs["sqlite"]["failed"]
    assert "scanned-receipt.pdf" in outputs["sqlite"]["skipped"]
    assert '"page": 2' in outputs["sqlite"]["grep pages"]
    for env in homes.values():  # notes' links, tags and front matter came along
        links = loom(env, "links", "--json", f"vault/{links_of}", check=None)
        assert links.stdout == loom(homes["sqlite"], "links", "--json",
                                    f"vault/{links_of}", check=None).stdout
    # Sizes, mtimes and hashes came along: a scan of the copy finds nothing changed.
    rescan = loom(homes["back"], "scan", *(str(tmp_path / "data" / n) for n in FOLDERS),
                  check=None)
    assert "added 0, updated 0, moved 0, removed 0" in rescan.stdout, rescan.stdout


def test_a_destination_that_holds_an_index_is_refused(tmp_path, homes) -> None:
    _scan(tmp_path, homes["sqlite"], ("notes",))
    _scan(tmp_path / "other", homes["postgresql"], ("vault",))
    url = homes["postgresql"]["LOOM_DATABASE_URL"]
    run = loom(homes["sqlite"], "migrate", "--to", url, check=2)
    assert run.stderr.splitlines()[-1].startswith("loom: ") and \
        "already holds an index — " in run.stderr.splitlines()[-1], run.stderr
    assert "@" not in run.stderr.split("already")[0]  # never a user or a password
    own = Path(homes["sqlite"]["LOOM_HOME"]) / "index.db"
    run = loom(homes["sqlite"], "migrate", "--to", str(own), check=2)
    assert run.stderr.startswith("loom: ") and "the index itself — " in run.stderr
    copy = tmp_path / "copy.db"
    loom(homes["sqlite"], "migrate", "--to", str(copy))
    run = loom(homes["sqlite"], "migrate", "--to", str(copy), check=2)
    assert run.stderr.strip().endswith("— migrate into a new .db path or an empty database")
    assert run.stderr.count("\n") - run.stderr.count("loom: migrate:") == 1


def test_vectors_move_with_the_index(tmp_path, homes) -> None:
    """Hybrid search with the loopback embeddings server ranks the same on the copy,
    whose vectors were copied, not made again (the server is gone when it is asked)."""
    from tests.embed_server import FakeEmbeddings

    with FakeEmbeddings() as server:
        config = ('[embeddings]\nenabled = true\nprovider = "ollama"\n'
                  f'endpoint = "{server.url}"\n')
        for env in homes.values():
            write(Path(env["LOOM_HOME"]) / "config.toml", config)
        _scan(tmp_path, homes["sqlite"], ("notes", "vault"))
        done = json.loads(loom(homes["sqlite"], "migrate", "--json", "--to",
                               homes["postgresql"]["LOOM_DATABASE_URL"]).stdout)
        assert done["vectors"] > 10, done
        for query in ("how do I bake bread", "garden plans for spring", "watchdog"):
            hits = {name: json.loads(loom(homes[name], "search", "--json", "--mode",
                                          "hybrid", query).stdout)
                    for name in ("sqlite", "postgresql")}
            assert _ranked(hits["sqlite"]) == _ranked(hits["postgresql"]), query
            assert _ranked(hits["sqlite"]), query
        counts = {name: json.loads(loom(homes[name], "status", "--json").stdout)["vectors"]
                  for name in ("sqlite", "postgresql")}
        assert counts["sqlite"] == counts["postgresql"], counts


def test_what_a_new_sqlite_file_cannot_be_is_refused_untouched(tmp_path) -> None:
    """SQLite only (no server needed): a file that is not an index, a folder, and an
    index whose first folder was forgotten (its paths would change) — one line each, the
    destination as it was."""
    env = {"LOOM_HOME": str(tmp_path / "home")}
    folders = _scan(tmp_path, env, ("notes", "vault"))
    other = write(tmp_path / "notes.txt", "not an index\n")
    run = loom(env, "migrate", "--to", str(other), check=2)
    assert run.stderr == f"loom: {other} already exists and is not an index — give the " \
        "path of a new .db file\n"
    assert other.read_text() == "not an index\n"
    run = loom(env, "migrate", "--to", str(tmp_path), check=2)
    assert run.stderr.startswith(f"loom: {tmp_path}: ") and run.stderr.count("\n") == 1
    loom(env, "forget", str(folders[0]))
    run = loom(env, "migrate", "--to", str(tmp_path / "copy.db"), check=2)
    assert "first folder was forgotten" in run.stderr.splitlines()[-1], run.stderr
    # What was begun was rolled back: the same path takes another index's migration.
    fresh = {"LOOM_HOME": str(tmp_path / "fresh")}
    loom(fresh, "scan", str(folders[0]))
    assert "copied 9 files" in loom(fresh, "migrate", "--to", str(tmp_path / "copy.db")
                                    ).stdout
