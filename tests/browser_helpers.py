"""Playwright + Debian's chromium for the browser tests: required in CI, a skip elsewhere."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def require_browser():
    """(sync_playwright, expect), or skip the calling test module where no browser is installed."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        sync_playwright = expect = None
    if sync_playwright is None or not Path(CHROMIUM).exists():
        # CI must run the browser tests: there a missing browser is a failure, not a skip.
        if os.environ.get("CI"):
            raise RuntimeError("the browser tests need playwright and Debian's chromium (.ci/run installs both)")
        pytest.skip("needs playwright and chromium (apt-get install chromium)", allow_module_level=True)
    return sync_playwright, expect


def watch_errors(page):
    """The page, keeping in page.errors every uncaught error its scripts throw from now on: a frontend that
    threw may be a blank tab (Streamlit's threw on an element it could not place: pages/ui/polled.py)."""
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return page


def no_exception(page) -> None:
    """Streamlit shows no exception on the page, and none of its scripts threw (where watch_errors watches)."""
    assert page.locator('[data-testid="stException"]').count() == 0, "Streamlit shows an exception"
    assert not getattr(page, "errors", []), f"the page's scripts threw: {page.errors[:3]}"


@contextlib.contextmanager
def explained(page, screenshot: Path):
    """An assertion that fails inside says what the page showed: a screenshot at `screenshot`, and the text of
    Streamlit's alerts (an error a page drew) and of the errors its scripts threw (where watch_errors watches)."""
    try:
        yield
    except AssertionError as e:
        try:
            page.screenshot(path=str(screenshot), full_page=True)
            alerts = page.locator('[data-testid="stAlert"]').all_inner_texts()
            shown = f"the page's alerts: {alerts}"
        except Exception as why:  # noqa: BLE001 - a page that crashed: the assertion's own message still comes
            shown = f"no screenshot ({why!r})"
        raise AssertionError(f"{e}\n{shown}; its scripts threw: {getattr(page, 'errors', [])[:3]};"
                             f" screenshot: {screenshot}") from e


PROMPT_BOX = "Type a prompt; it goes to every lane shown"


def submit_prompt(page, text: str, card_text: str):
    """Type a prompt and send it; its card. A rerun replaces the box: while it does, the page may hold two (the
    old one going; Playwright refuses to type into either) and an Enter pressed in the old one is lost (seen in
    full runs on a loaded machine), so it waits for one box and sends again if no card comes."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect
    box = page.get_by_placeholder(PROMPT_BOX)
    card = page.locator(".ifl-card", has_text=card_text).first
    for tries_left in (2, 1, 0):
        expect(box).to_have_count(1, timeout=30_000)
        box.fill(text)
        box.press("Enter")
        try:
            card.wait_for(timeout=20_000)
            return card
        except PlaywrightTimeout:
            if not tries_left:
                raise
    return card
