"""Prefix caching in the live views, in a real browser: the recorded events (tests/data/events_tiny_llama.json)
replayed into the component (tests/live_replay.py) up to the step where the prefix-cache lane shares the most
blocks (with the most cached ones among those). Screenshots go to test-artifacts/ (or $INFLIGHT_ARTIFACTS)."""
from __future__ import annotations

import re

from engine_helpers import whole_kv
from live_replay import ARTIFACTS, INST, accepted_events, browser, expect, open_replay, rec  # noqa: F401

# Page coordinates of a block's cell in a lane's KV map (one block per cell at this size).
BLOCK_CENTER = f"""([lane, b]) => {{ const v = {INST}.cols.get(lane).kv, g = v.geom, r = v.canvas.getBoundingClientRect();
    return [r.left + g.ox + (b % g.cols) * g.s + g.s / 2, r.top + Math.floor(b / g.cols) * g.s + g.s / 2]; }}"""
GANTT_TIPS = f"""lane => {INST}.timeline.cols.find(c => c.name === lane).bands.find(b => b.view === 'gantt')
    .hits.map(h => h.tip()[0])"""


def most_shared(rec: dict) -> tuple[str, list[dict], dict]:
    """(lane, the accepted events up to its step sharing the most blocks, then caching the most, that step
    with its KV tables whole)."""
    events = accepted_events(rec)
    best, upto = None, 0
    for i, ev in enumerate(whole_kv(events)):  # (the socket sends each step's KV changes: folded whole here)
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


def test_kv_map_draws_shared_and_cached_blocks_and_the_gantt_what_a_hit_skipped(browser, rec):
    lane, events, step = most_shared(rec)
    page = open_replay(browser, rec, events, views=["gantt", "kv", "util"], height=2000)  # every view in sight
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
    # the bars share one scale: each row's fill is as long as its number says, whatever its note's length
    rows = page.evaluate("""() => [...document.querySelectorAll('.ifl-frag-row')].map(r => [
        r.querySelector('.ifl-frag-bar').getBoundingClientRect().width,
        r.querySelector('.ifl-frag-fill').getBoundingClientRect().width,
        parseInt(r.querySelector('.ifl-frag-note').textContent.match(/[\\d,]+(?= (tokens in KV|slots))/)[0]
                 .replace(/,/g, ''))])""")
    assert len({round(bar) for bar, _, _ in rows}) == 1, rows
    top = max(n for _, _, n in rows)
    assert all(abs(fill - bar * n / top) <= 2 for bar, fill, n in rows), rows
    page.screenshot(path=str(ARTIFACTS / "prefix-kv-detail.png"), full_page=True)
    page.close()
