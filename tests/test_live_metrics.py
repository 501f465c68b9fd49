"""The playground's metric cards: computed from the service's events, equal to the requests' own timings."""
from __future__ import annotations

import pytest

from engine_helpers import greedy
from service_helpers import assert_all_free, make_service
from ui.metrics import LiveMetrics, ratio


@pytest.fixture(scope="module")
def svc(tiny_model_dirs):
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous", "static"), static_batch_size=4)
    yield s
    s.stop()


def test_metrics_match_request_outputs(svc):
    handles = [h for i in range(4) for h in svc.submit([5 + i] * (3 + i), greedy(4 + 2 * i))]
    outs = {(h.lane, h.request_id): h.result(60) for h in handles}
    assert_all_free(svc)
    m = LiveMetrics()
    m.consume(svc.hub)
    summary = m.summary()
    assert set(summary) == {"continuous", "static"}
    for strategy, r in summary.items():
        mine = [o for (s, _), o in outs.items() if s == strategy]
        assert r["completed"] == 4 and r["in_flight"] == 0
        assert r["output_tokens"] == sum(len(o.output_token_ids) for o in mine)
        ttfts = sorted(o.first_token_s - o.arrival_s for o in mine)
        assert r["ttft_p50_s"] == pytest.approx((ttfts[1] + ttfts[2]) / 2)
        steps = [e["event"] for _, e in svc.hub.read(0).events if e["type"] == "step" and e["lane"] == strategy]
        decoding = [ev.duration_s for ev in steps if any(x.phase == "decode" for x in ev.entries)]
        assert r["max_decode_step_s"] == pytest.approx(max(decoding))  # the longest wait for a next token
    # static pads prompts of 3..6 tokens and keeps finished rows: padding is wasted, continuous has none
    assert summary["static"]["padding_waste_pct"] > 0
    assert summary["continuous"]["padding_waste_pct"] == 0


def test_clear_forgets_the_past(svc):
    svc.submit([5, 6], greedy(2), lanes=["continuous"])[0].result(30)
    m = LiveMetrics()
    m.consume(svc.hub)
    m.clear(svc.clock())
    m.consume(svc.hub)
    assert m.summary() == {}
    assert_all_free(svc)


def test_ratio():
    assert ratio(4.0, 2.0) == 2.0 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None
