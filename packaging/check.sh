#!/usr/bin/env bash
# Build the sdist and wheel, install the wheel with pipx into an empty PIPX_HOME, and
# try it as a new user would: --version, --help listing every command, scan + grep.
# Usage: bash packaging/check.sh [python]   (needs the build and pipx modules)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
ls "$work"/dist/loomcli-*.tar.gz "$work"/dist/loomcli-*.whl >/dev/null
wheel=$(ls "$work"/dist/loomcli-*.whl)
export PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/bin" PIPX_MAN_DIR="$work/man"
"$PY" -m pipx install --quiet "${wheel}[fast]" >"$work/pipx.log" 2>&1 || { cat "$work/pipx.log"; exit 1; }
loom="$work/bin/loom"
"$loom" --version
help=$("$loom" --help)
for cmd in init scan search files status get grep ask mcp serve watch config; do
  grep -qE "^  $cmd " <<<"$help" || { echo "loom --help does not list $cmd"; exit 1; }
done
export LOOM_HOME="$work/home"
mkdir -p "$work/notes"
printf '# Invoices\nFT-2026-0042 paid\n' >"$work/notes/invoices.md"
"$loom" scan "$work/notes" >/dev/null
out=$("$loom" grep 'FT-2026-[0-9]{4}')
[ "$out" = "invoices.md:2:11:FT-2026-0042 paid" ] || { echo "unexpected grep: $out"; exit 1; }
echo "packaging check passed: $(basename "$wheel") installs with pipx and works"
