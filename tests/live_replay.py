"""A page that runs the live views on recorded events, without Streamlit or an engine, for browser tests
(and the fixture and helpers that open it in chromium).

The page holds the component's own HTML, CSS and JS (the files pages/ui/live_view.py ships) and mounts
it as Streamlit would, with a stand-in socket that never connects. Events go in through the instance's
applyEvents (`document.querySelector('.ifl-root').inflight`), as the socket would hand them over.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from browser_helpers import CHROMIUM, require_browser
from engine.harness.app_process import CHROMIUM_ARGS
from engine.paths import LIVE_VIEW, live_view_script

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("INFLIGHT_ARTIFACTS", REPO / "test-artifacts"))  # screenshots
RECORDING = REPO / "tests" / "data" / "events_tiny_llama.json"
INST = "document.querySelector('.ifl-root').inflight"  # the mounted instance, in the page

sync_playwright, expect = require_browser()


@pytest.fixture(scope="module")
def browser():
    """A headless chromium for the module's replay pages (import this fixture into a test module)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def rec() -> dict:
    """The recording (tests/js/record_events.py)."""
    return json.loads(RECORDING.read_text())


def accepted_events(rec: dict) -> list[dict]:
    """The recording's events a live view folds in: those after its subscribe reply (ref "sub")."""
    start = next(i for i, m in enumerate(rec["messages"]) if m.get("ref") == "sub")
    return [e for m in rec["messages"][start:] if m["type"] == "events" for e in m["events"]]


def open_replay(browser, rec: dict, events: list[dict], status: dict | None = None, height: int = 1300, **data):
    """A page with the live view mounted on the recording's lanes and contract (iterations axis unless
    `data` says otherwise), `events` applied; `status`: a service status to show, as the socket's
    reply would bring it; height: the viewport's (views out of sight are not drawn)."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_content(replay_html({"lanes": rec["lanes"], "contract": rec["contract"], "axis": "iterations", **data}))
    page.wait_for_function(f"() => !!{INST}")
    if status is not None:
        page.evaluate(f"status => {{ const i = {INST}; i.server.status = status; i.server.rev++; }}", status)
    page.evaluate(f"events => {INST}.applyEvents(events)", events)
    page.wait_for_timeout(300)  # a frame or two
    assert errors == [], errors
    return page


def replay_html(data: dict) -> str:
    """The page, mounted with the component data `data` (lanes, views, mode, contract, ...)."""
    js = live_view_script()
    css, html = ((LIVE_VIEW / name).read_text(encoding="utf-8") for name in ("live_view.css", "live_view.html"))
    mount = (f"const host = document.getElementById('host');\n"
             f"window.__reported = [];\n"  # what the view tells the page (setStateValue), for tests to read
             f"liveView({{ parentElement: host, data: {json.dumps(data)}, "
             f"setStateValue: (name, value) => window.__reported.push([name, value]) }});")
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>body {{ margin: 0; background: #0b0f17; }}\n"
            f"{css}</style></head><body><div id='host'>{html}</div>\n"
            f"<script>\n{OFFLINE_SOCKET}\n{js}\n{mount}\n</script></body></html>")


# No server behind the page: a socket that stays closed (the view shows it reconnecting). A test can still
# hand the view a message as the server would: window.__sockets.at(-1).onmessage({data: JSON text}).
OFFLINE_SOCKET = """window.__sockets = [];
window.WebSocket = class { constructor() { window.__sockets.push(this); setTimeout(() => this.onclose && this.onclose(), 0); }
  send() {} close() {} };"""
