"""The release path: sdist + wheel build, pipx install from the wheel, the brew formula."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

FORMULA = ROOT / "packaging" / "homebrew" / "loom-index.rb"
TOOL = ROOT / "packaging" / "formula.py"


@pytest.mark.skipif(importlib.util.find_spec("pipx") is None
                    or importlib.util.find_spec("build") is None,
                    reason="needs the test extra (build, pipx)")
def test_wheel_installs_with_pipx_and_works():
    proc = subprocess.run(["bash", str(ROOT / "packaging" / "check.sh"), sys.executable],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^packaging check passed: loom_index-[\d.]+-py3-none-any\.whl installs",
                     proc.stdout, re.M), proc.stdout
    assert "formula: 0 resources, all needed by the wheel" in proc.stdout


def test_distribution_is_loom_index_with_the_loom_command():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "loom-index"
    assert project["scripts"] == {"loom": "loomcli.fastpath:main"}  # typer only when needed
    assert any(d.startswith("pypdfium2") for d in project["dependencies"])  # fast by default


def test_formula_has_install_and_a_test_block_that_scans_and_greps():
    text = FORMULA.read_text()
    assert "class LoomIndex < Formula" in text and "virtualenv_install_with_resources" in text
    assert 'pypi_packages package_name:     "loom-index"' in text
    test_block = text[text.index("  test do"):]
    assert 'system bin/"loom", "scan"' in test_block and "loom grep" in test_block
    assert "# resources: begin" in text and "# resources: end" in text
    assert not re.search(r"pypi\.|pythonhosted", text)


def test_formula_check_refuses_a_resource_the_package_does_not_need(tmp_path):
    stale = tmp_path / "stale.rb"
    stale.write_text(FORMULA.read_text().replace("/v0.", "/v9.").replace(
        "  # resources: begin\n",
        '  # resources: begin\n  resource "requests" do\n    url "x"\n    sha256 "0"\n  end\n'
        '  resource "pypdfium2" do\n    url "x"\n    sha256 "0"\n  end\n'))
    proc = subprocess.run([sys.executable, str(TOOL), "check", str(ROOT), "--formula",
                           str(stale)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "resource requests is not a dependency of" in proc.stderr
    assert "resource pypdfium2 is excluded by pypi_packages" in proc.stderr
    assert "the url is for v9." in proc.stderr  # not the package's version


def test_the_formula_is_for_the_package_s_version():
    from loomcli import __version__

    url = re.search(r'^  url "(.*)"$', FORMULA.read_text(), re.M)
    assert url and url.group(1).endswith(f"/v{__version__}.tar.gz")


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby not installed (.ci/run "
                    "installs Debian's ruby where apt-get can)")
def test_formula_parses_as_ruby():
    proc = subprocess.run(["ruby", "-c", str(FORMULA)], capture_output=True, text=True)
    assert proc.returncode == 0 and "Syntax OK" in proc.stdout, proc.stderr
