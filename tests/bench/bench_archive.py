"""An archive, not a folder: how loom's costs grow from the kernel docs to ≈ 50,000 files.

    python tests/bench/bench_archive.py [--work /tmp/loom-bench] [--runs 5] [--qmd-dir /opt/qmd]

The archive corpus, built once under WORK/archive from Debian packages:
  kernel/   the kernel docs (linux-doc-6.1, as bench_scan.py unpacks them)
  notes/    40,000 small notes, one kernel-docs paragraph a file, 1,000 to a folder
  texlive/  every PDF of texlive-latex-base-doc, -latex-extra-doc and -pictures-doc
  python/   the HTML of python3.11-doc
and WORK/archive-text: pdftotext's output of every PDF there, what ripgrep reads in
their place. Measured in one run, for the kernel docs alone, the archive's text part
(kernel + notes: what qmd indexes) and the whole archive: full scan, no-change rescan
(time and peak RSS of the process and its workers), index size, cold `loom search`
(median of --runs per query); for the kernel docs and the archive also status, files,
`get` of a range of the largest text, and cold `loom grep` (ignoring case, loom's
default) for selective literals and literal-free patterns against `rg -i` over the plain
text (and pdftotext's output), and `pdfgrep -r -i` over the PDFs. Results are checked:
loom's hits in the plain-text files equal rg's, its PDFs with a match equal pdfgrep's.
qmd (BM25) indexes the kernel docs and the text part for scan, rescan and search.
`tests/bench/setup.sh` installs the packages and qmd.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_hostile import tree_rss_mb  # noqa: E402  (summed RSS of a process tree)
from bench_scan import prepare_kernel  # noqa: E402  (the kernel docs, unpacked once)

KERNEL_SRC = Path("/usr/share/doc/linux-doc-6.1/Documentation")
TEXLIVE_SRC = Path("/usr/share/doc/texlive-doc")
PYTHON_SRC = Path("/usr/share/doc/python3.11/html")
NOTES = 40_000
QUERIES = ["watchdog timer", "memory barrier", "device tree binding", "page cache writeback",
           "tikz arrow styles", "hyperref link colours", "asyncio event loop"]
PATTERNS = {"selective": "IRQF_ONESHOT", "selective PDF": "pdfTeX warning",
            "literal-free": r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
            "literal-free rare": r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}"}
RG_GLOBS = ["-g", "*.rst", "-g", "*.txt", "-g", "*.md"]


# -- the corpus ------------------------------------------------------------------------

def write_notes(kernel: Path, dest: Path) -> None:
    """Paragraphs of the kernel docs, one a note, in a stable order (as a Zettelkasten
    holds them: a short title line, then the paragraph)."""
    seen: set[bytes] = set()
    count = 0
    for src in sorted(p for p in kernel.rglob("*") if p.suffix in (".rst", ".txt")):
        for para in re.split(r"\n\s*\n", src.read_text(errors="replace")):
            para = para.strip()
            key = hashlib.blake2b(para.encode(), digest_size=8).digest()
            if len(para) < 120 or key in seen:
                continue
            seen.add(key)
            folder = dest / f"{count // 1000:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            title = re.sub(r"\s+", " ", para[:60]).strip()
            (folder / f"{count:05d}.md").write_text(f"# {title}\n\n{para}\n\n"
                                                     f"source: {src.relative_to(kernel)}\n")
            count += 1
            if count == NOTES:
                return
    sys.exit(f"only {count} paragraphs of 120+ chars in the kernel docs")


def prepare(work: Path) -> tuple[Path, Path]:
    archive, text = work / "archive", work / "archive-text"
    marker = work / "archive.done"
    if marker.exists():
        return archive, text
    for src, pkg in ((KERNEL_SRC, "linux-doc-6.1"), (TEXLIVE_SRC, "texlive-latex-base-doc"),
                     (PYTHON_SRC, "python3.11-doc")):
        if not src.exists():
            sys.exit(f"{src} missing: run tests/bench/setup.sh (needs {pkg})")
    shutil.rmtree(archive, ignore_errors=True)
    shutil.rmtree(text, ignore_errors=True)
    shutil.copytree(prepare_kernel(work), archive / "kernel")  # unpacked as bench_scan does
    write_notes(archive / "kernel", archive / "notes")
    pdfs = sorted(TEXLIVE_SRC.rglob("*.pdf"))
    for pdf in pdfs:
        out = archive / "texlive" / pdf.relative_to(TEXLIVE_SRC)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pdf, out)
    for html in PYTHON_SRC.rglob("*.html"):
        out = archive / "python" / html.relative_to(PYTHON_SRC)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html, out)
    # What ripgrep reads in place of the PDFs: pdftotext's output, made once, on all cores.
    (text / "texlive").mkdir(parents=True)
    jobs = "\n".join(str(p.relative_to(archive / "texlive"))
                     for p in (archive / "texlive").rglob("*.pdf"))
    script = 'mkdir -p "$2/$(dirname "$1")" && pdftotext -q "$1" "$2/$1.txt" || true'
    subprocess.run(["xargs", "-P", str(os.cpu_count() or 2), "-I{}", "sh", "-c", script,
                    "sh", "{}", str(text / "texlive")], input=jobs, text=True,
                   cwd=archive / "texlive", check=True)
    marker.write_text("ok")
    return archive, text


# -- measuring -------------------------------------------------------------------------

# Runs a command and prints the largest peak RSS among its processes (RUSAGE_CHILDREN):
# from this small wrapper, not from the benchmark (a child forked from a large process
# starts its count at the parent's size).
WRAPPER = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code, "
           "file=sys.stderr)")


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path | None = None,
                 ok: tuple[int, ...] = (0, 1)) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB of the command's whole process tree — its workers too,
    summed, sampled every 50 ms; at least its largest process's own peak —, stdout)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *cmd], env=env, cwd=cwd,
                                stdout=out, stderr=err, text=True, start_new_session=True)
        own = tree_rss_mb(proc.pid)  # the wrapper alone, before it starts the command
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, tree_rss_mb(proc.pid) - own)
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        *messages, last = err.read().rstrip("\n").split("\n")
        rss_kb, code = map(int, last.split())
        if code not in ok:
            sys.exit(f"{' '.join(cmd)} failed ({code}): {chr(10).join(messages)[-2000:]}")
        return seconds, max(peak, rss_kb / 1024), out.read()


def timed(cmd: list[str], env: dict[str, str], runs: int, cwd: Path | None = None) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def index_mb(home: Path) -> float:
    db = home / "index.db"
    subprocess.run([sys.executable, "-c", "import sqlite3, sys; sqlite3.connect(sys.argv[1])"
                    ".execute('PRAGMA wal_checkpoint(TRUNCATE)')", str(db)], check=True)
    return sum(f.stat().st_size for f in home.glob("index.db*")) / 1e6


def rg_hits(pattern: str, folders: list[Path]) -> set[tuple[str, int]]:
    out = subprocess.run(["rg", "-i", "-n", "--no-heading", "--no-ignore", "--hidden",
                          *RG_GLOBS, "--", pattern, *map(str, folders)],
                         capture_output=True, text=True).stdout
    hits = set()
    for line in out.splitlines():
        path, num, _ = line.split(":", 2)
        hits.add((path, int(num)))
    return hits


def loom_matches(loom: str, env: dict[str, str], pattern: str) -> list[dict[str, object]]:
    out = subprocess.run([loom, "grep", "--limit", "500", "--json", "--", pattern], env=env,
                         capture_output=True, text=True).stdout
    return list(json.loads(out)["matches"])


def plain_hits(matches: list[dict[str, object]], roots: dict[str, Path]
               ) -> set[tuple[str, int]]:
    """loom's hits in the plain-text files, as rg names them."""
    hits = set()
    for m in matches:
        shown = str(m["path"])
        if len(roots) == 1:  # one indexed folder: paths are relative to it
            root, rel = next(iter(roots)), shown
        else:
            root, _, rel = shown.partition("/")
        if root in roots and not shown.endswith((".pdf", ".html")):
            hits.add((str(roots[root] / rel), int(str(m["line"]))))
    return hits


def pdfgrep_files(pattern: str, folder: Path) -> tuple[float, set[str]]:
    """(seconds, PDFs with a match) of `pdfgrep -r -i -c`."""
    start = time.perf_counter()
    out = subprocess.run(["pdfgrep", "-r", "-i", "-c", pattern, str(folder)],
                         capture_output=True, text=True).stdout
    seconds = time.perf_counter() - start
    return seconds, {str(Path(line.rsplit(":", 1)[0]).relative_to(folder.parent))
                     for line in out.splitlines() if not line.endswith(":0")}


def measure(name: str, roots: list[Path], plain: list[Path], args: argparse.Namespace,
            full: bool) -> dict[str, float]:
    """loom's costs on one corpus; with `full`, also status, files, get and grep."""
    work = args.work
    home = work / f"archive-home-{name.replace(' ', '-')}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    env = {**os.environ, "LOOM_HOME": str(home)}
    r: dict[str, float] = {}
    r["scan_s"], r["scan_rss_mb"], _ = run_measured([args.loom, "scan", *map(str, roots)], env)
    print(f"{name}: full scan {r['scan_s']:.1f} s", flush=True)
    rescans = [run_measured([args.loom, "scan"], env) for _ in range(args.runs)]
    r["rescan_s"] = statistics.median(s for s, _, _ in rescans)
    r["rescan_rss_mb"] = max(m for _, m, _ in rescans)
    r["index_mb"] = index_mb(home)
    r["search_s"] = statistics.median(timed([args.loom, "search", q], env, args.runs)
                                      for q in QUERIES)
    r["search_rss_mb"] = max(run_measured([args.loom, "search", q], env)[1] for q in QUERIES)
    if not full:
        return r
    r["status_s"], r["status_rss_mb"], _ = run_measured([args.loom, "status"], env)
    r["files_s"], r["files_rss_mb"], _ = run_measured([args.loom, "files"], env)
    listing = subprocess.run([args.loom, "files", "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
    big = max(json.loads(listing)["files"], key=lambda f: f.get("content_len", 0))
    r["get_s"] = timed([args.loom, "get", big["path"], "--offset",
                        str(big["content_len"] // 2), "--length", "200"], env, args.runs)
    names = {p.name: p for p in roots}
    for key, pat in PATTERNS.items():
        # Both ignore case (loom's default); loom stops at its default 50 matches, rg
        # prints them all (the rare literal-free pattern makes both read everything).
        r[f"grep {key}"] = timed([args.loom, "grep", "--", pat], env, args.runs)
        r[f"grep_rss {key}"] = run_measured([args.loom, "grep", "--", pat], env)[1]
        r[f"rg {key}"] = timed(["rg", "-i", "-n", "--no-ignore", *RG_GLOBS, "--", pat,
                                *map(str, plain)], env, args.runs)
        matches = loom_matches(args.loom, env, pat)
        theirs = rg_hits(pat, [p for p in plain if p.is_relative_to(roots[0].parent)])
        ours = plain_hits(matches, names)
        same = ours == theirs or (len(matches) == 500 and ours <= theirs)
        print(f"{name}: grep {pat!r}: loom {len(ours)} plain-text lines, rg {len(theirs)}"
              f" — {'same' if same else 'DIFFERENT'}", flush=True)
        r[f"same {key}"] = float(same)
        pdf_dir = roots[0].parent / "texlive"
        if key == "selective PDF" and pdf_dir in roots and not args.skip_pdfgrep:
            r["pdfgrep selective PDF"], files = pdfgrep_files(pat, pdf_dir)
            loom_files = {str(m["path"]) for m in matches if str(m["path"]).endswith(".pdf")}
            r["same pdfgrep files"] = float(loom_files == files)
            print(f"{name}: PDFs holding {pat!r}: loom {len(loom_files)}, pdfgrep "
                  f"{len(files)} — {'same' if loom_files == files else 'DIFFERENT'}",
                  flush=True)
    return r


def measure_qmd(name: str, roots: list[Path], args: argparse.Namespace) -> dict[str, float]:
    qh = args.work / f"archive-qmd-{name.replace(' ', '-')}"
    shutil.rmtree(qh, ignore_errors=True)
    qh.mkdir()
    qenv = {**os.environ, "HOME": str(qh), "XDG_CACHE_HOME": str(qh / "cache"),
            "XDG_CONFIG_HOME": str(qh / "config"),
            "PATH": f"{args.qmd_dir / 'node_modules' / '.bin'}:{os.environ['PATH']}"}
    r: dict[str, float] = {"scan_s": 0.0, "scan_rss_mb": 0.0}
    for i, root in enumerate(roots):
        s, m, _ = run_measured(["qmd", "collection", "add", str(root), "--name", f"c{i}",
                                "--mask", "**/*.{rst,txt,md}"], qenv, cwd=qh)
        r["scan_s"], r["scan_rss_mb"] = r["scan_s"] + s, max(r["scan_rss_mb"], m)
    r["rescan_s"] = statistics.median(run_measured(["qmd", "update"], qenv, cwd=qh)[0]
                                      for _ in range(args.runs))
    r["search_s"] = statistics.median(timed(["qmd", "search", q], qenv, args.runs, cwd=qh)
                                      for q in QUERIES)
    r["index_mb"] = sum(f.stat().st_size
                        for f in (qh / "cache" / "qmd").glob("index.sqlite*")) / 1e6
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loom", default=shutil.which("loom") or "loom")
    ap.add_argument("--qmd-dir", type=Path, default=Path("/opt/qmd"))
    ap.add_argument("--skip-qmd", action="store_true")
    ap.add_argument("--skip-pdfgrep", action="store_true", help="pdfgrep takes ~5 minutes")
    args = ap.parse_args()
    work: Path = args.work
    # As an installed loom runs: its bytecode compiled (pip and pipx do that at install).
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    str(Path(__file__).resolve().parents[2] / "loomcli")], check=True)
    archive, text = prepare(work)
    kernel, notes = archive / "kernel", archive / "notes"
    n_files = sum(1 for p in archive.rglob("*") if p.is_file())
    print(f"archive: {n_files} files under {archive}", flush=True)
    everything = [kernel, notes, archive / "texlive", archive / "python"]
    results = {
        "kernel": measure("kernel", [kernel], [kernel], args, full=True),
        "text part": measure("text part", [kernel, notes], [kernel, notes], args, full=False),
        "archive": measure("archive", everything, [kernel, notes, text], args, full=True),
    }
    if not args.skip_qmd:
        results["qmd kernel"] = measure_qmd("kernel", [kernel], args)
        results["qmd text part"] = measure_qmd("text part", [kernel, notes], args)
    (work / "archive-results.json").write_text(json.dumps(results, indent=2))

    k, a = results["kernel"], results["archive"]
    print(f"\n{'measure':<34} {'kernel docs':>12} {'archive':>12} {'growth':>7}")
    for key in k:
        if not key.startswith("same"):
            print(f"{key:<34} {k[key]:>12.3f} {a[key]:>12.3f} {a[key] / k[key]:>6.1f}x")
    print("\nratios (loom / peer, lower is better):")
    for name in ("kernel", "archive"):
        r = results[name]
        for key in PATTERNS:
            print(f"  {name}: grep {key} vs rg -i: {r[f'grep {key}'] / r[f'rg {key}']:.2f}x")
    if "pdfgrep selective PDF" in a:
        print(f"  archive: grep selective PDF vs pdfgrep -r -i: "
              f"1/{a['pdfgrep selective PDF'] / a['grep selective PDF']:.0f}")
    for name in ("kernel", "text part"):
        if f"qmd {name}" in results:
            ours, theirs = results[name], results[f"qmd {name}"]
            for m in ("scan_s", "rescan_s", "search_s", "index_mb", "scan_rss_mb"):
                print(f"  {name}: {m} vs qmd: {ours[m] / theirs[m]:.2f}x "
                      f"({ours[m]:.3f} / {theirs[m]:.3f})")
    peak = max(v for key, v in a.items() if "rss" in key)
    worst = max(a[f"grep {key}"] / a[f"rg {key}"] for key in PATTERNS if "selective" in key)
    print(f"\ngoals on the archive: peak RSS <= 500 MB ({peak:.0f} MB), rescan < 3 s "
          f"({a['rescan_s']:.2f} s), cold search < 0.15 s ({a['search_s']:.3f} s), "
          f"selective grep <= 0.5x rg ({worst:.2f}x)")


if __name__ == "__main__":
    main()
