"""A lane tells what its engine runs on and how it warmed up: the status while the warm-up goes on (what the
page's banner shows), then the attention backend and why, the warm-up's forwards, and what serving compiled."""
from __future__ import annotations

from engine import SamplingParams
from engine.events import StatusEvent
from service_helpers import make_service


def test_a_lane_says_it_warms_up_then_what_it_runs_on(tiny_model_dirs):
    svc = make_service(tiny_model_dirs["llama"], strategies=("continuous",), warmup=True)
    try:
        status = svc.status()["engines"]["continuous"]
        assert (status["attention"], status["attention_why"]) == ("torch", "auto: the PyTorch reference off a GPU")
        assert status["cuda_graphs"] == "off" and status["warming_up"] is None and status["kernel_compiles"] == 0
        assert status["warmup"]["batches"] == ["decode row", "prefill of 64 tokens"]
        told = [e.message for _, e in svc.hub.read(0).events if isinstance(e, StatusEvent) and e.event == "progress"]
        assert told[-2:] == ["Warming up lane 'continuous': decode row (1 of 2)",
                             "Warming up lane 'continuous': prefill of 64 tokens (2 of 2)"]
        [handle] = svc.submit([5, 6, 7], SamplingParams(max_tokens=3, ignore_eos=True))
        assert len(handle.result(timeout=30).output_token_ids) == 3
    finally:
        svc.stop()
