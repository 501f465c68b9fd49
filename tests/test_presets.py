"""The one-click presets: their lanes differ as their names say, their streams fit any model."""
from __future__ import annotations

import pytest

from engine import EngineConfig
from engine.lanes import describe_difference
from ui import presets
from ui.presets import Fit

BASE = EngineConfig(model="m", device="cpu")


@pytest.mark.parametrize("preset", presets.PRESETS, ids=lambda p: p.name)
def test_lanes_differ_and_streams_fit_a_small_context(preset):
    a, b = preset.lane_configs(BASE).values()
    assert describe_difference(a, b) and describe_difference(b, a)
    for fit in (Fit(8192, 8), Fit(128, 4)):
        arrivals = preset.stream.fitted(fit)
        assert arrivals and all(x.prompt_len + x.max_tokens <= fit.max_model_len for x in arrivals)
        assert all(x.prompt_len >= 1 and x.max_tokens >= 1 for x in arrivals)
        for cfg in (a, b):  # no request waits forever for a full static batch or is refused unchunked
            if cfg.strategy == "static":
                assert len(arrivals) % fit.static_batch_size == 0
            if not cfg.enable_chunked_prefill:
                assert all(x.prompt_len + x.max_tokens <= cfg.max_num_batched_tokens for x in arrivals)


def test_chunked_prefill_preset_sends_a_long_prompt_while_short_ones_decode():
    arrivals = presets.by_name("chunked prefill on vs off").stream.fitted(Fit(8192, 8))
    long = [x for x in arrivals if x.prompt_len == presets.LONG_PROMPT]
    assert len(long) == 1 and long[0].at_s > 0
    assert sum(1 for x in arrivals if x.at_s < long[0].at_s) == 8


def test_default_stream_mixes_lengths_within_each_static_batch():
    arrivals = presets.DEFAULT.stream.fitted(Fit(8192, 8))
    for batch in (arrivals[:8], arrivals[8:]):
        outputs = [x.max_tokens for x in batch]
        assert max(outputs) >= 4 * min(outputs)


def test_running_preset_recognises_its_lanes():
    preset = presets.by_name("block size 16 vs 128")
    assert presets.running_preset(preset.lane_configs(BASE), BASE) is preset
    assert presets.running_preset({"continuous": BASE}, BASE) is None


POLICY_PRESETS = {"FCFS vs SJF": "sjf", "FCFS vs fair": "fair", "FCFS vs priority": "priority"}


@pytest.mark.parametrize("name,policy", POLICY_PRESETS.items())
def test_policy_presets_differ_only_by_policy_with_a_batch_small_enough_to_queue(name, policy):
    preset = presets.by_name(name)
    fcfs, other = preset.lane_configs(BASE).values()
    assert (fcfs.scheduling_policy, other.scheduling_policy) == ("fcfs", policy)
    assert describe_difference(other, fcfs) == [f"{policy} policy"]
    for fit in (Fit(8192, 8), Fit(128, 4)):
        assert len(preset.stream.fitted(fit)) > 2 * other.max_num_seqs  # requests queue


def test_sjf_stream_sends_long_requests_just_ahead_of_short_ones():
    arrivals = presets.by_name("FCFS vs SJF").stream.fitted(Fit(128, 4))
    long = [x for x in arrivals if x.max_tokens == max(a.max_tokens for a in arrivals)]
    short = [x for x in arrivals if x.at_s > max(a.at_s for a in long)]
    assert len(long) == 3 and len(short) == 6 and max(x.max_tokens for x in short) * 4 <= long[0].max_tokens
    assert not presets.by_name("FCFS vs SJF").stream.presenter_only  # a viewer may fire it


def test_fair_stream_floods_from_one_tenant_and_another_comes_later():
    stream = presets.by_name("FCFS vs fair").stream
    arrivals = stream.fitted(Fit(128, 4))
    flood = [x for x in arrivals if x.tenant == "flood"]
    few = [x for x in arrivals if x.tenant == "few"]
    assert len(flood) == 16 and len(few) == 3 and len(flood) + len(few) == len(arrivals)
    assert min(x.at_s for x in few) > max(x.at_s for x in flood)
    assert stream.presenter_only


def test_priority_stream_sends_one_urgent_request_after_a_queue():
    stream = presets.by_name("FCFS vs priority").stream
    arrivals = stream.fitted(Fit(128, 4))
    assert [x.priority for x in arrivals] == [0] * 12 + [-1] and arrivals[-1].at_s > arrivals[-2].at_s
    assert stream.presenter_only and not presets.DEFAULT.stream.presenter_only


def test_prefix_cache_preset_sends_one_system_prompt_to_lanes_that_differ_only_in_caching():
    preset = presets.by_name("prefix cache off vs on")
    lanes = preset.lane_configs(BASE)
    assert [c.enable_prefix_caching for c in lanes.values()] == [False, True]
    assert describe_difference(lanes["cache on"], lanes["cache off"]) == ["prefix cache on"]
    arrivals = preset.stream.fitted(Fit(2048, 8))
    prompts = [a.prompt(i) for i, a in enumerate(arrivals)]
    n = presets.SYSTEM_PROMPT
    assert all(p[:n] == prompts[0][:n] and len(p) == n + 16 for p in prompts)
    assert len({tuple(p[n:]) for p in prompts}) == len(prompts), "each asks its own question"
    small = preset.stream.fitted(Fit(128, 8))  # a small context shortens the shared part too
    assert all(a.shared_prefix < a.prompt_len <= 128 - a.max_tokens for a in small)
