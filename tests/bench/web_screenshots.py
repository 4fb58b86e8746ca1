"""Screenshots of each view of the web page, for docs/screenshots/ (and the README).

    .venv/bin/python -m tests.bench.web_screenshots [OUT_DIR]

Scans a copy of fixtures/notes into a temporary LOOM_HOME, serves it with a loopback
stand-in LLM (tests/llm_server.py), and photographs each view in Debian's Chromium.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.llm_server import FakeLLM
    from tests.test_web import CHROMIUM_ARGS, chromium

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp())
    try:
        os.environ["LOOM_HOME"] = str(work / "home")
        notes = work / "notes"
        shutil.copytree(ROOT / "fixtures" / "notes", notes)
        subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                       capture_output=True)
        with FakeLLM() as llm:
            llm.behaviour.answer = ["Invoice FT-2026-0412 covers the madder root delivered ",
                                    "in March [manuals/field-guide.pdf]."]
            (work / "home" / "config.toml").write_text(
                f'[llm]\nprovider = "ollama"\nmodel = "llama3.2"\nendpoint = "{llm.url}"\n')
            from tests.test_web import Server

            server = Server("--processes", "1")
            try:
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
                    page = browser.new_page(viewport={"width": 880, "height": 560})
                    url = server.url

                    def shot(name: str) -> None:
                        page.screenshot(path=str(out / f"{name}.png"))

                    page.goto(url + "/")
                    page.locator("#q").press_sequentially("warp tension")
                    expect(page.locator("#hits li").first).to_be_visible()
                    page.keyboard.press("ArrowDown")
                    shot("search")
                    page.goto(url + "/search?q=madder+invoice")
                    page.locator("#hits li a.title", has_text="Field Guide").click()
                    expect(page.locator("#doc-text mark.current")).to_be_visible()
                    shot("document")
                    page.goto(url + "/grep?pattern=FT-2026-0%5B0-9%5D%7B3%7D&context=1")
                    expect(page.locator("#grep-results .group").first).to_be_visible()
                    shot("grep")
                    page.goto(url + "/ask?q=Which+invoice+covers+the+madder+root%3F")
                    page.get_by_role("button", name="Ask").click()
                    expect(page.locator("#ask-state")).to_have_text("Done.")
                    shot("ask")
                    page.goto(url + "/status")
                    expect(page.locator("#status-facts dt").first).to_be_visible()
                    page.get_by_role("button", name="Scan").click()
                    expect(page.locator("#scan-state")).to_contain_text("Scan finished")
                    expect(page.get_by_role("button", name="Scan")).to_be_enabled()
                    shot("status")
                    page = browser.new_page(viewport={"width": 360, "height": 640},
                                            color_scheme="dark")
                    page.goto(url + "/search?q=dyes")
                    expect(page.locator("#hits li").first).to_be_visible()
                    shot("search-dark-360px")
                    browser.close()
            finally:
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for png in sorted(out.glob("*.png")):
        print(f"{png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}: "
              f"{png.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots")
