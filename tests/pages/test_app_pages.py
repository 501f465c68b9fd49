"""Page logic with Streamlit's AppTest (no browser): controls reach the service, pages render cleanly."""
from __future__ import annotations

import gc
import re
import time
import weakref
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.events import RequestEvent
from service_helpers import assert_all_free, free_port, service_fixture, wait_idle, wait_settled
from event_factories import FIRST, SECOND, hub_with
from engine.workshop.scenarios import runner as scenario_runner
from engine.workshop.scenarios.catalog import by_title
from engine.workshop import loadgen
from engine.telemetry.kv_stats import KVStats
from repo_paths import ROOT

PAGES = ROOT / "pages"


svc = service_fixture(registered=True, strategies=("continuous", "dynamic"), static_batch_size=8, max_model_len=512,
                      num_kv_blocks=1024)


def app(page: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / page), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def request_events(svc, since: int, want: int) -> list[dict]:
    deadline = time.monotonic() + 10  # a worker publishes "request" just after accepting
    while True:
        events = [e for _, e in svc.hub.read(since).events if isinstance(e, RequestEvent)]
        if len(events) >= want or time.monotonic() > deadline:
            return events
        time.sleep(0.02)


def test_scenario_runs_its_lanes_and_its_stream_reaches_both(svc):
    """A scenario that is not a strategy pair: its lanes run, its stream goes to both, clamped to the
    tiny model's context (512 tokens) instead of refused."""
    at = app("playground.py")
    at.sidebar.radio(key="compare").set_value("Long prompt during decodes: chunked prefill on vs off").run()
    assert not at.exception
    assert svc.lane_names == ["chunked on", "chunked off"]
    wait_settled(svc)
    assert not svc.lanes["chunked off"].enable_chunked_prefill and svc.lanes["chunked on"].enable_chunked_prefill
    assert any("What to watch" in i.value and "long prompt" in i.value for i in at.info)
    cursor = svc.hub.head
    next(b for b in at.button if b.label == "Run scenario").click().run()
    assert not at.exception
    events = request_events(svc, cursor, 18)
    assert {e.lane for e in events} == {"chunked on", "chunked off"} and {e.tag for e in events} == {"scenario"}
    assert len(events) == 18 and 300 < max(e.num_prompt_tokens for e in events) <= 512 - 16  # cut to fit
    assert_all_free(svc)
    at.sidebar.radio(key="compare").set_value("Steady Poisson load: continuous vs dynamic").run()
    assert svc.lane_names == ["continuous", "dynamic"]


@pytest.mark.parametrize("name,policy", [
    ("Head-of-line blocking: FCFS vs SJF", "sjf"),
    ("A flooding tenant: FCFS vs fair", "fair"),
    ("An urgent request: FCFS vs priority", "priority")])
def test_policy_scenario_sets_the_lanes_policies_and_its_stream_carries_tenants_and_priorities(
        svc, name, policy):
    at = app("playground.py")
    at.sidebar.radio(key="compare").set_value(name).run()
    assert not at.exception and svc.lane_names == ["fcfs", policy]
    wait_settled(svc)
    assert [c.scheduling_policy for c in svc.lanes.values()] == ["fcfs", policy]
    assert svc.lanes["fcfs"].max_num_seqs == svc.lanes[policy].max_num_seqs < svc.cfg.max_num_seqs
    assert any("What to watch" in i.value and "Gantt" in i.value for i in at.info)
    cursor = svc.hub.head
    next(b for b in at.button if b.label == "Run scenario").click().run()
    assert not at.exception
    runner = at.session_state["stream"]
    runner.join(30)
    assert runner.submitted == len(runner.arrivals) and not runner.errors
    events = request_events(svc, cursor, 2 * len(runner.arrivals))
    assert len(events) == 2 * len(runner.arrivals) and {e.lane for e in events} == {"fcfs", policy}
    for lane in ("fcfs", policy):  # each lane got the stream's tenants and priorities, in order
        sent = sorted((e for e in events if e.lane == lane), key=lambda e: e.request_id)
        assert [(e.tenant, e.priority) for e in sent] == [(a.tenant, a.priority) for a in runner.arrivals]
    assert_all_free(svc)
    at.sidebar.radio(key="compare").set_value("Steady Poisson load: continuous vs dynamic").run()
    assert svc.lane_names == ["continuous", "dynamic"]


def test_a_scenario_picked_while_a_shared_lane_drains_stays_picked(svc):
    """Head-of-line blocking, then at once An urgent request: their "fcfs" lanes differ (max batch 2 vs 4), so
    fcfs drains before it restarts and meanwhile runs its old settings. The choice stays the urgent request
    (it once fell to Custom, the button to "Send requests"), then and once the lanes have settled."""
    from engine import SamplingParams
    hol, urgent = "Head-of-line blocking: FCFS vs SJF", "An urgent request: FCFS vs priority"
    at = app("playground.py")
    at.sidebar.radio(key="compare").set_value(hol).run()
    wait_settled(svc)
    svc.set_slow_motion(0.05)  # fcfs has a request in flight for a while: its restart waits for it
    try:
        svc.submit(list(range(20, 40)), SamplingParams(max_tokens=40, ignore_eos=True), lanes=["fcfs"])
        at.sidebar.radio(key="compare").set_value(urgent).run()
        assert svc.lanes["fcfs"].max_num_seqs == 2  # still draining
        at.run()
        assert at.sidebar.radio(key="compare").value == urgent
        assert any(b.label == "Run scenario" for b in at.button)
    finally:
        svc.set_slow_motion(0.0)
    wait_settled(svc)
    at.run()
    assert svc.lanes["fcfs"].max_num_seqs == 4 and at.sidebar.radio(key="compare").value == urgent
    at.sidebar.radio(key="compare").set_value("Steady Poisson load: continuous vs dynamic").run()
    wait_settled(svc)


def test_viewer_cannot_fire_a_stream_that_names_tenants(svc, monkeypatch):
    """A viewer is its own tenant and may not ask for priority -1: the button says it is the presenter's."""
    from engine.room.access import Access, Client
    svc.set_lanes(by_title("A flooding tenant: FCFS vs fair").lanes)
    wait_settled(svc)
    monkeypatch.setattr(svc, "access", Access(room=True, token="presenter-token-xyz"))
    at = app("playground.py")
    button = next(b for b in at.button if b.label == "Run scenario")
    assert button.disabled and "presenter" in button.help and "tenant" in button.help
    with pytest.raises(ValueError, match="presenter"):
        scenario_runner.fire(svc, by_title("A flooding tenant: FCFS vs fair"), Client("viewer-1", presenter=False))
    monkeypatch.undo()
    svc.set_lanes(by_title("Steady Poisson load: continuous vs dynamic").lanes)
    wait_settled(svc)


def test_presentation_mode_narration_and_auto_slow_motion(svc):
    """Presentation mode hides the sidebar (CSS) and enlarges the narration; the narration under the
    views describes the run from its events; auto slow motion is a service setting."""
    at = app("playground.py")
    assert not any("stSidebar" in h.body for h in at.get("html"))
    cursor = svc.hub.head
    next(b for b in at.button if b.label == "Run scenario").click().run()
    at.session_state["stream"].join(30)
    wait_idle(svc, 60)
    assert request_events(svc, cursor, 2)
    time.sleep(3.2)  # the narrator ends a lane's run once it stays idle a while
    at.toggle(key="large_text").set_value(True).run()
    assert not at.exception
    html = [h.body for h in at.get("html")]
    assert any("stSidebar" in b and "display: none" in b for b in html)
    narration = next(b for b in html if "ifl-narration" in b)  # above the views: the latest sentence, large
    assert "font-size:1.35rem" in narration
    assert "finished all 20 requests in" in narration or "for the same 20 requests" in narration
    at.sidebar.toggle(key="auto_slow").set_value(True).run()
    assert svc.auto_slow_motion and svc.pace_s(1) > 0 and svc.pace_s(50) == svc.min_interval_s
    at.sidebar.toggle(key="auto_slow").set_value(False).run()
    assert not svc.auto_slow_motion


def test_a_viewer_cannot_run_a_scenario_whose_lanes_do_not_run(svc):
    from engine.room.access import Client, NotPresenter
    with pytest.raises(NotPresenter, match="presenter"):
        scenario_runner.start(svc, by_title("Burst: max batch 4 vs 32"), Client("viewer-1", presenter=False))
    assert svc.lane_names == ["continuous", "dynamic"]


def test_a_new_tab_adopts_the_running_lanes(svc):
    at = app("playground.py")
    assert at.sidebar.radio(key="compare").value == "Steady Poisson load: continuous vs dynamic"
    assert next(b for b in at.button if b.label == "Run scenario")  # that scenario's lanes and stream
    # the caption says the precision and the attention backend, and why (the tests pin float32: conftest.py)
    shown = " · float32 (as set) · torch attention (auto: the PyTorch reference off a GPU) · lanes: "
    assert any(shown in c.value for c in at.caption), [c.value for c in at.caption]


def test_single_lane_custom_lanes_and_playback_controls(svc):
    at = app("playground.py")
    at.sidebar.radio(key="compare").set_value("Single lane").run()
    assert svc.lane_names == ["continuous"]
    at.sidebar.radio(key="compare").set_value("Custom").run()
    seqs = [s for s in at.sidebar.slider if s.key.startswith("lane1-") and s.key.endswith("-seqs")]
    seqs[0].set_value(4)
    next(b for b in at.sidebar.button if b.label == "Apply lanes").click().run()
    assert not at.exception and svc.lane_names == ["continuous", "static"]
    wait_settled(svc)
    assert svc.lanes["static"].max_num_seqs == 4 and svc.lanes["static"].strategy == "static"
    assert svc.lanes["continuous"].max_num_seqs == svc.cfg.max_num_seqs
    next(b for b in at.sidebar.button if b.label == "Pause").click().run()
    assert svc.paused.is_set()
    next(b for b in at.sidebar.button if b.label == "Resume").click().run()
    assert not svc.paused.is_set()
    at.sidebar.slider(key="slow_motion").set_value(0.25).run()
    assert svc.min_interval_s == 0.25
    at.sidebar.slider(key="slow_motion").set_value(0.0).run()
    at.sidebar.radio(key="compare").set_value("Steady Poisson load: continuous vs dynamic").run()
    assert svc.lane_names == ["continuous", "dynamic"]
    assert not at.exception


def test_engine_settings_apply_to_every_lane(svc):
    at = app("playground.py")
    at.sidebar.number_input[0].set_value(512)
    next(b for b in at.sidebar.button if b.label == "Apply").click().run()
    wait_settled(svc)
    assert svc.cfg.num_kv_blocks == 512 and all(w.engine.cfg.num_kv_blocks == 512 for w in svc.workers.values())


def test_the_rooms_slos_reach_every_lane_and_the_cards_count_goodput(svc):
    """The SLOs set in the sidebar go to every lane's config (the slo policy reads them); the cards show
    the share of this run's requests that met them and the goodput."""
    at = app("playground.py")
    ttft, tpot = (next(n for n in at.sidebar.number_input if n.label.startswith(x)) for x in ("TTFT SLO", "TPOT SLO"))
    ttft.set_value(30.0)
    tpot.set_value(5000)
    next(b for b in at.sidebar.button if b.label == "Apply").click().run()
    wait_settled(svc)
    assert (svc.cfg.slo_ttft_s, svc.cfg.slo_tpot_s) == (30.0, 5.0)
    assert all((w.engine.cfg.slo_ttft_s, w.engine.cfg.slo_tpot_s) == (30.0, 5.0) for w in svc.workers.values())
    svc.submit([5, 6, 7], None, lanes=["continuous"])[0].result(30)
    at = app("playground.py")
    values = dict(re.findall(r'data-label="([^"]+)" data-value="([^"]*)"', "".join(m.value for m in at.markdown)))
    assert values["SLO met"] == "100 %" and values["Goodput"].endswith(" req/s")


def test_metric_cards_computed_from_events(svc):
    hs = svc.submit([5, 6, 7], None, lanes=["continuous"])
    hs[0].result(30)
    at = app("playground.py")
    cards = "".join(m.value for m in at.markdown)
    values = dict(re.findall(r'data-label="([^"]+)" data-value="([^"]*)"', cards))
    assert {"Throughput", "TTFT p50", "TPOT p99", "Padding waste", "KV waste"} <= set(values)
    assert int(values["Requests done"]) >= 1 and values["Throughput"].endswith(" tok/s")
    assert re.fullmatch(r"\$\d+\.\d\d/M tok", values["Cost"])


def test_a_lessons_figures_are_provisional_while_a_lane_still_works():
    """'Time for the run: static 32.63 s' once became 97.83 s: while a shown lane has requests in flight, the
    scenario's cards say "so far" and compare nothing; once all finished, the ratio."""
    from engine.workshop.scenarios.headline import METRICS
    from pages.ui.metric_cards import _lead_cards
    mine, theirs = {"duration_s": 32.63}, {"duration_s": 10.0}
    (card,) = _lead_cards(METRICS["duration_s"], mine, "continuous", theirs, in_flight=5)
    assert (card.value, card.delta, card.tone) == ("32.63 s", "so far: 5 in flight", "off")
    (card,) = _lead_cards(METRICS["duration_s"], mine, "continuous", theirs, in_flight=0)
    assert (card.delta, card.tone) == ("3.26x vs continuous", "down")
    (card,) = _lead_cards(METRICS["swap_mb"], {"swap_mb": 0.0}, "swap", {"swap_mb": 12.5})
    assert (card.value, card.delta, card.tone) == ("0.0 MB", None, "off")  # no "0.00x", no green


def test_open_tabs_share_one_fold_of_each_event_and_a_cleared_tab_gets_its_own(svc, monkeypatch):
    """Each tab folded every engine event into its own metrics and narration: at a GPU's pace a room of
    phones cost the engines' core one fold of every step each. Tabs showing the same run share one, folded
    once; Clear views gives that tab its own, the others keep theirs; none outlives the tabs that hold it."""
    from engine.telemetry.live_metrics import LiveMetrics
    folds = []
    fold = LiveMetrics.on_step
    monkeypatch.setattr(LiveMetrics, "on_step", lambda self, msg: (folds.append(msg), fold(self, msg)))
    svc.submit([5, 6, 7], None, lanes=["continuous"])[0].result(30)
    tabs = [app("playground.py") for _ in range(3)]
    for i in range(3):
        tabs[i].run()
        assert not tabs[i].exception
    assert len(folds) == len(set(map(id, folds))) > 0  # every step folded once, however many tabs
    for key in ("metrics", "narrator"):
        assert tabs[0].session_state[key] is tabs[1].session_state[key] is tabs[2].session_state[key]
    next(b for b in tabs[2].sidebar.button if b.label == "Clear views").click().run()
    for key in ("metrics", "narrator"):
        assert tabs[2].session_state[key] is not tabs[0].session_state[key] is tabs[1].session_state[key]
    assert "Requests done" in "".join(m.value for m in tabs[0].markdown)  # the others' cards keep the run
    cleared = [weakref.ref(tabs[2].session_state[key]) for key in ("metrics", "narrator")]
    del tabs[2]
    gc.collect()
    assert [ref() for ref in cleared] == [None, None]  # the cleared tab's metrics and narration went with it


def test_clear_views_starts_the_cards_and_the_narration_afresh(svc):
    hs = svc.submit([5, 6, 7], None, lanes=["continuous"])
    hs[0].result(30)
    at = app("playground.py")
    assert "Requests done" in "".join(m.value for m in at.markdown)
    assert not any(c.value.startswith("Since Clear views") for c in at.caption)
    next(b for b in at.sidebar.button if b.label == "Clear views").click().run()
    at.run()  # the click's rerun clears; the next one draws from what is left
    assert not at.exception
    assert "Requests done" not in "".join(m.value for m in at.markdown)
    assert any("first request of this run" in i.value for i in at.info)
    assert any(c.value.startswith("Since Clear views") for c in at.caption)
    assert at.session_state["narrator"].reader.recent(now=svc.clock()) == []


def test_a_scenario_run_shows_its_number_first_and_its_result_when_it_ends(svc):
    at = app("playground.py")
    at.sidebar.radio(key="compare").set_value("Straggler: continuous vs static").run()
    wait_settled(svc)
    next(b for b in at.button if b.label == "Run scenario").click().run()
    time.sleep(1.0)
    wait_idle(svc, 120)
    time.sleep(3.2)  # nothing more comes: the run has ended
    at.run()
    assert not at.exception
    cards = "".join(m.value for m in at.markdown)
    assert re.search(r'class="ifl-mc lead" data-label="Time for the run"', cards)
    assert re.search(r"Run finished: (static|continuous) needed \d+\.\d\dx the time", cards)
    assert any(c.value.startswith("This run: Straggler") for c in at.caption)
    assert any(re.match(r"\*\*What to watch: Time for the run\\?: continuous \d", i.value) for i in at.info)
    svc.set_lanes(by_title("Steady Poisson load: continuous vs dynamic").lanes)
    wait_settled(svc)


def test_kv_page_shows_the_roofline_of_recent_iterations(svc):
    svc.submit([5, 6, 7], None, lanes=["continuous"])[0].result(30)
    at = app("kv_cache.py")
    assert not at.exception
    assert any("Roofline" in h.value for h in at.subheader)
    assert any("KiB per token" in m.value for m in at.markdown)
    assert len(at.dataframe) == 2  # where the KV memory goes; the roofline per lane
    assert len(at.get("plotly_chart")) == 1  # recent iterations under the device's roof


def test_pages_with_a_remote_lane(svc):
    """A remote lane (here a server that is down) is listed, kept, timed at the client, and left out
    of the KV views."""
    remote = {"remote": f"http://127.0.0.1:{free_port()}/v1", "model": "m", "metrics": False}
    svc.set_lanes({"continuous": svc.lanes["continuous"], "far": remote})
    try:
        wait_settled(svc)
        assert [h.result(10).finish_reason for h in svc.submit([5, 6, 7], None)] == ["length", "error"]
        at = app("playground.py")
        cards = "".join(m.value for m in at.markdown)
        assert 'data-label="Timed" data-value="at this client"' in cards
        at.sidebar.radio(key="compare").set_value("Custom").run()
        assert any("Remote lane far: m at http://127.0.0.1" in t.value for t in at.sidebar.text)
        next(b for b in at.sidebar.button if b.label == "Apply lanes").click().run()
        assert not at.exception and svc.lane_names == ["continuous", "static", "far"]
        app("kv_cache.py")
    finally:
        svc.set_lanes(by_title("Steady Poisson load: continuous vs dynamic").lanes)
        wait_settled(svc)


@pytest.mark.parametrize("page", ["about.py", "kv_cache.py", "benchmark.py"])
def test_other_pages_render(svc, page):
    app(page)


def test_kv_cache_page_shows_a_request_table_pointing_into_shared_blocks(svc):
    """The page's accounting fed hand-made step events of a prefix hit (the engine's own are tested in
    test_prefix_cache*): #2's table starts with two blocks it shares with #1, served from the cache."""
    wait_idle(svc)
    stats = KVStats()
    stats.consume(hub_with(FIRST, SECOND, lane=svc.lane_names[0]))
    stats.cursor = svc.hub.head  # from here on, only what the (idle) service publishes
    at = AppTest.from_file(str(PAGES / "kv_cache.py"), default_timeout=60)
    from ui import hub_reader  # (the module the pages import): the page's shared reader is this one
    at.session_state["kv_stats"] = hub_reader._Shared(stats, ("kv_stats", None, svc.hub))
    at.session_state["kv_selected"] = 2
    at.run()
    assert not at.exception, at.exception
    lanes, table = at.dataframe[0].value, at.dataframe[1].value
    assert lanes.loc["shared blocks", svc.lane_names[0]] == "2"  # one column per lane, every cell text
    assert "None" not in lanes.to_string()
    assert list(table["shared with"]) == ["#1", "#1", ""] and list(table["from prefix cache"]) == [True, True, False]


def test_benchmark_page_runs_in_background_and_shows_results(svc):
    at = app("benchmark.py")
    at.selectbox[0].set_value("tiny")
    at.multiselect[0].set_value(["continuous", "static"])
    next(b for b in at.button if b.label == "Run benchmark").click().run()
    assert not at.exception
    from engine.bench import job as bench_job
    job = bench_job.current()
    job.join(120)
    assert job.error is None and job.result is not None
    assert [r["strategy"] for r in job.result["results"]] == ["continuous", "static"]
    assert all(r["usd_per_million_output_tokens"] > 0 for r in job.result["results"])
    assert not svc.paused.is_set()  # the live engines resume after the run
    at.run()
    assert not at.exception
    assert any("Results" in h.value for h in at.subheader)
    assert len(at.dataframe) == 1


def test_load_generator_follows_its_sliders_and_says_why_it_is_refused(svc, monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("this participant already has 2 requests in flight")

    monkeypatch.setattr(svc, "send", refuse)  # what the generator calls at each arrival
    at = app("playground.py")
    at.slider(key="lg_rate").set_value(0.1).run()
    at.button(key="lg_toggle").click().run()
    gen = loadgen.running()
    assert gen is not None and gen.rate == 0.1
    at.slider(key="lg_rate").set_value(8.0).run()  # while it runs: the next arrival comes at the new rate
    assert loadgen.running() is gen and gen.rate == 8.0
    deadline = time.monotonic() + 10
    while gen.refused < 3 and time.monotonic() < deadline:  # at 0.1/s the first gap would be ~10 s
        time.sleep(0.05)
    at.button(key="lg_toggle").click().run()
    assert loadgen.running() is None and at.button(key="lg_toggle").label == "Start generator"
    gen.join(5)
    at.run()
    warning = next(w.value for w in at.warning if w.value.startswith("Generator"))
    assert re.fullmatch(rf"Generator stopped: 0 sent, {gen.refused} refused\. Last refusal: this participant "
                        r"already has 2 requests in flight", warning)


def test_viewer_in_a_room_gets_no_controls_but_can_submit(svc, monkeypatch):
    """Room mode without the presenter cookie: no playback, settings, lane change, load generator
    or benchmark; each place says why; prompts and the scenario's stream still go in, within limits."""
    from engine.room.access import Access
    monkeypatch.setattr(svc, "access", Access(room=True, token="presenter-token-xyz"))
    at = app("playground.py")
    labels = {b.label for b in at.sidebar.button}
    assert not labels & {"Pause", "Resume", "Step", "Clear views", "Apply", "Apply lanes"}
    compare = at.sidebar.radio(key="compare")
    assert compare.disabled and compare.value == "Steady Poisson load: continuous vs dynamic"
    assert "presenter" in compare.help
    assert "viewer" in at.sidebar.info[0].value and "presenter" in at.sidebar.info[0].value
    assert next(b for b in at.button if "generator" in b.label).disabled
    cursor = svc.hub.head
    next(b for b in at.button if b.label == "Run scenario").click().run()  # a submission, not control
    assert not at.exception and len(request_events(svc, cursor, 2)) >= 2
    runner = at.session_state["stream"]
    runner.join(30)
    assert runner.client.key != "local" and not runner.client.presenter  # held to the room's limits
    bench = app("benchmark.py")
    assert "viewer" in bench.info[0].value and not any(b.label == "Run benchmark" for b in bench.button)
    assert_all_free(svc)


def test_the_roofline_chart_colours_lanes_as_the_playground_and_labels_each_decade_once():
    """The KV page's roofline once drew lanes in plotly's colours, not the playground's, and its log axes read
    "2 / 1000 / 5". Its colours are the live view's palette by lane order, whatever order steps came in."""
    from pages.ui.roofline_panel import LANE_COLORS, roofline_chart
    palette = re.search(r"const PALETTE = \[([^\]]+)\]", Path("assets/live/common.js").read_text()).group(1)
    assert list(LANE_COLORS) == re.findall(r'"(#[0-9A-Fa-f]{6})"', palette)[:4]
    steps = {"static": [{"intensity": 3.0, "flops_per_s": 2e10}],
             "continuous": [{"intensity": 9.0, "flops_per_s": 6e10}]}
    fig = roofline_chart(steps, {"flops_per_s": 1e12, "bytes_per_s": 1e11}, ["continuous", "static"])
    colors = {t.name: t.marker.color for t in fig.data if t.mode == "markers"}
    assert colors == {"continuous": LANE_COLORS[0], "static": LANE_COLORS[1]}
    assert fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick == 1


def test_what_to_watch_says_so_far_while_a_lane_still_works(monkeypatch):
    from pages.ui import run_metrics
    summaries = {"continuous": {"duration_s": 4.0, "in_flight": 0}, "static": {"duration_s": 8.8, "in_flight": 3}}
    monkeypatch.setattr(run_metrics, "run_summary", lambda svc, m: summaries)
    line = run_metrics.headline_line(None, None, ("duration_s",), ["continuous", "static"])
    assert line == "Time for the run (so far): continuous 4.00 s · static 8.80 s"
    summaries["static"]["in_flight"] = 0
    assert run_metrics.headline_line(None, None, ("duration_s",), ["continuous", "static"]).startswith("Time for the run:")
