"""Page logic with Streamlit's AppTest (no browser): controls reach the service, pages render cleanly."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.service import get_service, shutdown_service
from service_helpers import assert_all_free, make_service

PAGES = Path(__file__).resolve().parents[1] / "pages"


@pytest.fixture(scope="module")
def svc(tiny_model_dirs):
    shutdown_service()
    s = get_service(lambda: make_service(tiny_model_dirs["llama"], strategies=("continuous", "dynamic"),
                                         static_batch_size=8, max_model_len=512, num_kv_blocks=1024))
    yield s
    s.resume()
    shutdown_service()


def app(page: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / page), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def request_events(svc, since: int, want: int) -> list[dict]:
    deadline = time.monotonic() + 10  # a worker publishes "request" just after accepting
    while True:
        events = [e for _, e in svc.hub.read(since).events if e["type"] == "request"]
        if len(events) >= want or time.monotonic() > deadline:
            return events
        time.sleep(0.02)


def test_playground_burst_reaches_both_engines(svc):
    at = app("playground.py")
    cursor = svc.hub.head
    next(b for b in at.button if b.label.startswith("Burst of 8")).click().run()
    assert not at.exception
    # The tiny model's 512-token context can refuse a long prompt + 256 tokens: shown as an error.
    rejected = [e.value for e in at.error]
    assert all("max_model_len" in r for r in rejected) and len(rejected) < 8
    events = request_events(svc, cursor, 2 * (8 - len(rejected)))
    assert len(events) == 2 * (8 - len(rejected)) and {e["strategy"] for e in events} == {"continuous", "dynamic"}
    assert {e["tag"] for e in events} == {"burst"}
    assert_all_free(svc)


def test_strategy_toggle_and_playback_controls(svc):
    at = app("playground.py")
    at.sidebar.radio(key="view").set_value("Continuous").run()
    assert svc.strategies == ["continuous"]
    next(b for b in at.sidebar.button if b.label == "Pause").click().run()
    assert svc.paused.is_set()
    next(b for b in at.sidebar.button if b.label == "Resume").click().run()
    assert not svc.paused.is_set()
    at.sidebar.slider(key="slow_motion").set_value(0.25).run()
    assert svc.min_interval_s == 0.25
    at.sidebar.slider(key="slow_motion").set_value(0.0).run()
    at.sidebar.radio(key="view").set_value("Side by side").run()
    assert svc.strategies == ["continuous", "dynamic"]
    at.sidebar.radio(key="baseline").set_value("static").run()
    assert svc.strategies == ["continuous", "static"]
    at.sidebar.radio(key="baseline").set_value("dynamic").run()
    assert not at.exception


def test_engine_settings_apply_through_service(svc):
    at = app("playground.py")
    at.sidebar.slider[[s.label for s in at.sidebar.slider].index("Max batch (sequences)")].set_value(4)
    next(b for b in at.sidebar.button if b.label == "Apply").click().run()
    deadline = time.monotonic() + 30
    while svc.workers["continuous"].engine.cfg.max_num_seqs != 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert svc.cfg.max_num_seqs == 4 and svc.workers["continuous"].engine.cfg.max_num_seqs == 4


def test_metric_cards_computed_from_events(svc):
    hs = svc.submit([5, 6, 7], None, lanes=["continuous"])
    hs[0].result(30)
    at = app("playground.py")
    cards = "".join(m.value for m in at.markdown)
    values = dict(re.findall(r'data-label="([^"]+)" data-value="([^"]*)"', cards))
    assert {"Throughput", "TTFT p50", "TPOT p99", "Padding waste", "KV waste"} <= set(values)
    assert int(values["Requests done"]) >= 1 and values["Throughput"].endswith(" tok/s")


@pytest.mark.parametrize("page", ["about.py", "kv_cache.py", "benchmark.py"])
def test_other_pages_render(svc, page):
    app(page)


def test_benchmark_page_runs_in_background_and_shows_results(svc):
    at = app("benchmark.py")
    at.selectbox[0].set_value("tiny")
    at.multiselect[0].set_value(["continuous", "static"])
    next(b for b in at.button if b.label == "Run benchmark").click().run()
    assert not at.exception
    from ui import bench_job
    job = bench_job.current()
    job.join(120)
    assert job.error is None and job.result is not None
    assert [r["strategy"] for r in job.result["results"]] == ["continuous", "static"]
    assert not svc.paused.is_set()  # the live engines resume after the run
    at.run()
    assert not at.exception
    assert any("Results" in h.value for h in at.subheader)
    assert len(at.dataframe) == 1


def test_viewer_in_a_room_gets_no_controls_but_can_submit(svc, monkeypatch):
    """Room mode without the presenter cookie: no playback, settings, strategy change, load generator
    or benchmark; each place says why; prompts still go in, within the viewer limits."""
    from engine.access import Access
    monkeypatch.setattr(svc, "access", Access(room=True, token="presenter-token-xyz"))
    at = app("playground.py")
    labels = {b.label for b in at.sidebar.button}
    assert not labels & {"Pause", "Resume", "Step", "Clear views", "Apply"}
    assert at.sidebar.radio(key="view").disabled
    assert "viewer" in at.sidebar.info[0].value and "presenter" in at.sidebar.info[0].value
    assert next(b for b in at.button if "generator" in b.label).disabled
    cursor = svc.hub.head
    next(b for b in at.button if b.label == "1 prompt").click().run()
    assert not at.exception and len(request_events(svc, cursor, 2)) == 2
    bench = app("benchmark.py")
    assert "viewer" in bench.info[0].value and not any(b.label == "Run benchmark" for b in bench.button)
    assert_all_free(svc)
