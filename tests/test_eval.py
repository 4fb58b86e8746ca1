"""`loom eval`: a real folder, a real scan and real `loom` processes; the figures are
worked out by hand from the notes below (each question's words are in one note only, but
for "mouse", which the vim note holds in its title and twice in its text and the bread
note once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import write
from .llm_server import FakeLLM

LOOM = [sys.executable, "-m", "loomcli"]

NOTES = {
    "psql.md": "# Timing in psql\n\nTurn on \\timing to see how long each query takes.\n",
    "git-undo.md": "# Undo a commit\n\nUse git reset --soft HEAD~1 to keep the changes "
                   "staged.\n",
    "vim-mouse.md": "# Mouse in vim\n\nset mouse=a enables the mouse in every mode.\n",
    "bread.md": "# Sourdough\n\nFeed the starter with flour and water every day, and keep "
                "the mouse away from the flour.\n",
}

QUESTIONS = r'''
# rank 1; the phrase is sent
[[q]]
q = "psql timing"
targets = ["psql.md"]
answer = '\timing'
lang = "en"

# any target counts: rank 1
[[q]]
q = "git reset soft"
targets = ["vim-mouse.md", "git-undo.md"]
answer = "HEAD~1"
lang = "en"
kind = "people"

[[q]]
q = "mouse vim"
targets = ["vim-mouse.md"]
answer = "mouse=a"
lang = "en"

# no note holds these words: not found, not sent
[[q]]
q = "come tenevo vivo il lievito madre"
targets = ["bread.md"]
answer = "starter"
lang = "it"

# rank 2 (the vim note first); ask sends both, the phrase matched whatever its case and
# spacing
[[q]]
q = "mouse"
targets = ["bread.md"]
answer = "away  from the FLOUR"
lang = "en"
'''

SCORE_KEYS = ["questions", "recall_1", "recall_5", "recall_10", "mrr", "ask_file",
              "ask_phrase"]


def loom(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, env=os.environ,
                          cwd=cwd, timeout=120)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The notes scanned, and the questions file beside them."""
    for name, text in NOTES.items():
        write(tmp_path / "notes" / name, text)
    done = loom("scan", str(tmp_path / "notes"))
    assert done.returncode == 0, done.stderr
    write(tmp_path / "q.toml", QUESTIONS)
    return tmp_path


def test_figures_by_hand(folder: Path) -> None:
    done = loom("eval", "q.toml", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert list(report) == ["file", "questions", "languages", "modes", "unavailable",
                            "answers", "warnings"]
    assert report["questions"] == 5
    assert report["languages"] == {"en": 4, "it": 1}
    bm25 = report["modes"]["bm25"]
    assert list(bm25) == [*SCORE_KEYS, "by_lang", "by_kind", "misses"]
    # ranks 1, 1, 1, none, 2: MRR (1 + 1 + 1 + 0 + 1/2) / 5; ask sends all but the 4th
    assert {k: bm25[k] for k in SCORE_KEYS} == {
        "questions": 5, "recall_1": 0.6, "recall_5": 0.8, "recall_10": 0.8, "mrr": 0.7,
        "ask_file": 0.8, "ask_phrase": 0.8}
    assert bm25["by_lang"] == {
        "en": {"questions": 4, "recall_1": 0.75, "recall_5": 1.0, "recall_10": 1.0,
               "mrr": 0.875, "ask_file": 1.0, "ask_phrase": 1.0},
        "it": {"questions": 1, "recall_1": 0.0, "recall_5": 0.0, "recall_10": 0.0,
               "mrr": 0.0, "ask_file": 0.0, "ask_phrase": 0.0}}
    assert bm25["by_kind"] == {  # one question is kind "people", the others have none
        "?": {"questions": 4, "recall_1": 0.5, "recall_5": 0.75, "recall_10": 0.75,
              "mrr": 0.625, "ask_file": 0.75, "ask_phrase": 0.75},
        "people": {"questions": 1, "recall_1": 1.0, "recall_5": 1.0, "recall_10": 1.0,
                   "mrr": 1.0, "ask_file": 1.0, "ask_phrase": 1.0}}
    assert bm25["misses"] == [{"n": 4, "q": "come tenevo vivo il lievito madre",
                               "lang": "it", "targets": ["bread.md"], "rank": None,
                               "sent": False}]
    off = ("embeddings are off (loom config set embeddings.enabled true, then loom scan)")
    assert report["unavailable"] == {"semantic": off, "hybrid": off}
    assert report["answers"] is None and report["warnings"] == []


def test_text_report(folder: Path) -> None:
    done = loom("eval", "q.toml", "--mode", "bm25", cwd=folder)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "5 questions (4 en, 1 it) from q.toml"
    assert lines[3].split() == ["bm25", "5", "0.60", "0.80", "0.80", "0.70", "0.80", "0.80"]
    assert lines[4].split() == ["en", "4", "0.75", "1.00", "1.00", "0.88", "1.00", "1.00"]
    assert "misses in bm25 (no target in the first 5):" in lines
    assert lines[-1].split() == ["4.", "[not", "in", "50]", "come", "tenevo", "vivo", "il",
                                 "lievito", "madre", "→", "bread.md"]
    assert "semantic" not in done.stdout  # only the mode asked for
    assert done.stderr == ""


def test_a_miss_shows_its_rank(folder: Path) -> None:
    # the vim note wins "mouse"; asked for the bread note at rank 2, a miss only past 5:
    # with six more notes holding "mouse" in their title the bread note falls to #7
    for n in range(6):
        write(folder / "notes" / f"mice{n}.md", f"# Mouse {n}\n\nmouse mouse mouse\n")
    assert loom("scan", str(folder / "notes")).returncode == 0
    write(folder / "one.toml", '[[q]]\nq = "mouse"\ntargets = ["bread.md"]\n')
    report = json.loads(loom("eval", "one.toml", "--json", cwd=folder).stdout)
    bm25 = report["modes"]["bm25"]
    assert bm25["misses"] == [{"n": 1, "q": "mouse", "lang": None, "targets": ["bread.md"],
                               "rank": 8, "sent": False}]
    assert (bm25["recall_5"], bm25["recall_10"], bm25["mrr"]) == (0.0, 1.0, 0.125)
    assert bm25["ask_phrase"] is None and bm25["by_lang"] == bm25["by_kind"] == {}


def test_answers_plain_and_agent(folder: Path, loom_home: Path) -> None:
    with FakeLLM() as llm:
        llm.behaviour.answer = ["Turn on ", "\\timing", " [psql.md]."]
        write(loom_home / "config.toml", f'[llm]\nprovider = "ollama"\nmodel = "m"\n'
                                         f'endpoint = "{llm.url}"\ntimeout_s = 5\n')
        done = loom("eval", "q.toml", "--answers", "--json", cwd=folder)
        assert done.returncode == 0, done.stderr
        answers = json.loads(done.stdout)["answers"]
        # the one answer holds the 1st question's phrase and cites its target; the 4th
        # question matches nothing (no call); the agent's answer cites nothing it read
        assert answers == {
            "mode": "bm25",
            "plain": {"questions": 5, "phrase": 0.2, "cites": 0.2, "errors": 0},
            "agent": {"questions": 5, "phrase": 0.2, "cites": 0.0, "errors": 0}}
        chats = llm.chats()
    plain = [c for c in chats if not c["body"].get("tools")]
    agent = [c for c in chats if c["body"].get("tools")]
    assert len(plain) == 4 and len(agent) == 5
    text = loom("eval", "q.toml", "--answers", "--mode", "bm25", cwd=folder)
    assert text.returncode == 0, text.stderr


def test_answers_need_an_llm(folder: Path) -> None:
    done = loom("eval", "q.toml", "--answers", cwd=folder)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("loom: ")


@pytest.mark.parametrize(("text", "message"), [
    (None, "loom: nope.toml: no such file — give the path of a questions file (TOML with "
           "[[q]] entries)"),
    ('[[q]\nq = "x"\n', "loom: bad.toml: not valid TOML (Expected ']]' at the end of an "
                        "array declaration (at line 1, column 4)) — see docs/reference.md, "
                        "'loom eval': [[q]] entries with q, targets, answer"),
    ('title = "none"\n', "loom: bad.toml: no questions ([[q]] entries) found — see "
                         "docs/reference.md, 'loom eval': [[q]] entries with q, targets, "
                         "answer"),
    ('[[q]]\nq = "psql"\n', "loom: bad.toml: question 1 names no target file (targets = "
                            "[\"path\"]) — see docs/reference.md, 'loom eval': [[q]] "
                            "entries with q, targets, answer"),
    ('[[q]]\nq = "psql"\ntargets = ["psql.md"]\n[[q]]\nq = "vim"\n'
     'targets = ["notes/vim.md"]\n',
     "loom: bad.toml: question 2 names notes/vim.md, which is not in the index — fix the "
     "path (loom files lists them) or scan the folder that holds it"),
])
def test_bad_files(folder: Path, text: str | None, message: str) -> None:
    name = "nope.toml" if text is None else "bad.toml"
    if text is not None:
        write(folder / name, text)
    done = loom("eval", name, cwd=folder)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message + "\n")


def test_semantic_needs_vectors(folder: Path) -> None:
    done = loom("eval", "q.toml", "--mode", "semantic", cwd=folder)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("loom: semantic cannot be measured: embeddings are off — loom "
                           "config set embeddings.enabled true, then loom scan\n")


def test_targets_by_root_name(folder: Path) -> None:
    # the questions of tests/bench/eval name files by root name, as "kernel/…", while the
    # first root's files are shown without it
    write(folder / "r.toml", '[[q]]\nq = "psql timing"\ntargets = ["notes/psql.md"]\n')
    report = json.loads(loom("eval", "r.toml", "--json", cwd=folder).stdout)
    assert report["modes"]["bm25"]["recall_1"] == 1.0


def test_every_mode_with_vectors(tmp_path: Path, loom_home: Path) -> None:
    # the built-in model's vectors: semantic and hybrid are measured too; on these notes
    # each puts the same targets where BM25 does (the Italian question is under the floor)
    write(loom_home / "config.toml", "[embeddings]\nenabled = true\n")
    for name, text in NOTES.items():
        write(tmp_path / "notes" / name, text)
    assert loom("scan", str(tmp_path / "notes")).returncode == 0
    write(tmp_path / "q.toml", QUESTIONS)
    done = loom("eval", "q.toml", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert list(report["modes"]) == ["bm25", "semantic", "hybrid"]
    assert report["unavailable"] == {} and report["warnings"] == []
    for figures in report["modes"].values():
        assert (figures["recall_1"], figures["recall_5"], figures["mrr"],
                figures["ask_file"]) == (0.6, 0.8, 0.7, 0.8)
        assert [m["n"] for m in figures["misses"]] == [4]
