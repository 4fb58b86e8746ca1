"""One word, one meaning, and the small things a first contact trips on: what status says
without an index, counts in words that agree with their number, hints that say what to
do, sizes in one unit, and a failed ask that leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import tomlkit

from loomcli import config, console
from loomcli.extract import DOCUMENTS

from .conftest import write
from .test_cli_scan import LOOM, loom


def test_status_without_an_index_reports_none(loom_home):
    human = loom("status").stdout
    assert "MB" not in human and "(none yet)" in human
    data = json.loads(loom("status", "--json").stdout)
    assert (data["index_exists"], data["index_bytes"]) == (False, 0)
    assert not (loom_home / "index.db").exists()  # status made none either


def test_status_counts_and_sizes_in_words(scanned_notes):
    data = json.loads(loom("status", "--json").stdout)
    assert data["index_exists"] is True
    line = next(x for x in loom("status").stdout.splitlines() if x.startswith("files:"))
    assert f"{console.size(data['text_bytes'])} of text" in line
    assert "1 PDFs" not in line and "1 notes" not in line
    scan_line = next(x for x in loom("status").stdout.splitlines()
                     if x.startswith("last scan:"))
    assert "unchanged 0, skipped 0" in scan_line


@pytest.mark.parametrize("n,text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"),
                                    (8_100_000, "8.1 MB"), (7_800_000_000, "7.8 GB")])
def test_one_size_unit_everywhere(n, text):
    assert console.size(n) == text  # the web page's bytes() gives the same (test_web)


@pytest.mark.parametrize("n,text", [(0, "0 turns"), (1, "1 turn"), (2, "2 turns")])
def test_counts_agree_with_their_number(n, text):
    assert console.count(n, "turn") == text


def test_a_rescan_says_unchanged_and_the_report_keeps_skipped(scanned_notes):
    human = loom("scan", str(scanned_notes)).stdout
    assert human.startswith("added 0, updated 0, moved 0, removed 0, unchanged 9, skipped 0,")
    report = json.loads(loom("scan", str(scanned_notes), "--json").stdout)
    assert (report["skipped"], report["unchanged"], report["skips"]) == (9, 9, [])


@pytest.mark.parametrize("command", [["search", "--limit", "0", "warp"],
                                     ["conversations", "--limit", "0"]])
def test_a_limit_of_zero_says_what_to_do(scanned_notes, command):
    proc = loom(*command, check=None)
    if "No such option" in proc.stderr:
        pytest.skip("no --limit on this command")
    assert proc.returncode == 2
    assert proc.stderr.startswith("loom: limit must be 1 or more, got 0 — give 1 or more")


def test_init_names_every_kind_it_always_reads_and_agrees_with_config_get(loom_home):
    loom("init")
    written = (loom_home / "config.toml").read_text(encoding="utf-8")
    always = next(line for line in written.splitlines() if "always" in line)
    assert all(kind in always for kind in DOCUMENTS), always
    model = tomlkit.parse(written).get("llm", {}).get("model")
    got = loom("config", "get", "llm.model", check=None)
    if model is None:
        assert got.returncode == 2 and "is not set" in got.stderr
    else:
        assert got.stdout.strip() == model
    assert written == config.STARTER


def test_a_failed_ask_creates_no_conversations_file(scanned_notes, loom_home):
    # A model on a port where nothing listens: the ask fails before any answer.
    write(loom_home / "config.toml",
          '[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "http://127.0.0.1:9"\n')
    proc = loom("ask", "warp tension", check=2)
    assert proc.stderr.startswith("loom: ")
    assert not (loom_home / "conversations.db").exists()
    assert loom("conversations").stdout.strip() in ("", "no conversations yet")
    assert not Path(loom_home / "conversations.db").exists()  # listing made none either


def test_watch_says_one_folder_and_unchanged(scanned_notes):
    import select

    proc = subprocess.Popen([*LOOM, "watch", str(scanned_notes)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # its first line
        assert ready, "loom watch printed nothing in 120 s"
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert line.startswith("scanned: added 0, updated 0, moved 0, removed 0, unchanged 9, "
                           "skipped 0, failed 0;"), line
    assert "watching 1 folder," in line and "folder(s)" not in line
