"""Hybrid fusion counts how strongly a file matches, not only its ranks (issue 31,
retrieve.STRENGTH). Reciprocal rank fusion gives a file ranked first by meaning alone
barely more than one ranked thirtieth there and first by BM25, so a note whose one passage
is by far the closest to the question fell below a file that only shares its words.

Real `loom` subprocesses over a real folder; the vectors come from the project's loopback
stand-in for an embeddings server, answering each passage with a vector at a chosen cosine
to the question (the `cosNN` mark in its text), so the ranks in each list are exact."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import write
from tests.embed_server import FakeEmbeddings

LOOM = [sys.executable, "-m", "loomcli"]
DIM = 64
QUESTION = "which brass hinges squeak loudly downstairs"


class Marked:
    """The question is the first axis; a text marked `cosNN` is at cosine NN/100 to it,
    the rest of it along an axis of its own (by the text's hash)."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            row = [0.0] * DIM
            mark = next((w for w in text.split() if w.startswith("cos") and w[3:].isdigit()),
                        None)
            if mark is None:
                row[0] = 1.0
            else:
                cos = int(mark[3:]) / 100
                row[0] = cos
                axis = 1 + hashlib.blake2b(text.encode(), digest_size=4).digest()[0] % (DIM - 1)
                row[axis] = math.sqrt(1 - cos * cos)
            out.append(row)
        return out


def loom(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[Path, FakeEmbeddings]]:
    base = tmp_path_factory.mktemp("strength")
    notes = base / "notes"
    # The note that answers, closest of all by meaning (0.90), sharing no word.
    write(notes / "door.md", "# Front door\n\ncos90 The old door was oiled on a Sunday and "
                             "has been quiet since.\n")
    # The file that has the question's words, far by meaning (0.20, thirtieth).
    write(notes / "catalogue.md", "# Catalogue\n\ncos20 brass hinges squeak loudly "
                                  "downstairs in the showroom of the catalogue.\n")
    # 28 notes between them by meaning (0.40 to 0.67), without the question's words.
    for n in range(28):
        write(notes / f"note{n:02d}.md", f"# Note {n}\n\ncos{40 + n} A note about the "
                                         f"garden, number {n}, and what was planted there.\n")
    with FakeEmbeddings() as server:
        server.embed = Marked().embed  # type: ignore[method-assign]
        write(base / "home" / "config.toml", '[embeddings]\nenabled = true\nprovider = '
                                             f'"ollama"\nendpoint = "{server.url}"\n')
        proc = subprocess.run([*LOOM, "scan", str(notes)], capture_output=True, text=True,
                              timeout=600, env={**_env(), "LOOM_HOME": str(base / "home")})
        assert proc.returncode == 0, proc.stderr
        yield base / "home", server


def _env() -> dict[str, str]:
    return dict(os.environ)


def paths(mode: str) -> list[str]:
    proc = loom("search", QUESTION, "--json", "--mode", mode)
    return [h["path"] for h in json.loads(proc.stdout)["hits"]]


def test_the_note_closest_by_meaning_beats_a_file_that_only_shares_words(home, monkeypatch):
    """By ranks alone the catalogue came first (first in both BM25 lists, thirtieth by
    meaning: 0.0442 against the note's 0.0410); its best passage is far from the question
    (0.20 against 0.90), so with the strength of each match the note comes first."""
    folder, server = home
    monkeypatch.setenv("LOOM_HOME", str(folder))
    assert server.requests  # the stand-in answers the question's vector too
    assert paths("bm25") == ["catalogue.md"]
    by_meaning = paths("semantic")
    assert by_meaning[0] == "door.md" and "catalogue.md" not in by_meaning
    hybrid = paths("hybrid")
    assert hybrid[0] == "door.md"
    assert "catalogue.md" in hybrid[:5]
