"""What a lane publishes is what the socket and the recorder send: each step's KV as the changes since the
last step the lane published for that pool. Folded in order, they are the engines' tables at every step,
also where a lane leaves steps unpublished (a static batch filling up, a disaggregated half that stalls)."""
from __future__ import annotations

import dataclasses

from engine import EngineConfig, SamplingParams
from engine.serving.service import EngineService
from engine_helpers import whole_kv


def test_every_published_step_folds_into_the_engines_tables(tiny_model_dirs):
    base = EngineConfig(model=str(tiny_model_dirs["llama"]), device="cpu", dtype="float32", block_size=4,
                        num_kv_blocks=40, max_model_len=64, max_num_seqs=4, max_num_batched_tokens=16,
                        static_batch_size=3, static_max_wait_s=0.05)
    lanes = {"continuous": base, "static": dataclasses.replace(base, strategy="static"),
             "split": dataclasses.replace(base, disaggregated=True)}
    svc = EngineService(base, lanes=lanes)
    published = []
    svc.hub.add_listener(lambda ev: ev.TYPE == "step" and published.append(ev))
    try:
        svc.wait_ready(120)
        handles = [h for i in range(9) for h in svc.submit([5 + i] * (6 + 3 * i), SamplingParams(
            max_tokens=4 + 2 * (i % 4), ignore_eos=True))]
        for h in handles:
            h.result(60)
    finally:
        svc.stop()
    assert {m.lane for m in published} == set(lanes) and {m.event.part for m in published} >= {"prefill", "decode"}
    assert any(not m.kv_is_key for m in published)
    sent = whole_kv([m.wire() for m in published])
    for m, folded in zip(published, sent):
        assert folded["kv"] == m.key_wire()["kv"], (m.lane, m.event.part, m.event.step)
