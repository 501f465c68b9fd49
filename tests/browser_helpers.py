"""Playwright + Debian's chromium for the browser tests: required in CI, a skip elsewhere."""
from __future__ import annotations

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
