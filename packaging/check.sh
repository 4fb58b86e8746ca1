#!/usr/bin/env bash
# Build the sdist and wheel, install the wheel with pipx into an empty PIPX_HOME, and
# try it as a new user would: --version, --help listing every command, scan + grep with
# the Homebrew formula's own test expectation; then check the formula's resources.
# Usage: bash packaging/check.sh [python]   (needs the build and pipx modules)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
ls "$work"/dist/loom_index-*.tar.gz "$work"/dist/loom_index-*.whl >/dev/null
wheel=$(ls "$work"/dist/loom_index-*.whl)
export PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/bin" PIPX_MAN_DIR="$work/man"
"$PY" -m pipx install --quiet "$wheel" >"$work/pipx.log" 2>&1 || { cat "$work/pipx.log"; exit 1; }
loom="$work/bin/loom"
"$loom" --version
help=$("$loom" --help)
for cmd in init scan search files status get grep ask mcp serve watch forget config; do
  grep -qE "^  $cmd " <<<"$help" || { echo "loom --help does not list $cmd"; exit 1; }
done
"$PY" - "$loom" <<'PYEOF'
import sys, pathlib
venv = pathlib.Path(sys.argv[1]).resolve().parent.parent
for name in ("loomcli", "pypdfium2", "tomlkit"):  # the package and its fast/writing parts
    if not list(venv.glob(f"lib/python*/site-packages/{name}")):
        sys.exit(f"{name} is not installed by a plain pipx install")
web = next(venv.glob("lib/python*/site-packages/loomcli/web"), None)
missing = [n for n in ("index.html", "app.js", "app.css", "icon.svg")
           if web is None or not (web / n).is_file()]
if missing:
    sys.exit(f"the wheel lacks the web page's files: {', '.join(missing)}")
# A cold `loom grep` imports these: without their bytecode each start compiles them again
# (pipx's pip compiles at install, even with PYTHONDONTWRITEBYTECODE set).
package = next(venv.glob("lib/python*/site-packages/loomcli"))
for name in ("fastpath", "reading", "console", "operations", "store/sqlite", "search/text",
             "search/grep"):
    folder, _, stem = f"/{name}".rpartition("/")
    if not list((package / folder.lstrip("/") / "__pycache__").glob(f"{stem}.*.pyc")):
        sys.exit(f"pipx installed loomcli/{name}.py without its bytecode")
PYEOF
export LOOM_HOME="$work/home"
mkdir -p "$work/notes"
printf '# Invoices\nFT-2026-0042 paid\n' >"$work/notes/invoices.md"
"$loom" scan "$work/notes" >/dev/null
out=$("$loom" grep 'FT-2026-[0-9]{4}')
want=$("$PY" packaging/formula.py expected-grep)
[ "$out" = "$want" ] || { echo "loom grep printed '$out', the formula's test expects '$want'"; exit 1; }
"$PY" packaging/formula.py check "$wheel"
echo "packaging check passed: $(basename "$wheel") installs with pipx and works"
