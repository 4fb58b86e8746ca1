"""/healthz and /search latency while slow asks and heavy greps run (issue 35, item 15).

A real `loom serve --processes 1` over a temp index with one 8 MB note; a FakeLLM held
by a gate stands in for a slow model. Eight asks (four admitted, four answered 503) and
eight greps that read the whole note run while 200 /healthz and 20 /search are timed.

    .venv/bin/python -m tests.bench.bench_serve_load
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.llm_server import FakeLLM
from tests.test_http import Server


def call(url: str, path: str, body: object = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, notes = Path(tmp) / "home", Path(tmp) / "notes"
        notes.mkdir()
        (notes / "big.md").write_text("# Big\n" + "ordinary words on a line\n" * 330_000)
        (notes / "bread.md").write_text("# Bread\nsourdough starter\n")
        os.environ["LOOM_HOME"] = str(home)
        subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                       capture_output=True)
        gate = threading.Event()
        with FakeLLM() as llm:
            llm.behaviour.gate = gate
            (home / "config.toml").write_text(
                f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
            server = Server("--processes", "1")
            statuses: list[int] = []
            work = [threading.Thread(target=lambda: statuses.append(call(
                server.url, "/ask", {"question": "sourdough"}))) for _ in range(8)]
            work += [threading.Thread(target=lambda: statuses.append(call(
                server.url, "/grep", {"pattern": r"z\w+q|words? on (a|the) l\w+e$x"})))
                for _ in range(8)]
            for t in work:
                t.start()
            health, search = [], []
            for n in range(200):
                t0 = time.perf_counter()
                assert call(server.url, "/healthz") == 200
                health.append(time.perf_counter() - t0)
                if n % 10 == 0:
                    t0 = time.perf_counter()
                    assert call(server.url, "/search", {"query": "sourdough"}) == 200
                    search.append(time.perf_counter() - t0)
            gate.set()
            for t in work:
                t.join()
            server.stop()
    print(f"/healthz ms: p50 {p(health, .5):.1f} p99 {p(health, .99):.1f} "
          f"max {max(health) * 1000:.1f}; /search ms: p50 {p(search, .5):.1f} "
          f"max {max(search) * 1000:.1f}; statuses {sorted(statuses)}")


if __name__ == "__main__":
    main()
