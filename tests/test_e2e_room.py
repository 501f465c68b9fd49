"""Room mode in a real browser: the presenter link unlocks the controls for that browser only.

`streamlit run app.py` with INFLIGHT_ROOM=1 on a tiny model; one chromium context follows the
presenter link, another opens the app as someone in the room would."""
from __future__ import annotations

import os

import pytest

from engine.bench.app_process import CHROMIUM_ARGS, running_app
from browser_helpers import CHROMIUM, require_browser
from service_helpers import free_port

TOKEN = "room-presenter-token-42"

sync_playwright, expect = require_browser()


@pytest.fixture(scope="module")
def server(tiny_model_dirs):
    env = {**os.environ, "INFLIGHT_MODEL": str(tiny_model_dirs["llama"]), "INFLIGHT_DEVICE": "cpu",
           "INFLIGHT_ROOM": "1", "INFLIGHT_TOKEN": TOKEN}
    with running_app(free_port(), env, timeout=90) as url:
        yield url


def test_presenter_link_unlocks_controls_viewers_see_why_not(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        presenter = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        presenter.goto(f"{server}/presenter?token={TOKEN}", wait_until="domcontentloaded")
        assert "token" not in presenter.url  # the token leaves the address bar
        expect(presenter.get_by_role("button", name="Pause")).to_be_visible(timeout=60_000)

        viewer = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        viewer.goto(server, wait_until="domcontentloaded")
        expect(viewer.get_by_text("You are watching as a viewer")).to_be_visible(timeout=60_000)
        assert viewer.get_by_role("button", name="Pause").count() == 0
        wrong = viewer.goto(f"{server}/presenter?token=guess")
        assert wrong.status == 403
        browser.close()
