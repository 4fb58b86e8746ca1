"""`loom` as a user runs it: real subprocesses, real index files, exact outputs."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import PDF_SAMPLES, as_user, sigint_default, write

LOOM = [sys.executable, "-m", "loomcli"]
pytestmark = pytest.mark.plain  # also run on a plain install (.ci/run)


def loom(*args: str, env: dict | None = None, check: int | None = 0,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, env=env or os.environ,
                          cwd=cwd, timeout=120)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_scan_json_report_keys_and_exit_codes(notes):
    out = json.loads(loom("scan", str(notes), "--json").stdout)
    assert list(out) == ["added", "updated", "moved", "removed", "skipped", "failed",
                         "duration_ms", "errors", "skips", "unchanged"]
    assert (out["added"], out["failed"], out["errors"], out["unchanged"]) == (9, 0, [], 0)
    human = loom("scan", str(notes))
    assert human.stdout.startswith("added 0, updated 0, moved 0, removed 0, unchanged 9, "
                                   "skipped 0, failed 0 in ")
    again = json.loads(loom("scan", str(notes), "--json").stdout)
    # `skipped` counts unchanged files too, as it always has; `unchanged` only them
    assert (again["skipped"], again["unchanged"], again["skips"]) == (9, 9, [])
    assert human.stdout.count("\n") == 1 and human.stderr == ""


def test_failures_exit_1_with_reasons_on_stderr(tmp_path, loom_home):
    import shutil

    from .conftest import FIXTURES
    write(loom_home / "config.toml", "[ocr]\nenabled = false\n")  # as without Tesseract
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "bad", bad)
    proc = loom("scan", str(bad), check=1)
    assert proc.stdout.startswith("added 1, updated 0, moved 0, removed 0, unchanged 0, "
                                  "skipped 1, failed 2")
    assert "loom: failed: truncated.pdf: damaged or unsupported PDF" in proc.stderr
    # A scan without OCR is a valid PDF without text: skipped, saying why.
    assert ("loom: skipped 1 file with no text to index (e.g. scanned-receipt.pdf: PDF has "
            "no text layer (scanned or image-only pages)) — `loom status --skipped` lists "
            "them\n") in proc.stderr
    listed = loom("status", "--skipped").stdout
    assert listed.startswith("scanned-receipt.pdf: PDF has no text layer (scanned or "
                             "image-only pages) — install Tesseract to read scanned pages")


def index_bytes(db: Path) -> bytes:
    """The index as SQLite would read it: the main file plus its write-ahead log."""
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def test_malformed_pattern_exit_2_names_file_and_line(notes, loom_home):
    loom("scan", str(notes))
    db = loom_home / "index.db"
    before = index_bytes(db)
    (notes / "ideas.org").unlink()
    (notes / ".loomignore").write_text("# rules\n*.tmp\n[ab\n")
    proc = loom("scan", str(notes), check=2)
    assert proc.stderr.startswith('loom: .loomignore:3: invalid pattern \'[ab\': unterminated [')
    assert proc.stdout == ""
    assert index_bytes(db) == before  # not one byte written
    assert json.loads(loom("files", "--json").stdout)["files"][0]["path"] == "ideas.org"


def test_unreadable_loomignore_stops_the_scan(notes, loom_home):
    loom("scan", str(notes))
    db = loom_home / "index.db"
    before = index_bytes(db)
    (notes / "journal" / ".loomignore").write_text("*.md\n")
    run_as = as_user(loom_home, notes)
    (notes / "journal" / ".loomignore").chmod(0)
    proc = subprocess.run([*run_as, *LOOM, "scan", str(notes)], capture_output=True,
                          text=True, env=os.environ, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"loom: cannot read {notes / 'journal' / '.loomignore'}: Permission "
                           "denied — make it readable (chmod a+r) or remove it, then scan "
                           "again\n")
    assert index_bytes(db) == before


def test_missing_folder_and_no_index_errors_say_what_to_do(tmp_path):
    proc = loom("scan", str(tmp_path / "nope"), check=2)
    assert proc.stderr == f"loom: folder {tmp_path / 'nope'} does not exist — check the " \
                          "path, or create it first\n"
    proc = loom("search", "x", check=2)
    assert "no index" in proc.stderr and "loom scan DIR" in proc.stderr
    proc = loom("scan", check=2)
    assert "no folder to scan" in proc.stderr


def test_bad_config_names_file_and_key(notes, loom_home):
    write(loom_home / "config.toml", "[ask]\ntop_k = \"five\"\n")
    proc = loom("scan", str(notes), check=2)
    assert "config.toml: key 'ask.top_k' must be an integer, got 'five'" in proc.stderr


def test_search_files_status_get_json_keys(notes):
    loom("scan", str(notes))
    hits = json.loads(loom("search", "warp", "tension", "--json").stdout)["hits"]
    assert hits and list(hits[0]) == ["path", "title", "score", "snippet", "content_len",
                                      "match", "page", "offset", "backlinks", "tags"]
    assert {h["match"] for h in hits} == {"bm25"}
    assert all(a["score"] >= b["score"] for a, b in zip(hits, hits[1:], strict=False))
    files = json.loads(loom("files", "--json").stdout)["files"]
    assert list(files[0]) == ["path", "title", "kind", "content_len", "indexed_at"]
    assert {f["kind"] for f in files} == {"note", "pdf"}
    status = json.loads(loom("status", "--json").stdout)
    assert (status["files"], status["pdfs"], status["failed"]) == (9, 2, 0)
    assert status["last_scan"]["report"]["skipped"] == 0
    assert status["last_scan"]["report"]["added"] == 9
    got = json.loads(loom("get", "manuals/field-guide.pdf", "--offset", "0", "--length", "5",
                          "--json").stdout)
    assert got == {"path": "manuals/field-guide.pdf", "offset": 0, "length": 5,
                   "content_len": got["content_len"], "content": "Field"}
    assert loom("get", "recipes/crepes-latin1.txt").stdout.startswith("# Crêpes de la")
    assert "not in the index" in loom("get", "nope.md", check=2).stderr


def test_search_any_text_and_no_match_exit_1(notes):
    loom("scan", str(notes))
    for query in ['"unbalanced', "AND OR NOT", "NEAR(", "*", "c++ -x"]:
        assert loom("search", query, check=None).returncode in (0, 1)
    proc = loom("search", "qwertyuiopzz", check=1)
    assert proc.stdout == "" and proc.stderr == "loom: no matches\n"


USER_CONFIG = """\
# my loom setup — keep these comments
notes_dirs = ["~/n"]   # the archive
custom = 1

[embeddings]
enabled = true         # semantic search on
model = "nomic"

[llm]
provider = "openai"    # a local vLLM
model = "qwen3-coder"
modle = "typo"

[future]
x = [1, 2]
"""


def test_config_set_keeps_every_key_and_comment(loom_home):
    path = loom_home / "config.toml"
    write(path, USER_CONFIG)
    proc = loom("config", "set", "ask.top_k", "7")
    assert proc.stderr == ("loom: warning: config.toml: unknown key custom — loom does not "
                           "use it\nloom: warning: config.toml: unknown key [llm] modle — did "
                           "you mean model?\nloom: warning: config.toml: unknown key future — "
                           "loom does not use it\n")
    loom("config", "set", "llm.model", "qwen3")
    assert path.read_text() == USER_CONFIG.replace('"qwen3-coder"', '"qwen3"') + \
        "\n[ask]\ntop_k = 7\n"
    assert loom("config", "get", "ask.top_k").stdout == "7\n"
    assert loom("config", "set", "llm.provider", "nope", check=2).stderr.endswith(
        "loom: config.toml: key 'llm.provider' must be one of ollama, openai, anthropic, got "
        "'nope'\n".replace("config.toml", str(path)))
    assert path.read_text().count("qwen3") == 1  # the refused value was not written
    before = path.read_text()
    proc = loom("config", "set", "llm", "anthropic", check=2)
    assert "key 'llm' must be a table ([llm]), got 'anthropic'" in proc.stderr
    assert path.read_text() == before  # a write never breaks the file


def test_init_force_adds_only_what_is_missing(loom_home):
    path = loom_home / "config.toml"
    write(path, USER_CONFIG)
    proc = loom("init", check=2)
    assert proc.stderr.startswith(f"loom: config already exists: {path} — `loom init --force`")
    assert path.read_text() == USER_CONFIG
    loom("init", "--force")
    text = path.read_text()
    lines = iter(text.splitlines())
    assert all(line in lines for line in USER_CONFIG.splitlines())  # every line, in order
    import tomllib

    data = tomllib.loads(text)
    assert data["embeddings"] == {"enabled": True, "model": "nomic"}
    assert data["llm"] == {"provider": "openai", "model": "qwen3-coder", "modle": "typo"}
    assert data["ask"] == {"top_k": 5, "file_budget_chars": 8000, "head_chars": 1200}
    assert data["custom"] == 1 and data["future"] == {"x": [1, 2]}
    assert loom("init", "--force").stdout == f"{path}: added nothing (complete)\n"


@pytest.mark.parametrize("text,message", [
    ('llm = "anthropic"\n', "key 'llm' must be a table ([llm]), got 'anthropic'"),
    ('[ask]\ntop_k = "five"\n', "key 'ask.top_k' must be an integer, got 'five'"),
    ("[llm]\ntimeout_s = -1\n", "key 'llm.timeout_s' must be a positive number, got -1"),
    ("[llm]\ntimeout_s = nan\n", "key 'llm.timeout_s' must be a positive number, got nan"),
    ("[llm]\ntimeout_s = inf\n", "key 'llm.timeout_s' must be a positive number, got inf"),
    ('notes_dirs = "~/n"\n', "key 'notes_dirs' must be a list, got '~/n'"),
])
def test_a_value_of_the_wrong_shape_names_file_and_key(loom_home, text, message):
    path = write(loom_home / "config.toml", text)
    proc = loom("status", check=2)
    assert proc.stderr.startswith(f"loom: {path}: {message}"), proc.stderr


def test_init_writes_a_valid_starting_config(loom_home, notes):
    loom("init")
    assert (loom_home / "config.toml").exists()
    proc = loom("scan", str(notes))
    assert proc.stderr == ""  # the starter config has no unknown key


@pytest.mark.parametrize("args,message", [
    (["grep"], "loom: Missing argument 'pattern' — try loom grep --help\n"),
    (["grep", "x", "--max-count", "many"], "loom: Invalid value for '--max-count' / '-m': "
     "'many' is not a valid int — try loom grep --help\n"),
    (["grep", "x", "--color", "blue"], "loom: Invalid value for '--color': 'blue' is not one "
     "of auto, always, never — try loom grep --help\n"),
    (["grep", "x", "-l", "-c"], "loom: -l and -c cannot be used together — choose one\n"),
    (["search", "x", "-n", "3"], "loom: No such option: -n — try loom search --help\n"),
    (["conversations", "-n", "3"],
     "loom: No such option: -n — try loom conversations --help\n"),
    (["serch", "x"],
     "loom: No such command 'serch'. Did you mean 'search', 'serve'? — try loom --help\n"),
    (["search", "x", "--bogus"],
     "loom: No such option: --bogus — try loom search --help\n"),
    # Only the command being run is built (start-up): errors around it are unchanged.
    (["config", "sett"],
     "loom: No such command 'sett'. Did you mean 'set', 'unset'? — try loom config --help\n"),
    (["--config"], "loom: Option '--config' requires an argument — try loom --help\n"),
    (["--config", "/nonexistent.toml", "grep"],
     "loom: Missing argument 'pattern' — try loom grep --help\n"),
])
def test_usage_errors_are_one_line_exit_2(args, message, scanned_notes):
    proc = loom(*args, check=2)
    assert (proc.stdout, proc.stderr) == ("", message)


def test_a_closed_pipe_is_silent_and_exit_0(scanned_notes):
    proc = subprocess.run(f"{sys.executable} -m loomcli files | head -1; "
                          "echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                          capture_output=True, text=True, env=os.environ)
    assert proc.stdout == "ideas.org\n0\n" and proc.stderr == ""


# -- interruption, crashes, concurrency ---------------------------------------------------

def slow_corpus(tmp_path: Path, copies: int = 40) -> Path:
    """Many distinct copies of the 117-page PDF: a scan that takes a few seconds."""
    src = next(PDF_SAMPLES.glob("009-*/*.pdf")).read_bytes()
    folder = tmp_path / "slow"
    folder.mkdir()
    for i in range(copies):
        (folder / f"manual-{i:03}.pdf").write_bytes(src + f"\n% copy {i}\n".encode())
    return folder


def wait_for_rows(db: Path, minimum: int, proc: subprocess.Popen, limit: float = 600) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the scan finished before it could be interrupted"
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                n = conn.execute("SELECT count(*) FROM files").fetchone()[0]
            if n >= minimum:
                return n
        except sqlite3.OperationalError:
            pass
        time.sleep(0.05)
    raise AssertionError("no rows appeared")


def check_consistent(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 1)")
    conn.execute("INSERT INTO grams (grams, rank) VALUES ('integrity-check', 1)")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # every text is either in grep's trigram index or waiting for it, never gone from both
    assert conn.execute("SELECT count(*) FROM grams_todo WHERE id NOT IN "
                        "(SELECT id FROM docs)").fetchone()[0] == 0
    conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGKILL, -9)])
def test_interrupted_scan_leaves_a_consistent_index_and_the_next_completes(
        tmp_path, loom_home, sig, code):
    folder = slow_corpus(tmp_path, copies=60)
    db = loom_home / "index.db"
    proc = subprocess.Popen([*LOOM, "scan", str(folder)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    wait_for_rows(db, 1, proc)
    proc.send_signal(sig)
    proc.wait(timeout=300)  # a generous deadline: the machine may be busy
    stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == code, stderr
    if sig == signal.SIGINT:  # says what was saved and that the next scan finishes it
        [said] = [line for line in stderr.splitlines() if "interrupted" in line]
        assert said.startswith("loom: scan interrupted; saved: added ")
        assert said.endswith(" — the next `loom scan` finishes the rest")
    check_consistent(db)
    loom("search", "Topologie", check=None)  # usable while half built
    # grep's answer is the linear scan's, whatever the trigram index holds yet
    fast = loom("grep", "-i", "topologie", "--json", check=None).stdout
    assert fast == loom("grep", "-i", r"\Qtopologie\E", "--json", check=None).stdout
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert report["added"] + report["skipped"] == 60 and report["failed"] == 0
    assert 0 < report["added"] < 60
    files = json.loads(loom("files", "--json").stdout)["files"]
    assert len(files) == 60
    check_consistent(db)


@pytest.mark.slow
def test_two_scans_at_once_one_waits_and_searches_never_block(tmp_path, loom_home):
    folder = slow_corpus(tmp_path, copies=24)
    db = loom_home / "index.db"
    first = subprocess.Popen([*LOOM, "scan", str(folder), "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    wait_for_rows(db, 1, first)
    second = subprocess.Popen([*LOOM, "scan", str(folder), "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    search = loom("search", "Topologie", "--json", check=None)
    # The search finished while the first scan still writes: it did not wait for it.
    assert search.returncode in (0, 1) and first.poll() is None
    out1, _ = first.communicate(timeout=600)
    out2, err2 = second.communicate(timeout=600)
    assert first.returncode == 0 and second.returncode == 0, err2
    assert "waiting for it to finish" in err2
    r1, r2 = json.loads(out1), json.loads(out2)
    assert r1["added"] == 24 and r2["skipped"] == 24 and r2["added"] == 0
    check_consistent(db)


def test_a_deleted_root_is_named_and_can_be_forgotten(notes, tmp_path):
    other = tmp_path / "other"
    write(other / "x.md", "# Other\nhello\n")
    loom("scan", str(notes))
    loom("scan", str(other))
    import shutil

    shutil.rmtree(notes)
    proc = loom("scan", check=2)
    assert proc.stderr == (f"loom: indexed folder {notes} does not exist any more — restore "
                           f"it, or drop it from the index: loom forget {notes}\n")
    assert loom("forget", str(notes)).stdout == f"forgot {notes}: removed 9 files from the " \
                                                  "index\n"
    assert json.loads(loom("scan", "--json").stdout)["skipped"] == 1
    assert loom("files").stdout == "other/x.md\n"  # paths stay put: its prefix stays
    assert "not an indexed folder" in loom("forget", "nope", check=2).stderr
