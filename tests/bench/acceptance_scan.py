"""Acceptance of `loom scan` on a real corpus, tried as a new user would.

    python tests/bench/acceptance_scan.py [--work /tmp/loom-bench]

Kernel docs + 20 LaTeX manuals + a corrupt PDF, with a realistic .loomignore (anchors,
`**`, folder-only patterns, negation, escapes). Checks the indexed set against git's own
verdict and the incremental semantics of SPEC. Prints one line per check; exits 1 if any
check fails. Run bench_scan.py first (it prepares the corpora).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

IGNORE = r"""# a realistic .loomignore
/output/
**/translations/
*.txt
!process/*.txt
admin-guide/**/index.rst
devicetree/bindings/
!devicetree/bindings/
filesystems/ext4/
networking/*
!networking/netdev-FAQ.rst
\#*
pdfs/*[0-9].pdf
sp[a-c]rc/
"""
EXTS = {"md", "markdown", "txt", "text", "rst", "org", "adoc", "pdf"}
failures = 0


def check(name: str, ok: bool, detail: str = "") -> None:
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + detail}")


def loom(*args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["loom", *args], capture_output=True, text=True)
    if code is not None and proc.returncode != code:
        print(proc.stdout, proc.stderr)
    return proc


def report(*args: str) -> tuple[dict, int]:
    proc = loom("scan", *args, "--json", code=None)
    return json.loads(proc.stdout), proc.returncode


def counts(r: dict) -> tuple[int, ...]:
    return tuple(r[k] for k in ("added", "updated", "moved", "removed", "failed"))


def git_view(root: Path) -> set[str]:
    env = {**os.environ, "GIT_DIR": str(root.parent / "git"), "GIT_WORK_TREE": str(root)}
    subprocess.run(["git", "init", "-q"], env=env, check=True)
    out = subprocess.run(["git", "ls-files", "-z", "-o", "--exclude-standard",
                          "--exclude-per-directory=.loomignore"], env=env, cwd=root,
                         capture_output=True, check=True).stdout
    keep = set()
    for p in out.decode().split("\0"):
        if not p or any(part.startswith(".") for part in p.split("/")):
            continue
        if p.rpartition(".")[2].lower() in EXTS and not (root / p).is_symlink():
            keep.add(p)
    return keep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    args = ap.parse_args()
    base = args.work / "acceptance"
    shutil.rmtree(base, ignore_errors=True)
    notes = base / "notes"
    shutil.copytree(args.work / "kernel", notes)
    shutil.copytree(args.work / "pdfs", notes / "pdfs")
    whole = (notes / "pdfs" / sorted(os.listdir(notes / "pdfs"))[0]).read_bytes()
    (notes / "pdfs" / "corrupt-manual.pdf").write_bytes(whole[: len(whole) // 2][:4000])
    (notes / "#draft.rst").write_text("Draft\n=====\nhidden by an escaped #\n")
    (notes / ".loomignore").write_text(IGNORE)
    os.environ["LOOM_HOME"] = str(base / "home")

    first, code = report(str(notes))
    files = {f["path"] for f in json.loads(loom("files", "--json").stdout)["files"]}
    failed = {e["path"] for e in first["errors"]}
    expected = git_view(notes)
    check("indexed set == git's verdict (less hidden, symlinks, other types)",
          files | failed == expected,
          f"only loom: {sorted((files | failed) - expected)[:5]}, "
          f"only git: {sorted(expected - files - failed)[:5]}")
    check(f"first scan: {len(files)} files indexed, corrupt PDF failed with a reason, exit 1",
          code == 1 and failed == {"pdfs/corrupt-manual.pdf"}
          and "damaged" in first["errors"][0]["error"], json.dumps(first["errors"])[:300])

    target = notes / "process" / "howto.rst"
    os.utime(target)
    r, code = report()
    check("touch -> nothing changes", counts(r)[:4] == (0, 0, 0, 0) and r["failed"] == 1,
          str(r))
    with open(target, "a") as fh:
        fh.write("\nzyxwvut appended\n")
    r, _ = report()
    check("edit -> updated 1", counts(r)[:4] == (0, 1, 0, 0), str(counts(r)))
    target.rename(notes / "process" / "howto-renamed.rst")
    r, _ = report()
    check("rename -> moved 1 (added 0, removed 0)", counts(r)[:4] == (0, 0, 1, 0),
          str(counts(r)))
    (notes / "process" / "howto-renamed.rst").unlink()
    r, _ = report()
    check("delete -> removed 1", counts(r)[:4] == (0, 0, 0, 1), str(counts(r)))

    before = {f["path"] for f in json.loads(loom("files", "--json").stdout)["files"]}
    rule = "scheduler/\n"
    (notes / ".loomignore").write_text(IGNORE + rule)
    r, _ = report()
    sched = {p for p in before if p.startswith("scheduler/")}
    after = {f["path"] for f in json.loads(loom("files", "--json").stdout)["files"]}
    check(f"new rule removes exactly those ({len(sched)})",
          r["removed"] == len(sched) and before - after == sched, str(counts(r)))
    (notes / ".loomignore").write_text(IGNORE)
    r, _ = report()
    back = {f["path"] for f in json.loads(loom("files", "--json").stdout)["files"]}
    check("dropping it brings them back", r["added"] == len(sched) and back == before,
          str(counts(r)))

    db = base / "home" / "index.db"
    snapshot = db.read_bytes()
    (notes / ".loomignore").write_text(IGNORE + "ok/\n[ab\n")
    proc = loom("scan", code=2)
    line = len(IGNORE.splitlines()) + 2
    check("malformed pattern -> exit 2 naming file and line, index unchanged",
          proc.returncode == 2
          and proc.stderr.startswith(f"loom: .loomignore:{line}: invalid pattern '[ab'")
          and db.read_bytes() == snapshot, proc.stderr)
    (notes / ".loomignore").write_text(IGNORE)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
