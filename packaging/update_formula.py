"""Fill the Homebrew formula's resource blocks for a release.

    python packaging/update_formula.py [--version 0.1.0] [--tarball-sha256 HEX]

1. pip resolves loomcli's runtime dependencies (no extras: see the formula) and reports
   the exact versions (`pip install --dry-run --report`).
2. For each, the sdist's URL and sha256 come from the package index pip is configured
   with (PIP_INDEX_URL, pip's config, else pip's default), through the JSON form of the
   simple API (PEP 691) — so no index host is written here.
3. The blocks between `# resources: begin` and `# resources: end` are replaced, and the
   formula's version and tarball sha256 are updated when given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

FORMULA = Path(__file__).resolve().parent / "homebrew" / "loomcli.rb"
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


def resolve() -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                        "--ignore-installed", "--report", str(report), str(ROOT)], check=True)
        data = json.loads(report.read_text())
    pins = [(i["metadata"]["name"], i["metadata"]["version"]) for i in data["install"]]
    return sorted((n, v) for n, v in pins if n.lower() != "loomcli")


def sdist(index: str, name: str, version: str) -> tuple[str, str]:
    norm = re.sub(r"[-_.]+", "-", name).lower()
    req = urllib.request.Request(f"{index}/{norm}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.loads(resp.read())["files"]
    stem = re.compile(rf"^{re.escape(norm).replace('-', '[-_.]')}-{re.escape(version)}"
                      r"\.(tar\.gz|zip)$", re.I)
    for f in files:
        if stem.match(f["filename"]) and "sha256" in f.get("hashes", {}):
            return f["url"], f["hashes"]["sha256"]
    raise SystemExit(f"no sdist for {name} {version} on the index")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version")
    ap.add_argument("--tarball-sha256")
    args = ap.parse_args()
    index = index_url()
    blocks = []
    for name, version in resolve():
        url, sha = sdist(index, name, version)
        blocks.append(f'  resource "{name}" do\n    url "{url}"\n    sha256 "{sha}"\n  end\n')
    text = FORMULA.read_text()
    text = re.sub(r"(  # resources: begin\n).*?(  # resources: end\n)",
                  lambda m: m.group(1) + "\n".join(blocks) + m.group(2), text, flags=re.S)
    if args.version:
        text = re.sub(r"/v[0-9][^/]*\.tar\.gz", f"/v{args.version}.tar.gz", text)
    if args.tarball_sha256:
        text = re.sub(r'(\n  sha256 ")[0-9a-f]{64}(")', rf"\g<1>{args.tarball_sha256}\2",
                      text, count=1)
    FORMULA.write_text(text)
    print(f"{FORMULA}: {len(blocks)} resources")


if __name__ == "__main__":
    main()
