"""A short note beside long manuals, ranked by meaning (issue 31): the files by meaning add
up a file's three closest passages, so the espresso maker's manual, many passages about
water escaping from it, outweighed the one-passage note that says what happened to the
coffee machine, though the note is closer to the question. A note whose passage is about
as close as the best manual's counts again for the passages it lacks; a note that is
merely close does not. Real `loom` subprocesses over a real folder, the built-in model's
vectors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli.search import retrieve
from loomcli.search.semantic import Passage
from tests.conftest import scanned_with_meaning, write

LOOM = [sys.executable, "-m", "loomcli"]
APPLIANCES = {
    "dishwasher": ["spray arm", "filter", "salt container", "rinse aid", "door seal"],
    "laundry-washer": ["drum", "detergent drawer", "drain pump", "door seal", "hose"],
    "boiler": ["pressure gauge", "heat exchanger", "expansion vessel", "valve", "flue"],
    "fridge": ["water dispenser", "door seal", "defrost drain", "ice tray", "compressor"],
    "water-heater": ["anode", "thermostat", "relief valve", "tank", "inlet"],
    "espresso-maker": ["water tank", "brew group", "milk frother", "drip tray", "portafilter"],
}
# In Italian: it shares no word with the English question, so only its meaning finds it.
COFFEE = ("# Macchina del caffè\n\nLa macchina del caffè perdeva acqua sotto la base; l'ho "
          "decalcificata con acido citrico due volte e ha smesso di gocciolare.\n")
NOTES = {"bread.md": "# Sourdough\n\nFed the starter at eight, baked at 250 for forty "
                     "minutes.\n",
         "bike.md": "# Bicycle\n\nNew chain and brake pads from the shop in town, 45 euros.\n",
         "plants.md": "# Plants\n\nThe basil wants watering every other day in July.\n",
         "taxes.md": "# Taxes\n\nThe accountant wants the receipts by the end of April.\n"}


def loom(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=900)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def manual(name: str, parts: list[str], rng: random.Random) -> str:
    """A long appliance manual: eighty sections about water escaping from one part or
    another, none with a word of the question."""
    thing = name.replace("-", " ")
    out = [f"# {thing.title()} user guide\n"]
    for n in range(80):
        part = parts[n % len(parts)]
        out.append(f"\n## Section {n}: the {part}\n\nIf water escapes under the {thing}, "
                   f"check the {part} and its seals; a worn seal lets water through. Clean "
                   f"the {part} every {rng.randint(2, 9)} weeks with a soft cloth, and call "
                   f"service if the {thing} shows error E{n:02d}.\n")
    return "".join(out)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("short")
    notes = base / "notes"
    rng = random.Random(31)
    for name, parts in APPLIANCES.items():
        write(notes / "manuals" / f"{name}.md", manual(name, parts, rng))
    write(notes / "notes" / "caffe.md", COFFEE)
    for name, text in NOTES.items():
        write(notes / "notes" / name, text)
    return scanned_with_meaning(base / "home", notes, loom)


def paths(query: str, mode: str) -> list[str]:
    proc = loom("search", query, "--json", "--mode", mode, check=None)
    assert proc.returncode in (0, 1), proc.stderr
    return [h["path"] for h in json.loads(proc.stdout)["hits"]]


@pytest.mark.parametrize("query", ["coffee machine leaking", "the coffee machine was leaking",
                                   "what did I do about the leaking coffee machine"])
def test_the_note_closest_by_meaning_beats_the_long_manual(home, monkeypatch, query):
    """No word of the question in any file, so hybrid ranks by meaning alone: the note's
    one passage is the closest of all, and it comes first (it was second, below the
    espresso maker's manual, whose three closest passages added up to more)."""
    monkeypatch.setenv("LOOM_HOME", str(home))
    assert paths(query, "bm25") == []
    assert paths(query, "semantic")[:2] == ["notes/caffe.md", "manuals/espresso-maker.md"]
    assert paths(query, "hybrid")[:2] == ["notes/caffe.md", "manuals/espresso-maker.md"]


def test_a_note_merely_close_does_not_pass_the_manual(home, monkeypatch):
    """The manual's closest passage is closer than the note's by more than SHORT_MARGIN:
    the manual stays first."""
    monkeypatch.setenv("LOOM_HOME", str(home))
    query = "my coffee machine is leaking, what fixed it last time"
    assert paths(query, "semantic")[:2] == ["manuals/espresso-maker.md", "notes/caffe.md"]
    assert paths(query, "hybrid")[0] == "manuals/espresso-maker.md"


def _pool(*passages: tuple[int, float]) -> list[Passage]:
    return [Passage(fid, score, 0, 1) for fid, score in passages]


def test_files_by_meaning_counts_a_short_file_again_only_near_the_best():
    """The rule itself. Manual 1: passages at 0.40, 0.30, 0.20 (0.652 by the plain sum).
    Note 4, two passages at 0.39 and 0.38: its last within 0.03 of 0.40, so counted once
    more (0.755). Note 2, one passage at 0.38: counted twice more (0.745). Note 3, one at
    0.35: more than 0.03 below, left as it is (counted again, 0.686, it passed the
    manual)."""
    counts = {1: 40, 2: 1, 3: 1, 4: 2}
    pool = _pool((1, 0.40), (4, 0.39), (2, 0.38), (4, 0.38), (3, 0.35), (1, 0.30), (1, 0.20))
    assert retrieve._files_by_meaning(pool, None) == [1, 4, 2, 3]  # the plain sums
    assert retrieve._files_by_meaning(pool, counts) == [4, 2, 1, 3]
    assert retrieve._files_by_meaning(pool, counts, margin=0.0) == [1, 4, 2, 3]
    # Note 4's second passage outside the pool: it is not counted again.
    assert retrieve._files_by_meaning([c for c in pool if (c.file_id, c.score) != (4, 0.38)],
                                      counts) == [2, 1, 4, 3]
