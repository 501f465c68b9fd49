"""Prefix caching as a lane setting: cache off and on side by side on one stream, the same text, the
hits on the wire and in the OpenAI usage."""
from __future__ import annotations

import dataclasses

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.api.server import create_app
from engine_helpers import greedy
from engine.events import FinishedEvent, StepMessage
from service_helpers import assert_all_free, make_service, serve, wait_settled

SYSTEM = [5 + (7 * k) % 90 for k in range(40)]  # a 40-token "system prompt": 10 full blocks of 4


@pytest.fixture(scope="module")
def svc(tiny_model_dirs):
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    off = s.cfg
    s.set_lanes({"cache off": off, "cache on": dataclasses.replace(off, enable_prefix_caching=True)})
    wait_settled(s)
    yield s
    s.stop()


def test_the_cache_on_lane_skips_the_shared_prefix_and_writes_the_same_text(svc):
    cursor = svc.hub.head
    first = svc.submit(SYSTEM + [11, 12], greedy(4))
    outs = [f.result(60) for f in first]
    second = svc.submit(SYSTEM + [13, 14, 15], greedy(4))
    outs2 = [f.result(60) for f in second]
    assert outs[0].output_token_ids == outs[1].output_token_ids
    assert outs2[0].output_token_ids == outs2[1].output_token_ids
    events = [e for _, e in svc.hub.read(cursor).events]
    finished = {(e.lane, e.request_id): e for e in events if isinstance(e, FinishedEvent)}
    rid = outs2[0].request_id
    assert finished["cache off", rid].num_cached_tokens == 0
    assert finished["cache on", rid].num_cached_tokens == 40
    hits = {lane: sum(e.event.prefix_hits for e in events if isinstance(e, StepMessage) and e.lane == lane)
            for lane in svc.lane_names}
    assert hits == {"cache off": 0, "cache on": 40}
    assert_all_free(svc)


def test_openai_usage_and_metrics_report_cached_prompt_tokens(svc):
    with serve(create_app(svc)) as addr, openai.OpenAI(base_url=f"http://{addr}/v1", api_key="none",
                                                       max_retries=0, timeout=60) as client:
        def ask():
            return client.completions.create(model="m", prompt=SYSTEM + [21, 22], max_tokens=2, temperature=0,
                                             extra_body={"lanes": ["cache on"], "ignore_eos": True})
        ask()
        before = httpx.get(f"http://{addr}/metrics", timeout=10).text
        again = ask()
        after = httpx.get(f"http://{addr}/metrics", timeout=10).text
    hits = [_sample(text, "vllm:prefix_cache_hits_total", "cache on") for text in (before, after)]
    assert hits[1] - hits[0] == 40
    assert again.usage.prompt_tokens == 42
    assert again.usage.prompt_tokens_details.cached_tokens == 40
    assert_all_free(svc)


def _sample(text: str, name: str, lane: str) -> float:
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name and s.labels.get("lane") == lane)
