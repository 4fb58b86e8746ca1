"""PDF scan with a plain install against pdftotext on the same 20 real manuals.

    python tests/bench/bench_pdf_plain.py [--work /tmp/loom-bench] [--runs 5]
        [--loom NAME=PYTHON ...] [--check-text]

Needs Debian's texlive-latex-base-doc and poppler-utils. The 20 largest manuals of that
package are those bench_scan.py uses. Each `--loom NAME=PYTHON` is an install to time (the
Python of its virtualenv; default: this one, as "loom"): give a plain install (no extras)
of the old and of the new code to compare them in one run. loom runs as a user would (OCR
on when Tesseract is installed), each run into an empty index.

The peers: `pdftotext FILE /dev/null` over each file in turn, and the same through
`xargs -P2`. Every run times each contender once, in an order rotated from run to run, so
a change of load on a shared machine falls on all of them. Reported per contender: the
wall time and the CPU seconds (user + system of the whole process tree: this script
makes itself a child subreaper, so the scan's forkserver and workers are counted too),
and the ratio of each to pdftotext's in the same run (median, and the range over runs).

`--skip-pdftotext` times the installs alone, against each other.
`--check-text` scans the manuals and the PDFs of fixtures/pdf-samples with every install
first and compares what each stored (text, page offsets, title, failure or skip reason)
byte for byte with the first install's.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

SAMPLES = Path(__file__).parents[2] / "fixtures" / "pdf-samples"
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of our children (the forkserver outlives the scan by a moment) are
    re-parented to this process, so their CPU time reaches RUSAGE_CHILDREN."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed: CPU times would miss the workers")


def cpu_of_children() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def reap_orphans(timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)
    sys.exit("a child process outlived its command by 30 s")


# Every command runs from here: `python -m` and multiprocessing's forkserver put the working
# directory first on sys.path, so started in a checkout they would run its `loomcli`, not
# the install being timed.
NEUTRAL_DIR = Path("/")


def run_tree(cmd: list[str], env: dict[str, str] | None = None,
             ok: tuple[int, ...] = (0,)) -> tuple[float, float, str]:
    """Wall and CPU seconds of a command and every process it started; its stdout."""
    cpu = cpu_of_children()
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=NEUTRAL_DIR)
    wall = time.perf_counter() - started
    reap_orphans()
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(cmd[:3])} … failed ({proc.returncode}): {proc.stderr[-500:]}")
    return wall, cpu_of_children() - cpu, proc.stdout


def loom_scan(python: str, folder: Path, home: Path) -> tuple[float, float]:
    shutil.rmtree(home, ignore_errors=True)
    wall, cpu, out = run_tree([python, "-m", "loomcli", "scan", str(folder), "--json"],
                              env={**os.environ, "LOOM_HOME": str(home)}, ok=(0, 1))
    report = json.loads(out)
    for error in report["errors"]:  # a time limit may be reached on a busy machine
        print(f"  {python}: {error['path']}: {error['error']}", flush=True)
    return wall, cpu


def stored(python: str, folder: Path, home: Path) -> dict[str, tuple[str, ...]]:
    """What one install keeps for each file of a folder: digests of text and pages,
    the title, the error or skip reason."""
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([python, "-m", "loomcli", "scan", str(folder)], check=False,
                   env={**os.environ, "LOOM_HOME": str(home)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, cwd=NEUTRAL_DIR)
    with sqlite3.connect(home / "index.db") as db:
        rows = db.execute("SELECT relpath, title, error, skip, body, pages FROM files "
                          "LEFT JOIN docs ON docs.id = files.id ORDER BY relpath").fetchall()
    return {rel: (title, str(error), str(skip),
                  hashlib.sha256((body or "").encode("utf-8", "surrogatepass")).hexdigest(),
                  str(pages))
            for rel, title, error, skip, body, pages in rows}


def check_text(installs: dict[str, str], work: Path, manuals: Path) -> None:
    folder = work / "text-check"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(manuals, folder / "manuals")
    for pdf in SAMPLES.rglob("*.pdf"):
        out = folder / "samples" / pdf.relative_to(SAMPLES)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pdf, out)
    results = {name: stored(python, folder, work / f"text-{name}")
               for name, python in installs.items()}
    (first, ref), *others = results.items()
    fields = ("title", "error", "skip", "text", "pages")
    for name, got in others:
        diffs = [(rel, field) for rel in sorted(ref.keys() | got.keys())
                 for i, field in enumerate(fields)
                 if (ref.get(rel) or ("?",) * 5)[i] != (got.get(rel) or ("?",) * 5)[i]]
        print(f"text check, {name} against {first}: {len(ref)} files, "
              + ("identical" if not diffs else f"{len(diffs)} differences:"))
        for rel, field in diffs:
            print(f"  {rel}: {field}")


def main() -> None:
    from bench_scan import prepare_pdfs

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loom", action="append", default=[], metavar="NAME=PYTHON",
                    help="an install to time, by its Python (repeatable)")
    ap.add_argument("--check-text", action="store_true")
    ap.add_argument("--skip-pdftotext", action="store_true",
                    help="time the installs only (more runs of old against new in the time)")
    args = ap.parse_args()
    installs = dict(spec.split("=", 1) for spec in args.loom) or {"loom": sys.executable}
    for name, python in installs.items():  # which code each install runs
        where = run_tree([python, "-c", "import loomcli; print(loomcli.__file__)"])[2]
        print(f"{name}: {where.strip()}")
    if not shutil.which("pdftotext"):
        sys.exit("pdftotext missing: apt-get install poppler-utils")
    become_subreaper()
    pdfs = prepare_pdfs(args.work)
    files = [str(f) for f in sorted(pdfs.glob("*.pdf"))]
    if args.check_text:
        check_text(installs, args.work, pdfs)

    peers: dict[str, list[str] | str] = {
        "pdftotext": ["sh", "-c", 'for f; do pdftotext "$f" /dev/null; done', "sh", *files],
        "pdftotext -P2": ["sh", "-c", 'printf "%s\\0" "$@" | xargs -0 -P2 -I{} '
                          "pdftotext {} /dev/null", "sh", *files],
    }
    contenders = {**({} if args.skip_pdftotext else peers), **installs}
    names = list(contenders)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    print(f"{len(files)} manuals, {sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB; "
          f"load at start {os.getloadavg()[0]:.2f}; {args.runs} runs, interleaved")
    for run in range(args.runs):
        order = names[run % len(names):] + names[:run % len(names)]
        for name in order:
            what = contenders[name]
            if isinstance(what, str):
                took = loom_scan(what, pdfs, args.work / f"plain-{name}")
            else:
                took = run_tree(what)[:2]
            times[name].append(took)
        print(f"run {run + 1}: " + ", ".join(f"{n} {times[n][-1][0]:.2f} s / "
                                             f"{times[n][-1][1]:.2f} cpu" for n in names)
              + f"; load {os.getloadavg()[0]:.2f}", flush=True)

    def ratios(name: str, peer: str, k: int) -> str:
        if peer not in times:
            return "-"
        r = [a[k] / b[k] for a, b in zip(times[name], times[peer], strict=True)]
        return f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})"

    print(f"\nload at end {os.getloadavg()[0]:.2f}; medians over {args.runs} runs "
          "(ratio: median of the runs' ratios, with their range)")
    print("| contender | wall s | CPU s | wall / pdftotext | wall / pdftotext -P2 "
          "| CPU / pdftotext |")
    print("|---|---|---|---|---|---|")
    for name in names:
        wall = statistics.median(t[0] for t in times[name])
        cpu = statistics.median(t[1] for t in times[name])
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {ratios(name, 'pdftotext', 0)} | "
              f"{ratios(name, 'pdftotext -P2', 0)} | {ratios(name, 'pdftotext', 1)} |")


if __name__ == "__main__":
    main()
