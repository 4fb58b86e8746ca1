"""The release path: sdist + wheel build, pipx install from the wheel, the brew formula."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

FORMULA = ROOT / "packaging" / "homebrew" / "loomcli.rb"


@pytest.mark.skipif(importlib.util.find_spec("pipx") is None
                    or importlib.util.find_spec("build") is None,
                    reason="needs the test extra (build, pipx)")
def test_wheel_installs_with_pipx_and_works():
    proc = subprocess.run(["bash", str(ROOT / "packaging" / "check.sh"), sys.executable],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "packaging check passed" in proc.stdout


def test_formula_has_install_and_a_test_block_that_scans_and_greps():
    text = FORMULA.read_text()
    assert "class Loomcli < Formula" in text and "virtualenv_install_with_resources" in text
    test_block = text[text.index("  test do"):]
    assert 'system bin/"loom", "scan"' in test_block and "loom grep" in test_block
    assert "# resources: begin" in text and "# resources: end" in text
    assert not re.search(r"pypi|pythonhosted", text)


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby not installed")
def test_formula_parses_as_ruby():
    proc = subprocess.run(["ruby", "-c", str(FORMULA)], capture_output=True, text=True)
    assert proc.returncode == 0 and "Syntax OK" in proc.stdout, proc.stderr
