"""`loom serve` under load: the Starlette/uvicorn server against the old standard-library one.

    python tests/bench/bench_serve.py [--work /tmp/loom-bench] [--old REV] [--new-only]

Indexes the kernel docs once, then runs, for each server in the same run: 50 concurrent
clients x 40 requests (half `/search`, half `/grep`, realistic queries and selective
literals), once on keep-alive connections (one per client) and once with a fresh
connection per request. Reports failed requests, p50/p99 latency and requests/s, and the
ratios new/old. The old server is loom at --old (default e3b0f6b, the last commit with the
`http.server` implementation), checked out with `git worktree` into a temp folder and run
against the same index.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHES = ["interrupt handler threaded", "memory barrier ordering", "how to configure kprobes",
            "watchdog timeout", "page cache writeback", "device tree bindings gpio",
            "power management suspend resume", "rcu read lock"]
GREPS = ["IRQF_ONESHOT", "EXPORT_SYMBOL_GPL", "CONFIG_DEBUG_KERNEL", "kmalloc_array",
         "spin_lock_irqsave", "MODULE_LICENSE", "devm_request_irq", "wait_event_timeout"]
CLIENTS, PER_CLIENT = 50, 40
TIMEOUT_S = 15  # a request unanswered this long counts as failed


def start(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[str], int]:
    # `python -m loomcli` imports loom from its working folder first: cwd picks the version.
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, cwd=cwd)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r":(\d+)", line)
    if not m:
        proc.kill()
        sys.exit(f"server did not start: {line}{proc.stderr.read()}")
    return proc, int(m.group(1))


def load(port: int | list[int], keep_alive: bool) -> dict[str, float]:
    """CLIENTS x PER_CLIENT requests; with several ports the clients take them in turn."""
    ports = port if isinstance(port, list) else [port]
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    barrier = threading.Barrier(CLIENTS)

    def client(n: int) -> None:
        nonlocal failures
        conn = None
        barrier.wait()
        for i in range(PER_CLIENT):
            if i % 2:
                path, body = "/grep", {"pattern": GREPS[(n + i) % len(GREPS)], "limit": 20}
            else:
                path, body = "/search", {"query": SEARCHES[(n + i) % len(SEARCHES)],
                                         "limit": 5, "excerpt_chars": 1000}
            data = json.dumps(body).encode()
            started = time.perf_counter()
            ok = False
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", ports[n % len(ports)],
                                                      timeout=TIMEOUT_S)
                conn.request("POST", path, body=data, headers={
                    "Content-Type": "application/json",
                    "Connection": "keep-alive" if keep_alive else "close"})
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except OSError:
                ok = False
            if not ok or not keep_alive:
                if conn is not None:
                    conn.close()
                conn = None
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                failures += not ok
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    latencies.sort()
    return {"failed": failures, "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[int(len(latencies) * 0.99) - 1],
            "rps": len(latencies) / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--old", default="e3b0f6b")
    ap.add_argument("--new-only", action="store_true",
                    help="skip 0.1's server (it takes minutes to time out): quick runs")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scan import prepare_kernel  # the kernel docs, unpacked as bench_scan does

    docs = prepare_kernel(args.work)
    env = {**os.environ, "LOOM_HOME": str(args.work / "serve-home")}
    env.pop("LOOM_HTTP_TOKEN", None)
    if not (args.work / "serve-home" / "index.db").exists():
        subprocess.run([sys.executable, "-m", "loomcli", "scan", str(docs)], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    old_tree = Path(tempfile.mkdtemp(prefix="loom-old-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree),
                    args.old], check=True, capture_output=True)
    results: dict[str, dict[str, dict[str, float]]] = {}
    try:
        servers = [("old (http.server)", old_tree), ("new (uvicorn)", ROOT)]
        for name, tree in servers[1:] if args.new_only else servers:
            proc, port = start([sys.executable, "-m", "loomcli", "serve", "--port", "0"], env,
                               tree)
            try:
                results[name] = {mode: load(port, mode == "keep-alive")
                                 for mode in ("keep-alive", "fresh")}
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(old_tree)], capture_output=True)
        shutil.rmtree(old_tree, ignore_errors=True)
    print(f"{CLIENTS} clients x {PER_CLIENT} requests (/search and /grep), kernel docs")
    print(f"{'server':<20} {'mode':<11} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7}")
    for name, modes in results.items():
        for mode, r in modes.items():
            print(f"{name:<20} {mode:<11} {r['failed']:>6.0f} {r['p50_ms']:>8.1f} "
                  f"{r['p99_ms']:>8.1f} {r['rps']:>7.1f}")
    new = results["new (uvicorn)"]
    if not args.new_only:
        old = results["old (http.server)"]
        for mode in ("keep-alive", "fresh"):
            print(f"{mode}: req/s new/old = {new[mode]['rps'] / old[mode]['rps']:.2f}x, "
                  f"p99 new/old = {new[mode]['p99_ms'] / old[mode]['p99_ms']:.2f}x")
    print(f"new: keep-alive/fresh req/s = "
          f"{new['keep-alive']['rps'] / new['fresh']['rps']:.2f}x")


if __name__ == "__main__":
    main()
