"""Participants' names, a remote lane's server gauges, the roofline and the view's lifecycle as Streamlit
drives it, in the live views, in a real browser:
the recorded events (tests/data/events_tiny_llama.json) replayed into the component (tests/live_replay.py).
Screenshots go to test-artifacts/ (or $INFLIGHT_ARTIFACTS)."""
from __future__ import annotations

import re

from engine.events import StepRows, full_entries
from engine_helpers import whole_kv
from live_replay import ARTIFACTS, INST, accepted_events, browser, expect, open_replay, rec  # noqa: F401

REMOTE = "far"  # the remote lane of the synthetic page
UTIL_TIP = f"""lane => {{ const i = {INST}, col = i.timeline.cols.find(c => c.name === lane);
    const band = col.bands.find(b => b.view === 'util');
    const hit = UtilView.hit(i, band, band.x + band.w * 0.6, band.y + 5, col); return hit && hit.tip; }}"""


def named_upto(rec: dict) -> tuple[dict, list[dict]]:
    """(the named request event, the accepted events up to its last step)."""
    events, rows = accepted_events(rec), StepRows()
    req = next(e for e in events if e["type"] == "request" and e["name"])
    last = max(i for i, e in enumerate(events) if e["type"] == "step" and e["lane"] == req["lane"]
               and any(x[0] == req["request_id"] for x in rows.resolve(e)["entries"]))
    return req, events[:last + 1]


def test_a_participants_name_labels_its_gantt_row_and_its_card_as_text(browser, rec):
    req, events = named_upto(rec)
    page = open_replay(browser, rec, events, views=["gantt", "text"], large_text=True)
    card = page.locator(".ifl-tag.ifl-named", has_text=req["name"])
    expect(card).to_have_count(1)  # the lane it went to
    assert page.locator(".ifl-tag i").count() == 0  # its markup stayed text
    gantt = page.locator(".ifl-timeline-canvas")
    expect(gantt).to_have_attribute("aria-label", re.compile(re.escape(f"#{req['request_id']} {req['name']}")))
    page.screenshot(path=str(ARTIFACTS / "live-names.png"), full_page=True)
    page.close()


def test_roofline_lines_in_the_utilization_view_and_the_roofline_chart(browser, rec):
    events = accepted_events(rec)
    page = open_replay(browser, rec, events, views=["util"], large_text=True)
    expect(page.locator(".ifl-root")).to_have_class(re.compile(r"\bifl-has-roofline\b"))
    expect(page.locator(".ifl-timeline .ifl-legend-roofline").first).to_be_visible()
    expect(page.locator(".ifl-cell-roofline .ifl-caption")).to_contain_text("the device's measured peaks")
    expect(page.locator(".ifl-cell-roofline canvas")).to_have_attribute(
        "aria-label", re.compile("; ".join(f"{lane}: [1-9][0-9]* iterations" for lane in rec["lanes"])))
    tip = page.evaluate(UTIL_TIP, rec["lanes"][0])
    assert any(line.startswith("memory bandwidth ") and "FLOPs/byte" in line for line in tip), tip
    page.screenshot(path=str(ARTIFACTS / "live-roofline.png"), full_page=True)
    page.close()


def remote_copy(events: list[dict], lane: str) -> list[dict]:
    """A lane's events as a remote lane sends them (engine/serving/remote/lane.py): no KV, no budget, no token ids,
    no roofline; plus the server's gauges, polled every 0.1 s over the same time."""
    out = []
    for e in events:
        if e.get("lane") != lane or e["type"] not in ("request", "step", "finished"):
            continue
        e = {**e, "lane": REMOTE, "strategy": "remote"}
        if e["type"] == "step":
            e.pop("roofline", None)
            e.update(token_budget=0, sampled={}, kv={"num_blocks": 0, "block_size": 0, "used": 0, "block_tables": {},
                                                     "kv_tokens": {}, "reserved_unused_slots": 0, "cached": []})
        out.append(e)
    ts = [e["t_end"] for e in out if e["type"] == "step"]
    n = int((ts[-1] - ts[0]) / 0.1) + 1
    gauges = [{"type": "remote_metrics", "lane": REMOTE, "strategy": "remote", "t": ts[0] + 0.1 * i,
               "num_running": float(min(i, 5)), "num_waiting": float(max(0, 3 - i)), "kv_usage": min(0.9, 0.05 * i)}
              for i in range(n)]
    return sorted(out + gauges, key=lambda e: e.get("t_start", e.get("t", e.get("arrival_s", e.get("finish_s")))))


def test_a_remote_lane_shows_its_servers_gauges_and_says_it_is_remote(browser, rec):
    lane = rec["lanes"][0]
    events = accepted_events(rec)
    local = [e for e in events if e.get("lane") in (lane, None)]
    status = {"t": 5.0, "paused": False, "engines": {
        lane: {"ready": True, "error": None, "config": {"strategy": "continuous", "max_num_seqs": 6}},
        REMOTE: {"ready": True, "error": None, "config": {"strategy": "remote", "source": "remote",
                                                          "remote": "http://gpu-box:8000/v1", "model": "m"}}}}
    page = open_replay(browser, {**rec, "lanes": [lane, REMOTE]}, local + remote_copy(events, lane), status=status,
                       views=["gantt", "slots", "util", "kv"], axis="time", large_text=True, height=2600)
    expect(page.locator(".ifl-root")).to_have_class(re.compile(r"\bifl-has-remote\b"))
    facts = page.locator(".ifl-status .ifl-facts").nth(1)
    expect(facts).to_contain_text("remote server gpu-box:8000")
    last = max((e for e in remote_copy(events, lane) if e["type"] == "remote_metrics"), key=lambda e: e["t"])
    expect(facts).to_contain_text(f"its /metrics: {last['num_running']:.0f} running, 0 waiting, KV")
    expect(facts).not_to_contain_text("batch")
    expect(page.locator(".ifl-cell-kv .ifl-caption").nth(1)).to_have_text("A remote server does not expose its KV block map")
    tip = page.evaluate(UTIL_TIP, REMOTE)
    assert tip and tip[0].startswith("server gauges at") and tip[2] == "polled from its /metrics", tip
    end = max(e["t_end"] for e in events if e["type"] == "step")
    page.evaluate(f"r => {{ {INST}.timeline.zoom.time = r; {INST}.markDirty(); }}", [-0.05, end + 0.1])  # the run, not 20 s
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "live-remote.png"), full_page=True)
    page.close()


def test_kv_detail_of_a_remote_lane_says_it_has_no_blocks(browser, rec):
    status = {"t": 5.0, "paused": False, "engines": {REMOTE: {"ready": True, "error": None, "config": {
        "strategy": "remote", "source": "remote", "remote": "http://gpu-box:8000/v1", "model": "m"}}}}
    events = remote_copy(accepted_events(rec), rec["lanes"][0])
    page = open_replay(browser, {**rec, "lanes": [REMOTE]}, events, status=status, views=["kv"], mode="kv_detail")
    expect(page.locator(".ifl-detail-head")).to_have_text("A remote server does not expose its KV blocks")
    page.close()


def test_a_pause_is_hatched_on_the_time_axis_and_named_in_the_legend(browser, rec):
    events = accepted_events(rec)
    at = next(i for i, e in enumerate(events) if e["type"] == "step" and i > len(events) // 2)
    t = events[at]["t_end"]
    paused = [{"type": "status", "event": "paused", "t": t}, {"type": "status", "event": "resumed", "t": t + 2.0}]
    later = [{**e, **_shifted(e, 2.0)} for e in events[at + 1:]]  # what the pause delayed
    page = open_replay(browser, rec, events[:at + 1] + paused + later, views=["gantt"], large_text=True, axis="time")
    assert page.evaluate(f"() => {INST}.state.pauses") == [{"t0": t, "t1": t + 2.0}]
    page.evaluate(f"r => {{ {INST}.timeline.zoom.time = r; {INST}.markDirty(); }}", [t - 2.0, t + 4.0])  # around it
    expect(page.locator(".ifl-timeline .ifl-legend-paused").first).to_be_visible()
    last = re.escape(rec["lanes"][-1])  # every column drawn after the pause's band
    expect(page.locator(".ifl-timeline-canvas")).to_have_attribute("aria-label", re.compile(f"{last}: rows #"))
    page.screenshot(path=str(ARTIFACTS / "live-paused.png"), full_page=True)
    page.close()


def _shifted(e: dict, dt: float) -> dict:
    keys = ("t_start", "t_end", "arrival_s", "first_token_s", "finish_s", "t")
    return {k: e[k] + dt for k in keys if isinstance(e.get(k), (int, float))}


def test_utilization_never_passes_100_percent_and_a_static_lane_has_no_budget_line(browser, rec):
    events = accepted_events(rec)
    hello = next(m for m in rec["messages"] if m["type"] == "hello")  # each lane's settings, as the socket says
    page = open_replay(browser, rec, events, views=["util"], status=hello["status"])
    ticks = page.evaluate(f"""() => {INST}.timeline.cols.map(c => c.bands.find(b => b.view === 'util')
                              .yticks.map(t => t.v))""")
    assert all(max(t) <= 100 for t in ticks), ticks
    static = next(n for n in rec["lanes"] if "batch" in n)  # "batch of 3": a static lane
    tip = page.evaluate(UTIL_TIP, static)
    assert any("(no token budget)" in line for line in tip), tip
    page.close()


def as_swapped(events: list[dict], lane: str) -> tuple[int, list[dict]]:
    """The recording's first preempted request of `lane` as swap preemption would send it: its blocks copied
    to a host pool of 16 blocks at its preemption (held there until it is admitted again) and back then."""
    rid = next(r for e in events if e["type"] == "step" and e["lane"] == lane for r in e["preempted"])
    out, held = [], None
    for e in events:
        if e["type"] == "step" and e["lane"] == lane:
            e = {**e, "swaps": [], "swap_bytes": 0, "swap_s": 0.0}
            if rid in e["preempted"] and held is None:
                held = list(range(2))
                e.update(swaps=[[rid, "out", 2]], swap_bytes=8192, swap_s=0.0004)
            elif held and rid in e["admitted"]:
                e.update(swaps=[[rid, "in", 2]], swap_bytes=8192, swap_s=0.0004)
                held = []
            e["host"] = {"num_blocks": 16, "same_ram": True, "block_tables": {str(rid): held} if held else {}}
        out.append(e)
    return rid, out


def test_swap_preemption_shows_the_host_pool_and_the_swapped_wait(browser, rec):
    lane = rec["lanes"][0]
    events = accepted_events(rec)
    rid, swapped = as_swapped(events, lane)
    out_at = next(i for i, e in enumerate(swapped) if e["type"] == "step" and e.get("swaps"))
    page = open_replay(browser, rec, swapped[:out_at + 1], views=["gantt", "kv"], large_text=True, height=1800)
    expect(page.locator(".ifl-root")).to_have_class(re.compile(r"\bifl-has-swap\b"))
    expect(page.locator(".ifl-timeline .ifl-legend-swap").first).to_be_visible()
    expect(page.locator(".ifl-cell-kv .ifl-caption").first).to_contain_text(
        f"host pool (the same RAM as the device pool: a memory copy, not PCIe) 2 / 16 blocks (#{rid} swapped out) "
        f"· 0.0 MB copied in 0.4 ms · this iteration: #{rid} out 2 blocks")
    page.screenshot(path=str(ARTIFACTS / "live-swap.png"), full_page=True)
    page.close()


def test_the_page_is_told_each_time_the_presenters_controls_differ_from_what_it_drew(browser, rec):
    """A pause made and undone within one rerun of the page, then made again: the view reports it again (the
    page's Pause button follows), once per change, and again after a while if the page still draws another."""
    hello = next(m for m in rec["messages"] if m["type"] == "hello")
    drawn = {"paused": False, "slow_motion_s": 0, "auto_slow_motion": False}
    page = open_replay(browser, rec, [], controls=drawn, running=list(hello["status"]["engines"]))
    page.clock.install()

    def server_says(**controls):
        status = {**hello["status"], **drawn, **controls}
        page.evaluate("s => window.__sockets.at(-1).onmessage({data: JSON.stringify("
                      "{type: 'reply', ref: 'status', status: s})})", status)
        return page.evaluate("() => window.__reported.filter(([name]) => name === 'controls').map(([, v]) => v)")

    paused = {**drawn, "paused": True}
    assert server_says(paused=True) == [paused]
    assert server_says(paused=True) == [paused]  # once per change
    assert server_says(paused=False) == [paused]  # what the page drew
    assert server_says(paused=True) == [paused, paused]  # paused again: told again
    page.clock.fast_forward(5_000)  # the page still draws "running" (its rerun lost or drawn a moment early)
    assert server_says(paused=True) == [paused, paused, paused]
    page.clock.fast_forward(5_000)  # then twice as long each time: a slow rerun is not restarted over and over
    assert server_says(paused=True) == [paused, paused, paused]
    page.clock.fast_forward(4_000)
    assert server_says(paused=True) == [paused] * 4
    assert page.evaluate("() => window.__reported.some(([name]) => name === 'running')") is False
    page.close()


def test_a_disaggregated_lane_with_swap_shows_its_prefill_pool_and_its_host_pool(browser, rec):
    """Under the decode engine's pool: the prefill engine's pool, then the decode engine's host pool (swap
    preemption), each in the caption and each answering a hover."""
    lane = rec["lanes"][0]
    rid, swapped = as_swapped(accepted_events(rec), lane)
    events = swapped[:next(i for i, e in enumerate(swapped) if e["type"] == "step" and e.get("swaps")) + 1]
    step = whole_kv(events)[-1]  # its KV whole: the first step of the lane's decode half
    split = {"handed_off": [], "handoffs": []}
    prefill = {**step, **split, "part": "prefill", "entries": [], "swaps": [], "admitted": [], "finished": [],
               "preempted": [], "host": None,
               "kv": {**step["kv"], "num_blocks": 24, "used": 3, "block_tables": {"77": [0, 1, 2]}, "cached": [],
                      "kv_tokens": {"77": 12}}}
    page = open_replay(browser, rec, events[:-1] + [prefill, {**step, **split, "part": "decode"}], views=["kv"],
                       large_text=True, height=1800)
    caption = page.locator(".ifl-cell-kv .ifl-caption").first
    expect(caption).to_contain_text("decode engine's pool: ")
    expect(caption).to_contain_text("prefill engine's pool 3 / 24 blocks")
    expect(caption).to_contain_text(f"decode engine's host pool (the same RAM as the device pool: a memory copy, not "
                                    f"PCIe) 2 / 16 blocks (#{rid} swapped out)")
    for k, words in enumerate(["prefill engine's pool block 0", "decode engine's host pool block 0"]):
        x, y = page.evaluate(f"""k => {{ const v = {INST}.cols.get({lane!r}).kv, h = v.below[k];
            const r = v.canvas.getBoundingClientRect();
            return [r.left + h.g.ox + h.g.s / 2, r.top + h.top + h.g.s / 2]; }}""", k)
        page.mouse.move(x, y)
        expect(page.locator(".ifl-tip")).to_contain_text(words)
    page.screenshot(path=str(ARTIFACTS / "live-split-swap.png"), full_page=True)
    page.close()


def test_a_disaggregated_lanes_batch_slots_show_each_engines_own_slots(browser, rec):
    """The decode engine's slots above, the prefill engine's (p0, p1...) under a line: a hover names the
    engine's slot and the iteration's engine."""
    lane = rec["lanes"][0]
    events, rows = [], StepRows()
    for e in accepted_events(rec):
        if e["type"] == "step" and (e := rows.resolve(e))["lane"] == lane:  # (its rows whole: its pool changes)
            prefill = all(x[1] == "prefill" for x in full_entries(e["entries"]))
            e = {**e, "part": "prefill" if prefill else "decode", "handed_off": [], "handoffs": []}
        events.append(e)
    page = open_replay(browser, rec, events, views=["slots"], large_text=True)
    band = f"{INST}.timeline.cols.find(c => c.name === {lane!r}).bands.find(b => b.view === 'slots')"
    ticks = dict(page.evaluate(f"() => {band}.yticks.map(t => [t.label, t.y])"))
    assert ticks["0"] < ticks["p0"], ticks  # the decode engine's slot 0 above the prefill engine's
    x, y = page.evaluate(f"""() => {{ const b = {band}, sub = b.subs[1], k = sub.cols[0];
        const r = {INST}.timeline.canvas.getBoundingClientRect();
        return [r.left + (k.xa + k.xb) / 2, r.top + sub.y + sub.h - sub.slotH / 2]; }}""")
    page.mouse.move(x, y)
    expect(page.locator(".ifl-tip")).to_contain_text("slot p0")
    expect(page.locator(".ifl-tip")).to_contain_text("(prefill engine)")
    page.close()


def test_an_ended_run_is_shown_whole_on_one_axis_for_every_lane(browser, rec):
    """Once nothing computes, the faster lane's run no longer scrolls away and each lane stops having its own
    iteration range: every column shows the run from its first iteration (or arrival) to its last, on one
    shared range, in the iterations view and the time view."""
    events = accepted_events(rec)
    last_it = max(e["step"] for e in events if e["type"] == "step")
    first_arrival = min(e["arrival_s"] for e in events if e["type"] == "request")
    last_t = max(e.get("t_end", e.get("finish_s") or 0) for e in events if e["type"] in ("step", "finished"))
    ranges = f"() => {INST}.timeline.cols.map(c => c.range)"
    for axis in ("iterations", "time"):
        page = open_replay(browser, rec, events, views=["gantt", "slots"], axis=axis)
        cols = page.evaluate(ranges)
        assert len(cols) == len(rec["lanes"]) and all(c == cols[0] for c in cols), cols
        lo, hi = cols[0]
        if axis == "iterations":
            assert lo < 1 and last_it < hi < last_it + 0.1 * last_it + 2, (lo, hi, last_it)
        else:
            assert lo < first_arrival and last_t < hi < last_t + 0.1 * (last_t - first_arrival) + 1, (lo, hi)
        page.close()


def stalled_events(lane: str) -> list[dict]:
    """Two rows decode at 0.1 s an iteration, then a 900-token prompt is prefilled whole beside them in a 1 s
    iteration: their next token waited 0.9 s more (chunked prefill on vs off, as a lane sends it)."""
    def entry(rid, phase, tokens, slot):
        return [rid, phase, tokens, 10, slot, 0, 0, 0]  # the contract's entry_fields, in order
    decodes = [entry(1, "decode", 1, 0), entry(2, "decode", 1, 1)]
    out = [{"type": "request", "lane": lane, "request_id": r, "arrival_s": 0.0, "max_tokens": 50, "tag": "api",
            "prompt": None, "messages": None, "num_prompt_tokens": 900 if r == 3 else 8} for r in (1, 2, 3)]
    t = 0.0
    for i, (dur, entries) in enumerate([(0.1, decodes)] * 4 + [(1.0, [*decodes, entry(3, "prefill", 900, 2)])], 1):
        out.append({"type": "step", "lane": lane, "step": i, "t_start": t, "t_end": t + dur, "entries": entries,
                    "preempted": [], "finished": [], "admitted": [], "sampled": {}, "deltas": {}, "waits": {}})
        t += dur
    return out


def test_a_stall_shows_on_the_gantt_and_the_slots_with_its_reason(browser, rec):
    """The decoding rows that waited for a whole prompt's prefill: amber over that iteration on the Gantt and
    the batch slots, a legend entry, and a tooltip that says who waited how long for what."""
    lane = rec["lanes"][0]
    page = open_replay(browser, {**rec, "lanes": [lane]}, stalled_events(lane), views=["gantt", "slots"], axis="time")
    expect(page.locator(".ifl-root")).to_have_class(re.compile(r"\bifl-has-stall\b"))
    expect(page.locator(".ifl-timeline .ifl-legend-stall").first).to_be_visible()
    tips = page.evaluate(f"""() => {INST}.timeline.cols[0].bands.find(b => b.view === 'gantt').hits
        .filter(h => h.rid === null).map(h => h.tip().join(' '))""")
    assert len(tips) == 1 and re.search(r"iteration 5 · 1\.00 s: a stall.*2 decoding rows waited 0\.90 s.*900 prompt tokens",
                                        tips[0]), tips
    slot_tip = page.evaluate(f"""() => {{ const i = {INST}, col = i.timeline.cols[0];
        const band = col.bands.find(b => b.view === 'slots'), sub = band.subs[0], c = sub.cols[sub.cols.length - 1];
        return Slots.hit(i, band, (c.xa + c.xb) / 2, sub.y + sub.h - sub.slotH / 2).tip.join(' '); }}""")
    assert "a stall" in slot_tip and "waited 0.90 s" in slot_tip, slot_tip
    page.screenshot(path=str(ARTIFACTS / "live-stall.png"), full_page=True)
    page.close()


def test_where_the_model_ended_its_answer_is_marked_and_what_it_made_after_is_dimmed(browser, rec):
    events = accepted_events(rec)
    fin = next(e for e in events if e["type"] == "finished" and len(e["text"]) > 6 and e["finish_reason"] == "length")
    upto = events[:events.index(fin) + 1]
    upto[-1] = {**fin, "text": fin["text"][:3] + "<b>system</b>", "answer_end": 3}  # text, never markup
    page = open_replay(browser, rec, upto, views=["text"])
    card = page.locator(".ifl-card", has=page.locator(".ifl-answer-end"))
    expect(card).to_have_count(1)  # on its own lane only
    expect(card.locator(".ifl-chip")).to_have_text(f"#{fin['request_id']}")
    expect(card.locator(".ifl-answer-end")).to_have_text("end of answer")
    expect(card.locator(".ifl-past-answer")).to_have_text("<b>system</b>")
    assert card.locator(".ifl-out").inner_text().startswith(fin["text"][:3])
    assert card.locator(".ifl-out b").count() == 0
    page.close()


# ---- the view's lifecycle as Streamlit drives it: the entry point runs on every data change, and the cleanup
# it returned is called on unmount, and also for a run whose data a newer run superseded while the module
# loaded; that late call may come after the newer run took the view
RUN = "data => liveView({ parentElement: document.getElementById('host'), data, setStateValue: () => {} })"
VIEW = f"() => {{ window.__view = {INST}; }}"  # kept: once unmounted, no selector finds it
CLOSED = "() => window.__view.closed"  # (its socket, timers and frame loop closed with it: destroyInstance)


def mounted(browser, rec):  # noqa: F811 - the fixtures
    data = {"lanes": rec["lanes"], "contract": rec["contract"], "axis": "iterations"}
    page = open_replay(browser, rec, accepted_events(rec)[:50], **data)
    page.evaluate(VIEW)
    return page, data


def test_a_superseded_runs_late_cleanup_leaves_the_view_live_and_unmounting_closes_it(browser, rec):  # noqa: F811
    page, data = mounted(browser, rec)
    page.evaluate(f"data => {{ const run = {RUN}; const stale = run(data); window.__latest = run(data); stale(); }}",
                  data)
    assert page.evaluate(CLOSED) is False
    assert page.evaluate(f"() => {INST} === window.__view")  # the same view, still following its socket
    page.evaluate("() => { document.getElementById('host').remove(); window.__latest(); }")
    assert page.evaluate(CLOSED) is True
    page.close()


def test_a_view_whose_element_left_the_page_without_a_cleanup_closes_itself(browser, rec):  # noqa: F811
    page, _ = mounted(browser, rec)
    page.evaluate("() => document.getElementById('host').remove()")
    page.wait_for_function(CLOSED, timeout=10_000)  # (at its next status poll)
    page.close()
