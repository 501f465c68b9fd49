"""End to end in a real browser: `streamlit run app.py` on a tiny model, driven by Playwright + chromium.

Screenshots go to test-artifacts/ (or $INFLIGHT_ARTIFACTS).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from service_helpers import free_port

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("INFLIGHT_ARTIFACTS", REPO / "test-artifacts"))
XSS = "<img src=x onerror=alert(1)> tell me a story"

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # CI installs it; elsewhere the test says what is missing
    sync_playwright = None

if sync_playwright is None or not Path(CHROMIUM).exists():
    # CI must run this test: there a missing browser is a failure, not a skip.
    if os.environ.get("CI"):
        raise RuntimeError("the browser test needs playwright and Debian's chromium (.ci/run installs both)")
    pytest.skip("needs playwright and chromium (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tiny_model_dirs):
    port = free_port()
    env = {**os.environ, "INFLIGHT_MODEL": str(tiny_model_dirs["llama"]), "INFLIGHT_DEVICE": "cpu"}
    log = open(ARTIFACTS.mkdir(parents=True, exist_ok=True) or ARTIFACTS / "streamlit.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _wait_healthy(url: str, proc, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see {ARTIFACTS / 'streamlit.log'}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")


@pytest.fixture(scope="module")
def page(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        pg = browser.new_page(viewport={"width": 1600, "height": 1400})
        pg.dialogs = []
        pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
        pg.goto(server, wait_until="domcontentloaded")
        yield pg
        browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, "Streamlit shows an exception"


def test_prompt_streams_into_gantt_and_text(page):
    page.get_by_text("Live playground").first.wait_for(timeout=60_000)
    page.get_by_text("Continuous", exact=True).first.click()     # one engine, serving at once
    expect(page.locator(".ifl-conn")).to_have_attribute("data-kind", "live", timeout=60_000)
    box = page.get_by_placeholder("Type a prompt; it goes to every engine shown")
    box.fill(XSS)
    box.press("Enter")
    card = page.locator(".ifl-card", has_text="tell me a story").first
    card.wait_for(timeout=60_000)
    expect(card).to_contain_text(XSS)                              # shown literally, as text
    expect(page.locator(".ifl-root .ytick text", has_text="#0").first).to_be_visible(timeout=30_000)
    page.wait_for_function("() => document.querySelector('.ifl-card [data-state]')?.dataset.state === 'finished'",
                           timeout=60_000)
    shot(page, "1-continuous-prompt")
    assert page.dialogs == [], "the prompt ran script"
    assert page.locator(".ifl-root img[src='x']").count() == 0
    no_exception(page)


def test_side_by_side_both_columns_move(page):
    page.get_by_text("Side by side", exact=True).first.click()
    page.wait_for_function("() => document.querySelectorAll('.ifl-status').length === 2", timeout=60_000)
    # dynamic launches a partial batch after its max wait: the tiny model's 512-token context may
    # refuse one of the 8 prompts (shown as an error), and static would wait for an 8th forever.
    page.get_by_text("dynamic", exact=True).first.click()
    page.wait_for_timeout(1000)
    page.get_by_role("button", name="Burst of 8, mixed lengths").click()
    frames0 = int(page.locator(".ifl-root").first.get_attribute("data-frames"))
    finished_in = """col => [...document.querySelectorAll('.ifl-cards')[col]?.querySelectorAll('.ifl-card [data-state]') ?? []]
                        .filter(e => e.dataset.state === 'finished').length >= 6"""
    try:
        for col in range(2):
            page.wait_for_function(finished_in, arg=col, timeout=120_000)
    finally:
        shot(page, "2-side-by-side")
    frames1 = int(page.locator(".ifl-root").first.get_attribute("data-frames"))
    assert frames1 > frames0, "the views did not redraw"
    no_exception(page)
    assert page.dialogs == []
