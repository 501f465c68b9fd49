"""Prefix caching in the live views, in a real browser: the recorded events (tests/data/events_tiny_llama.json)
replayed into the component (tests/live_replay.py) up to the step where the prefix-cache lane shares the most
blocks (with the most cached ones among those). Screenshots go to test-artifacts/ (or $INFLIGHT_ARTIFACTS)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from browser_helpers import CHROMIUM, require_browser
from engine.bench.app_process import CHROMIUM_ARGS
from live_replay import replay_html

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("INFLIGHT_ARTIFACTS", REPO / "test-artifacts"))
RECORDING = REPO / "tests" / "data" / "events_tiny_llama.json"

sync_playwright, expect = require_browser()

INST = "document.querySelector('.ifl-root').inflight"
# Page coordinates of a block's cell in a lane's KV map (one block per cell at this size).
BLOCK_CENTER = f"""([lane, b]) => {{ const v = {INST}.cols.get(lane).kv, g = v.geom, r = v.canvas.getBoundingClientRect();
    return [r.left + g.ox + (b % g.cols) * g.s + g.s / 2, r.top + Math.floor(b / g.cols) * g.s + g.s / 2]; }}"""
GANTT_TIPS = f"""lane => {INST}.timeline.cols.find(c => c.name === lane).bands.find(b => b.view === 'gantt')
    .hits.map(h => h.tip()[0])"""


def most_shared(rec: dict) -> tuple[str, list[dict], dict]:
    """(lane, the accepted events up to its step sharing the most blocks, then caching the most, that step)."""
    events = [e for m in rec["messages"][next(i for i, m in enumerate(rec["messages"]) if m.get("ref") == "sub"):]
              if m["type"] == "events" for e in m["events"]]
    best, upto = None, 0
    for i, ev in enumerate(events):
        if ev["type"] == "step" and (best is None or blocks(ev) > blocks(best)):
            best, upto = ev, i
    assert shared(best) > 0, "the recording shares no block"
    return best["lane"], events[:upto + 1], best


def blocks(ev: dict) -> tuple[int, int]:
    return shared(ev), len(ev["kv"]["cached"])


def shared(ev: dict) -> int:
    tables = list(ev["kv"]["block_tables"].values())
    blocks = [b for t in tables for b in t]
    return len({b for b in blocks if blocks.count(b) > 1})


@pytest.fixture(scope="module")
def rec():
    return json.loads(RECORDING.read_text())


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_replay(browser, rec: dict, events: list[dict], **data):
    page = browser.new_page(viewport={"width": 1400, "height": 1300})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_content(replay_html({"lanes": rec["lanes"], "contract": rec["contract"], "axis": "iterations", **data}))
    page.wait_for_function(f"() => !!{INST}")
    page.evaluate(f"events => {INST}.applyEvents(events)", events)
    page.wait_for_timeout(300)  # a frame or two
    assert errors == [], errors
    return page


def test_kv_map_draws_shared_and_cached_blocks_and_the_gantt_what_a_hit_skipped(browser, rec):
    lane, events, step = most_shared(rec)
    page = open_replay(browser, rec, events, views=["gantt", "kv", "util"])
    expect(page.locator(".ifl-root")).to_have_class(re.compile(r"\bifl-has-prefix\b"))
    expect(page.locator(".ifl-sec-kv .ifl-legend-prefix").first).to_be_visible()
    caption = page.locator(".ifl-cell-kv .ifl-caption").nth(rec["lanes"].index(lane))
    expect(caption).to_contain_text(f"{shared(step)} shared · {len(step['kv']['cached'])} cached")
    tables = step["kv"]["block_tables"]
    block = next(b for t in tables.values() for b in t if sum(b in u for u in tables.values()) > 1)
    holders = [rid for rid, t in tables.items() if block in t]
    page.mouse.move(*page.evaluate(BLOCK_CENTER, [lane, block]))
    tip = page.locator(".ifl-tip")
    expect(tip).to_contain_text(f"block {block} · shared by {len(holders)} requests")
    for rid in holders:
        expect(tip).to_contain_text(f"#{rid} · its logical block")
    page.screenshot(path=str(ARTIFACTS / "prefix-kv-map-shared.png"), full_page=True)
    assert any("from cache" in t for t in page.evaluate(GANTT_TIPS, lane)), "no admission bar shows a hit"
    page.close()


def test_kv_detail_names_the_requests_a_request_shares_with(browser, rec):
    lane, events, step = most_shared(rec)
    tables = step["kv"]["block_tables"]
    rid = max(tables, key=lambda r: sum(sum(b in u for u in tables.values()) > 1 for b in tables[r]))
    page = open_replay(browser, rec, events, lanes=[lane], views=["kv"], mode="kv_detail", selected=int(rid))
    expect(page.locator(".ifl-frag-pool").last).to_contain_text("blocks shared — with #")
    page.screenshot(path=str(ARTIFACTS / "prefix-kv-detail.png"), full_page=True)
    page.close()
