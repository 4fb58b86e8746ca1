"""The Homebrew formula's resources: check them, or fill them where brew is not at hand.

    python packaging/formula.py check WHEEL
        Every resource the formula names is a package the wheel really needs (pip's own
        resolution of the wheel), none is one the formula excludes, and the expected
        output in its `test do` block is what the installed `loom` prints (check.sh runs
        that part). Ruby syntax is checked when ruby is installed.

    python packaging/formula.py update [--version X.Y.Z] [--tarball-sha256 HEX]
        The release step, once the tag is pushed: the url's version is the package's
        (loomcli/__init__.py) unless given; the sha256 is that of the tag's tarball,
        downloaded and hashed unless given; pip resolves the runtime dependencies, each
        sdist's URL and sha256 come from the index pip is configured with (PEP 691 JSON;
        no index host is written here), and the blocks between `# resources: begin` and
        `# resources: end` are replaced. (With Homebrew at hand, `brew
        update-python-resources` writes the same resources.)

    `check` also refuses a formula whose url is for another version than the package's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

FORMULA = Path(__file__).resolve().parent / "homebrew" / "loom-index.rb"
ROOT = FORMULA.parent.parent.parent


def index_url() -> str:
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        return env.rstrip("/")
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip().rstrip("/")
    from pip._internal.models.index import PyPI  # pip's own default index

    return PyPI.simple_url.rstrip("/")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def excluded(text: str) -> set[str]:
    """The packages `pypi_packages exclude_packages: %w[...]` keeps out of the formula."""
    m = re.search(r"exclude_packages:\s*%w\[([^\]]*)\]", text)
    return {norm(n) for n in m.group(1).split()} if m else set()


def resolve(target: str = str(ROOT)) -> list[tuple[str, str]]:
    """(name, version) of every runtime dependency pip installs for `target`."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                        "--ignore-installed", "--report", str(report), target], check=True)
        data = json.loads(report.read_text())
    pins = [(i["metadata"]["name"], i["metadata"]["version"]) for i in data["install"]]
    return sorted((n, v) for n, v in pins if norm(n) != "loom-index")


def package_version() -> str:
    """The version the package says it is (loomcli/__init__.py, as pyproject reads it)."""
    m = re.search(r'^__version__ = "([^"]+)"', (ROOT / "loomcli" / "__init__.py").read_text(),
                  re.M)
    if not m:
        raise SystemExit("loomcli/__init__.py has no __version__")
    return m.group(1)


def url_version(text: str) -> str | None:
    """The version of the tag tarball the formula's url names."""
    m = re.search(r'^  url ".*/v([0-9][^/"]*)\.tar\.gz"$', text, re.M)
    return m.group(1) if m else None


def tarball_sha256(url: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=120) as resp:
        for block in iter(lambda: resp.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(wheel: str, formula: Path = FORMULA) -> None:
    text = formula.read_text()
    problems: list[str] = []
    if url_version(text) != package_version():
        problems.append(f"the url is for v{url_version(text)}, the package is "
                        f"{package_version()}: python packaging/formula.py update")
    named = {norm(n) for n in re.findall(r'^  resource "([^"]+)" do$', text, re.M)}
    needed = {norm(n) for n, _ in resolve(wheel)}
    problems += [f"resource {n} is not a dependency of {Path(wheel).name}"
                 for n in sorted(named - needed)]
    problems += [f"resource {n} is excluded by pypi_packages" for n in sorted(
        named & excluded(text))]
    if not re.search(r"^  test do\n(.*\n)*?.*bin/\"loom\", \"scan\"", text, re.M):
        problems.append("the test block does not run loom scan")
    if shutil.which("ruby"):
        ruby = subprocess.run(["ruby", "-c", str(formula)], capture_output=True, text=True)
        if ruby.returncode != 0:
            problems.append(f"ruby -c: {ruby.stderr.strip()}")
    else:
        print("formula: ruby not installed, Ruby syntax not checked")
    if problems:
        raise SystemExit("formula check failed:\n  " + "\n  ".join(problems))
    print(f"formula: {len(named)} resources, all needed by the wheel "
          f"({len(needed)} dependencies; excluded: {', '.join(sorted(excluded(text)))})")


def expected_grep() -> str:
    """What the formula's test block expects `loom grep` to print."""
    m = re.search(r'assert_equal "(.*?)",\s*\n\s*shell_output\("#\{bin\}/loom grep',
                  FORMULA.read_text())
    if not m:
        raise SystemExit("the formula's test block has no assert_equal on loom grep")
    return m.group(1).encode().decode("unicode_escape")


def sdist(index: str, name: str, version: str) -> tuple[str, str]:
    project = norm(name)
    req = urllib.request.Request(f"{index}/{project}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.loads(resp.read())["files"]
    stem = re.compile(rf"^{re.escape(project).replace('-', '[-_.]')}-{re.escape(version)}"
                      r"\.(tar\.gz|zip)$", re.I)
    for f in files:
        if stem.match(f["filename"]) and "sha256" in f.get("hashes", {}):
            return f["url"], f["hashes"]["sha256"]
    raise SystemExit(f"no sdist for {name} {version} on the index")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    check_cmd = sub.add_parser("check")
    check_cmd.add_argument("wheel")
    check_cmd.add_argument("--formula", type=Path, default=FORMULA)
    sub.add_parser("expected-grep")
    update = sub.add_parser("update")
    update.add_argument("--version")
    update.add_argument("--tarball-sha256")
    args = ap.parse_args()
    if args.command == "check":
        check(args.wheel, args.formula)
        return
    if args.command == "expected-grep":
        sys.stdout.write(expected_grep())
        return
    index = index_url()
    skip = excluded(FORMULA.read_text())
    blocks = []
    for name, version in resolve():
        if norm(name) in skip:
            continue
        url, sha = sdist(index, name, version)
        blocks.append(f'  resource "{name}" do\n    url "{url}"\n    sha256 "{sha}"\n  end\n')
    text = FORMULA.read_text()
    text = re.sub(r"(  # resources: begin\n).*?(  # resources: end\n)",
                  lambda m: m.group(1) + "\n".join(blocks) + m.group(2), text, flags=re.S)
    version = args.version or package_version()
    text = re.sub(r"/v[0-9][^/]*\.tar\.gz", f"/v{version}.tar.gz", text)
    url = re.search(r'^  url "([^"]+)"$', text, re.M)
    assert url is not None
    sha = args.tarball_sha256 or tarball_sha256(url.group(1))
    text = re.sub(r'(\n  sha256 ")[0-9a-f]{64}(")', rf"\g<1>{sha}\2", text, count=1)
    FORMULA.write_text(text)
    print(f"{FORMULA}: {len(blocks)} resources")


if __name__ == "__main__":
    main()
