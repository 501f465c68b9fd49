"""End to end in a real browser: `streamlit run app.py` on a tiny model, driven by Playwright + chromium.

Screenshots go to test-artifacts/ (or $INFLIGHT_ARTIFACTS).
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from engine.harness.app_process import CHROMIUM_ARGS, running_app
from browser_helpers import CHROMIUM, no_exception, require_browser, submit_prompt, watch_errors
from service_helpers import free_port
from repo_paths import ROOT

REPO = ROOT
ARTIFACTS = Path(os.environ.get("INFLIGHT_ARTIFACTS", REPO / "test-artifacts"))
XSS = "<img src=x onerror=alert(1)> tell me a story"

sync_playwright, expect = require_browser()


@pytest.fixture(scope="module")
def server(tiny_model_dirs):
    env = {**os.environ, "INFLIGHT_MODEL": str(tiny_model_dirs["llama"]), "INFLIGHT_DEVICE": "cpu"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open(ARTIFACTS / "streamlit.log", "w") as log, running_app(free_port(), env, log, timeout=90) as url:
        yield url


@pytest.fixture(scope="module")
def page(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = watch_errors(browser.new_page(viewport={"width": 1600, "height": 1400}))
        pg.dialogs = []
        pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
        pg.goto(server, wait_until="domcontentloaded")
        yield pg
        browser.close()


GANTT_HAS_ROW = """rid => { const c = document.querySelector('.ifl-timeline-canvas');
                              return !!c && Object.values(JSON.parse(c.dataset.rows || '{}')).some(r => r.includes(rid)); }"""
# Page coordinates of the first Gantt bar drawn (from the live view's own hit list).
FIRST_BAR_CENTER = """() => { const root = document.querySelector('.ifl-root');
    const inst = root.inflight;
    const h = inst.timeline.cols[0].bands.find(b => b.view === 'gantt').hits[0];
    const r = inst.timeline.canvas.getBoundingClientRect();
    return [r.left + (h.xa + h.xb) / 2, r.top + (h.ya + h.yb) / 2]; }"""


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_prompt_streams_into_gantt_and_text(page, server):
    page.get_by_text("Live playground").first.wait_for(timeout=60_000)
    page.get_by_text("Single lane", exact=True).first.click()    # one lane (continuous), serving at once
    _wait_status(server, lambda s: len(s["engines"]) == 1, 60)
    expect(page.locator(".ifl-sname")).to_have_count(1, timeout=30_000)  # the page drew the one lane
    expect(page.locator(".ifl-conn")).to_have_attribute("data-kind", "live", timeout=60_000)
    card = submit_prompt(page, XSS, "tell me a story")
    expect(card).to_contain_text(XSS)                              # shown literally, as text
    page.wait_for_function(GANTT_HAS_ROW, arg=0, timeout=30_000)  # its Gantt row, drawn on the canvas
    page.wait_for_function("() => document.querySelector('.ifl-card [data-state]')?.dataset.state === 'finished'",
                           timeout=60_000)
    shot(page, "1-continuous-prompt")
    # hover its bar: a tooltip names it; click: it is picked (its text card is highlighted)
    page.locator(".ifl-timeline-canvas").scroll_into_view_if_needed()
    x, y = page.evaluate(FIRST_BAR_CENTER)
    page.mouse.move(x, y)
    expect(page.locator(".ifl-tip")).to_contain_text("#0", timeout=5_000)
    page.mouse.click(x, y)
    expect(page.locator(".ifl-card.ifl-sel")).to_contain_text("tell me a story", timeout=5_000)
    page.keyboard.press("Escape")  # the pick is cleared: every view back to normal
    expect(page.locator(".ifl-card.ifl-sel")).to_have_count(0, timeout=5_000)
    assert page.evaluate("() => document.querySelector('.ifl-root').inflight.sel") is None
    # drag across the chart: the time axis zooms (the badge says so); double-click: it follows again
    page.mouse.move(x - 60, y)
    page.mouse.down()
    page.mouse.move(x + 60, y, steps=4)
    page.mouse.up()
    expect(page.locator(".ifl-follow")).to_be_visible(timeout=5_000)
    page.mouse.dblclick(x, y)
    expect(page.locator(".ifl-follow")).to_be_hidden(timeout=5_000)
    assert page.dialogs == [], "the prompt ran script"
    assert page.locator(".ifl-root img[src='x']").count() == 0
    # the answers' pane leaves the wheel to the page until it is clicked, and again once the mouse leaves
    pane = page.locator(".ifl-cards").first
    overflow = "(el) => getComputedStyle(el).overflowY"
    assert pane.evaluate(overflow) == "hidden"
    pane.click()
    assert pane.evaluate(overflow) == "auto"
    page.mouse.move(1, 1)
    assert pane.evaluate(overflow) == "hidden"
    no_exception(page)


def test_gpu_samples_show_in_badge_and_legend(page):
    # No GPU here: the service publishes NVML samples only on CUDA. Feed one as the socket would.
    expect(page.locator(".ifl-gpu")).to_be_hidden()
    page.evaluate("""() => { const i = document.querySelector('.ifl-root').inflight;
        i.applyEvents([{type: 'gpu', t: i.state.latestT ?? 0, util_pct: 73, mem_used_mb: 40960, mem_total_mb: 81920}]); }""")
    expect(page.locator(".ifl-gpu")).to_have_text("GPU 73% · 40.0 / 80.0 GiB", timeout=5_000)
    expect(page.locator(".ifl-legend-gpu").first).to_be_visible()
    no_exception(page)


LANE_ROWS = """() => JSON.parse(document.querySelector('.ifl-timeline-canvas')?.dataset.rows || '{}')"""


def test_scenario_chunked_prefill_both_columns_move(page):
    """A newcomer picks a scenario that is not a strategy pair, runs it: both lanes' columns
    (headed by how they differ) draw the requests, and the cards compare them."""
    page.get_by_text("Long prompt during decodes: chunked prefill on vs off", exact=True).first.click()
    heads = page.locator(".ifl-shead")
    expect(heads).to_have_count(2, timeout=60_000)
    # the old lanes' two heads count too: wait as long for the new lanes' engines (about 1-2 s alone,
    # longer beside a busy test run on 2 cores)
    expect(heads.nth(0)).to_contain_text("chunked prefill on", timeout=60_000)
    expect(heads.nth(1)).to_contain_text("chunked prefill off")
    expect(page.locator(".ifl-pill[data-kind='ok']")).to_have_count(2, timeout=60_000)  # both lanes ready
    page.get_by_role("button", name="Run scenario").click()
    frames0 = int(page.locator(".ifl-root").first.get_attribute("data-frames"))
    try:
        page.wait_for_function(f"""() => {{ const r = ({LANE_ROWS})();
            return (r['chunked on'] || []).length >= 9 && (r['chunked off'] || []).length >= 9; }}""",
                               timeout=60_000)
        cards = page.locator(".ifl-mc-col")
        expect(cards).to_have_count(2, timeout=30_000)
        expect(cards.nth(0)).to_contain_text("x vs chunked off", timeout=60_000)
        expect(cards.nth(1)).to_contain_text("x vs chunked on")
    finally:
        shot(page, "2-chunked-prefill-on-vs-off")
    rows = page.evaluate(LANE_ROWS)
    assert sorted(rows["chunked on"])[-9:] == sorted(rows["chunked off"])[-9:]  # the same requests, each lane
    assert int(page.locator(".ifl-root").first.get_attribute("data-frames")) > frames0, "the views did not redraw"
    no_exception(page)
    assert page.dialogs == []


def _set_lanes_over_the_socket(url: str, lanes: dict) -> None:
    _command(url, {"cmd": "lanes", "lanes": lanes})


def _command(url: str, msg: dict) -> None:
    """One presenter's command over the socket, answered ok."""
    with connect(url.replace("http", "ws", 1) + "/engine/ws") as ws:
        ws.recv()  # hello
        ws.send(json.dumps({**msg, "ref": "test"}))
        while (reply := json.loads(ws.recv(timeout=30))).get("ref") != "test":
            pass
        assert reply.get("ok"), reply


def test_the_page_follows_lanes_changed_elsewhere(page, server):
    """Another client sets the lanes (here the socket's presenter command): the open page redraws its
    columns, headers and Compare choice for what runs now, without a click."""
    expect(page.locator(".ifl-pill[data-kind='ok']")).to_have_count(2, timeout=60_000)  # every lane ready
    page.reload()  # a page drawn while nothing loads: no banner polls, nothing reruns it by chance
    expect(page.locator(".ifl-pill[data-kind='ok']")).to_have_count(2, timeout=60_000)
    assert page.locator(".ifl-sname").all_text_contents() not in ([], ["block 16", "block 128"])
    _set_lanes_over_the_socket(server, {"block 16": {"block_size": 16}, "block 128": {"block_size": 128}})
    expect(page.locator(".ifl-sname")).to_have_text(["block 16", "block 128"], timeout=30_000)
    expect(page.locator(".ifl-shead")).to_have_text(["block 16", "block 128"])
    expect(page.get_by_text("16 requests over 4 s", exact=False)).to_be_visible(timeout=10_000)  # its stream
    no_exception(page)


def _status(url: str) -> dict:
    with connect(url.replace("http", "ws", 1) + "/engine/ws") as ws:
        return json.loads(ws.recv())["status"]


def _wait_status(url: str, pred, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while not pred(status := _status(url)):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def test_presenter_keyboard_shortcuts(page, server):
    """Space pauses and resumes, s toggles slow motion, a digit starts that scenario; keys typed into
    the prompt box are text, not commands."""
    page.wait_for_function("() => window.__inflightShortcuts === true", timeout=30_000)  # the listener is in
    page.wait_for_function("() => { const s = document.querySelector('.ifl-root')?.inflight?.server.status;"
                           " return !!s && !s.replay; }", timeout=90_000)  # the engines, not the loading replay
    try:
        _keys_pause_and_slow_down(page, server)
    finally:  # never leave the module's server paused or slowed for the tests after this one
        _command(server, {"cmd": "resume"})
        _command(server, {"cmd": "slow_motion", "interval_s": 0})
    box = page.get_by_placeholder("Type a prompt")
    box.click()
    box.press_sequentially("s 2 ")
    expect(box).to_have_value("s 2 ")
    assert not _status(server)["paused"] and _status(server)["slow_motion_s"] == 0
    page.locator("h1").first.click()
    page.keyboard.press("2")  # the burst scenario: its lanes, then its stream
    _wait_status(server, lambda s: list(s["engines"]) == ["max batch 4", "max batch 32"], 30)
    expect(page.locator(".ifl-sname")).to_have_text(["max batch 4", "max batch 32"], timeout=30_000)
    page.get_by_text("Presentation mode", exact=True).click()
    expect(page.locator('section[data-testid="stSidebar"]')).to_be_hidden(timeout=10_000)
    # the projector's list above the views, then only it once the rerun ends (until then the usual
    # layout's narration, stale, is still there under the views)
    expect(page.locator(".ifl-narration.ifl-compact")).to_be_visible(timeout=60_000)
    expect(page.locator(".ifl-narration")).to_have_count(1, timeout=30_000)
    shot(page, "5-presentation-mode-narration")
    no_exception(page)


def _keys_pause_and_slow_down(page, server) -> None:
    page.locator("h1").first.click()
    page.keyboard.press(" ")
    _wait_status(server, lambda s: s["paused"])
    page.keyboard.press("ArrowRight")  # paused: one iteration (nothing to do here), still paused
    page.keyboard.press(" ")
    _wait_status(server, lambda s: not s["paused"])
    page.keyboard.press(" ")
    _wait_status(server, lambda s: s["paused"])
    expect(page.get_by_role("button", name="Resume")).to_be_visible(timeout=20_000)  # the sidebar follows
    page.keyboard.press(" ")
    _wait_status(server, lambda s: not s["paused"])
    expect(page.get_by_role("button", name="Pause")).to_be_visible(timeout=20_000)
    slider = page.locator('[data-testid="stSlider"]', has_text="Slow motion").get_by_role("slider")
    page.keyboard.press("s")
    _wait_status(server, lambda s: s["slow_motion_s"] > 0)
    expect(slider).to_have_value("0.5", timeout=20_000)  # the slider follows the key
    page.keyboard.press("s")
    _wait_status(server, lambda s: s["slow_motion_s"] == 0)
    expect(slider).to_have_value("0", timeout=20_000)


CARD_VALUE_PX = "() => { const v = document.querySelector('.ifl-mc-value'); " \
                "return v ? parseFloat(getComputedStyle(v).fontSize) : null; }"


def test_presentation_mode_makes_the_metric_cards_larger(page, server):
    _normal_layout(page)
    r = httpx.post(f"{server}/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4}, timeout=60)
    assert r.status_code == 200, r.text
    page.wait_for_function(f"() => ({CARD_VALUE_PX})() !== null", timeout=30_000)
    usual = page.evaluate(CARD_VALUE_PX)
    page.get_by_text("Presentation mode", exact=True).click()
    expect(page.locator('section[data-testid="stSidebar"]')).to_be_hidden(timeout=10_000)
    expect(page.locator(".ifl-mc-cards.ifl-mc-large").first).to_be_visible(timeout=30_000)
    assert page.evaluate(CARD_VALUE_PX) > 1.2 * usual, usual  # a projector reads them
    _normal_layout(page)


def _normal_layout(page) -> None:
    """Out of presentation mode (the sidebar shows); a click made while the page reruns may be lost."""
    sidebar = page.locator('section[data-testid="stSidebar"]')
    expect(page.get_by_text("Presentation mode", exact=True).first).to_be_visible(timeout=60_000)  # drawn
    for _ in range(3):
        if sidebar.is_visible():
            return
        page.get_by_text("Presentation mode", exact=True).first.click()
        try:
            sidebar.wait_for(state="visible", timeout=8_000)
        except Exception:  # noqa: BLE001 - try again
            pass
    expect(sidebar).to_be_visible()


def test_one_click_stops_the_load_generator(page, server):
    """While requests flow and the page reruns, one click on Stop stops the generator: nothing is sent
    after it, and the button says Start again. Another tab, drawn while none ran, shows it start and stop."""
    _normal_layout(page)
    other = watch_errors(page.context.browser.new_page(viewport={"width": 1600, "height": 1400}))
    other.goto(server, wait_until="domcontentloaded")
    expect(other.get_by_text("Load generator", exact=False).first).to_be_visible(timeout=60_000)
    rate = page.locator('[data-testid="stSlider"]', has_text="Arrival rate").get_by_role("slider")
    rate.focus()
    page.keyboard.press("End")  # 8 requests/s
    expect(rate).to_have_value("8", timeout=10_000)
    page.get_by_role("button", name="Start generator").click()
    expect(page.get_by_text(re.compile(r"Generator running: ([3-9]|\d\d+) sent"))).to_be_visible(timeout=30_000)
    expect(other.get_by_text(re.compile(r"Generator running: \d+ sent"))).to_be_visible(timeout=15_000)
    page.get_by_role("button", name="Stop generator").click()
    expect(page.get_by_role("button", name="Start generator")).to_be_visible(timeout=10_000)
    stopped = page.get_by_text(re.compile(r"Generator stopped: \d+ sent"))  # not "stopping": all counted
    expect(stopped).to_be_visible(timeout=10_000)
    sent = stopped.text_content()
    time.sleep(2.5)
    expect(stopped).to_have_text(sent)  # nothing sent since the click
    expect(other.get_by_text(sent)).to_be_visible(timeout=15_000)  # the other tab's last count, the same
    no_exception(other)
    other.close()
    no_exception(page)
