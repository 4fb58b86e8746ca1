"""Hostile inputs: time and peak memory of every command, against loom before the fixes.

    python tests/bench/bench_hostile.py [--work /tmp/loom-hostile] [--old e3b0f6b] [--mb 200]

1. A note of --mb MB on one line, and the PDF bomb (fixtures/hostile/pdf-bomb.pdf, 4 MB
   that inflates to 1 GB): scan, search, grep and get, each timed, with the peak RSS of
   the whole process tree (PDF workers included).
2. Search time against query length (10 to 6,000 words) and against hits per note (100
   to 100,000 matching lines): each should be flat or linear.
3. What real folders and servers send (issue 23), `--only servers-documents` for just
   these: an embeddings server answering 300 MB on one line, one dripping a byte a
   second, a server answering NaN; legacy HTML nested 400 deep, a page with a 14 MB
   `<pre>`, 22 MB of table markup; a DOCX of text boxes 300 deep; an EPUB whose spine
   repeats a chapter 200 times; 40 MB of random bytes named `.txt`; a 150 MB one-line
   note beside the PDF bomb.

Each measure runs for this checkout and for loom at --old (a git worktree), in the same
run; a command still running after --timeout seconds is stopped and shown as `> T s`.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"]


def tree_rss_mb(root: int) -> int:
    children: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(pid))
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next((int(line.split()[1]) for line in fh
                               if line.startswith("VmRSS")), 0)
        except OSError:
            pass
        todo += children.get(pid, [])
    return total // 1024


def measure(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path
             ) -> tuple[str, int]:
    """(seconds or '> T', peak tree RSS in MB) of one command. `python -m loomcli` imports
    loom from its working folder first, so `cwd` picks the version."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=cwd)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss_mb(proc.pid))
        if time.monotonic() - started > timeout:
            os.killpg(proc.pid, 9)
            proc.wait()
            return f"> {timeout:.0f}", peak
        time.sleep(0.02)
    return f"{time.monotonic() - started:.2f}", peak


def one_line_note(folder: Path, mb: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    with open(folder / "huge.md", "w") as fh:
        fh.write("# huge\n")
        chunk = 1 << 20
        for _ in range(mb):
            fh.write(" ".join(rng.choice(WORDS) for _ in range(chunk // 7)))


def log_notes(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for lines in (100, 1_000, 10_000, 100_000):
        with open(folder / f"log-{lines}.md", "w") as fh:
            fh.write(f"# log of {lines} lines\n")
            fh.writelines(f"2026-03-01 ERROR quota{lines} exceeded on node {i}\n"
                          for i in range(lines))


def documents(folder: Path) -> dict[str, Path]:
    """The hostile documents of section 3, one folder each."""
    sys.path.insert(0, str(ROOT))
    from tests.test_documents import DOCS, MC, rewrite, text_box

    made = {}
    for name, write in [
            ("deep.html", lambda p: p.write_text("<html><body>" + "".join(
                f"<p><font>para {i} " for i in range(400)) + "</body>")),
            ("pre.html", lambda p: p.write_text("<html><body><pre>" + "disk quota exceeded\n"
                                                * 700_000 + "</pre></body></html>")),
            ("table.html", lambda p: p.write_text("<html><body><table>" + "<tr><td>cell</td>"
                                                  "<td>x</td></tr>" * 700_000 + "</table>")),
            ("noise.txt", lambda p: p.write_bytes(os.urandom(40 << 20).translate(None, b"\0")))]:
        made[name] = folder / name.replace(".", "-") / name
        made[name].parent.mkdir(parents=True, exist_ok=True)
        write(made[name])
    inner = "<w:p><w:r><w:t>deepest</w:t></w:r></w:p>"
    for i in range(300):
        inner = text_box(inner, fallback=False).replace("Outer words", f"level {i}")
    made["boxes.docx"] = folder / "boxes-docx" / "boxes.docx"
    made["boxes.docx"].parent.mkdir(parents=True, exist_ok=True)
    rewrite(DOCS / "handbook.docx", made["boxes.docx"], "word/document.xml", lambda x: x.replace(
        "<w:document ", "<w:document " + MC, 1).replace("<w:body>", "<w:body>" + inner, 1))
    made["spine.epub"] = folder / "spine-epub" / "spine.epub"
    made["spine.epub"].parent.mkdir(parents=True, exist_ok=True)
    rewrite(DOCS / "handbook.epub", made["spine.epub"], "EPUB/content.opf", lambda x: x.replace(
        '<itemref idref="ch003_xhtml" />', '<itemref idref="ch003_xhtml" />' * 200))
    return made


def servers_and_documents(work: Path, versions: dict[str, Path], timeout: float
                          ) -> list[tuple[str, str, int, str, int]]:
    sys.path.insert(0, str(ROOT))
    from tests.embed_server import FakeEmbeddings, drip, flood

    loom = [sys.executable, "-m", "loomcli"]
    notes = ROOT / "fixtures" / "notes"
    rows = []
    with FakeEmbeddings() as server:
        server.embed(["warm up"])
        for label, setup, cmd_args in [
                ("embed: 300 MB answer", lambda: setattr(server, "body", flood(300)), "scan"),
                ("embed: NaN values", lambda: setattr(server, "rows", lambda r: [
                    [float("nan")] * len(x) for x in r]), "scan"),
                ("embed: 1 byte/s, search", lambda: setattr(server, "body", drip()), "search")]:
            got = {}
            for version, tree in versions.items():
                home = work / f"{version}-embed-{label.split()[1]}"
                shutil.rmtree(home, ignore_errors=True)
                home.mkdir(parents=True)
                (home / "config.toml").write_text(
                    f'[embeddings]\nenabled = true\nprovider = "ollama"\nendpoint = '
                    f'"{server.url}"\ntimeout_s = 10\n')
                env = {**os.environ, "LOOM_HOME": str(home)}
                server.body = server.rows = None
                if cmd_args == "search":  # vectors first, from a healthy server
                    subprocess.run([*loom, "scan", str(notes)], env=env, cwd=tree,
                                   capture_output=True, timeout=timeout)
                setup()
                args = ["scan", str(notes)] if cmd_args == "scan" else ["search", "sourdough"]
                got[version] = measure([*loom, *args], env, timeout, tree)
            rows.append((label, *got["new"], *got["old"]))
            server.body = server.rows = None
    made = documents(work / "docs")
    big = work / "huge-bomb"
    if not (big / "huge.md").exists():
        one_line_note(big, 150)
    shutil.copy(ROOT / "fixtures" / "hostile" / "pdf-bomb.pdf", big / "bomb.pdf")
    for name, path in [*made.items(), ("150 MB note + PDF bomb", big / "huge.md")]:
        got = {}
        for version, tree in versions.items():
            home = work / f"{version}-doc-{name}"
            shutil.rmtree(home, ignore_errors=True)
            env = {**os.environ, "LOOM_HOME": str(home)}
            got[version] = measure([*loom, "scan", str(path.parent)], env, timeout, tree)
        rows.append((f"scan {name}", *got["new"], *got["old"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-hostile"))
    ap.add_argument("--old", default="e3b0f6b")
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--only", choices=["servers-documents"])
    args = ap.parse_args()
    work = args.work
    huge, bomb, logs = work / "huge", work / "bomb", work / "logs"
    if not (huge / "huge.md").exists() and not args.only:
        one_line_note(huge, args.mb)
    bomb.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "fixtures" / "hostile" / "pdf-bomb.pdf", bomb / "bomb.pdf")
    if not logs.exists() and not args.only:
        log_notes(logs)
    old_tree = Path(tempfile.mkdtemp(prefix="loom-old-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree),
                    args.old], check=True, capture_output=True)
    loom = [sys.executable, "-m", "loomcli"]
    rows: list[tuple[str, str, str, int, str, int]] = []
    try:
        versions = {"new": ROOT, "old": old_tree}
        rows += servers_and_documents(work, versions, args.timeout)
        for label, cmd_args, home in ([] if args.only else [
                ("scan 1-line note", ["scan", str(huge)], "huge"),
                ("search lorem", ["search", "lorem"], "huge"),
                ("grep (no match)", ["grep", "zzzz"], "huge"),
                ("get 20 bytes", ["get", "huge.md", "--offset", "1000000", "--length", "20"],
                 "huge"),
                ("scan PDF bomb", ["scan", str(bomb)], "bomb"),
                ("scan logs", ["scan", str(logs)], "logs")]):
            got = {}
            for version, tree in versions.items():
                env = {**os.environ, "LOOM_HOME": str(work / f"{version}-{home}")}
                got[version] = measure([*loom, *cmd_args], env, args.timeout, tree)
            rows.append((label, *got["new"], *got["old"]))
        for lines in () if args.only else (100, 1_000, 10_000, 100_000):
            got = {}
            for version, tree in versions.items():
                env = {**os.environ, "LOOM_HOME": str(work / f"{version}-logs")}
                got[version] = measure([*loom, "search", f"quota{lines}"], env, args.timeout,
                                       tree)
            rows.append((f"search, {lines:,} hit lines", *got["new"], *got["old"]))
        rng = random.Random(2)
        # Words the logs hold (node numbers, "error", "exceeded"), so every one is looked up.
        vocabulary = ["error", "exceeded", "node"] + [str(i) for i in range(100_000)]
        for n in () if args.only else (10, 100, 500, 1_000, 2_000, 6_000):
            query = " ".join(rng.choice(vocabulary) for _ in range(n))
            got = {}
            for version, tree in versions.items():
                env = {**os.environ, "LOOM_HOME": str(work / f"{version}-logs")}
                got[version] = measure([*loom, "search", query], env, args.timeout, tree)
            rows.append((f"search, {n:,}-word query", *got["new"], *got["old"]))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(old_tree)], capture_output=True)
        shutil.rmtree(old_tree, ignore_errors=True)
    print(f"{'measure':<28} {'new s':>8} {'new MB':>7}   {'old s':>8} {'old MB':>7}")
    for label, new_s, new_mb, old_s, old_mb in rows:
        print(f"{label:<28} {new_s:>8} {new_mb:>7}   {old_s:>8} {old_mb:>7}")


if __name__ == "__main__":
    main()
