"""The one outgoing JSON encoder never fails: whatever text or number a bug lets into an event, the socket,
the trace and recordings still get valid JSON that encodes as UTF-8 (fuzzed with hypothesis)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.harness import fuzz
from engine.events import FinishedEvent, RequestEvent, StatusEvent, StepEntry, StepMessage
from engine.events import StepEvent
from engine.wire_json import dumps


def strict(text: str):
    """Parsed as a browser's JSON.parse would: no NaN or Infinity."""
    text.encode("utf-8")
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the wire JSON"))


def test_what_json_cannot_carry_is_repaired_not_raised():
    out = strict(dumps({"a": "x\ud800y", "b": float("nan"), "c": np.int64(3), "d": np.float32(1.5),
                        "e": [float("inf")], 3: object.__new__(object)}))
    assert out["a"] == "x\ufffdy" and out["b"] is None and out["c"] == 3 and out["d"] == 1.5
    assert out["e"] == [None] and isinstance(out["3"], str)
    cycle = []
    cycle.append(cycle)
    assert strict(dumps(cycle))


def _value(rnd, kind):
    """A nasty value of roughly the field's kind (the encoder must take whatever a bug might put there)."""
    v = fuzz.nasty(rnd)
    if isinstance(v, fuzz.Raw):
        v = rnd.choice((float("nan"), float("inf"), -float("inf"), 10**40))
    return v if rnd.random() < 0.7 else kind


@settings(max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(rnd=st.randoms(use_true_random=False))
def test_encoding_an_event_never_fails(rnd):
    text = lambda: _value(rnd, "ok")  # noqa: E731
    num = lambda: _value(rnd, 1.0)  # noqa: E731
    events = [
        RequestEvent(request_id=1, tag=text(), prompt=text(), messages=[{"role": text(), "content": text()}],
                     num_prompt_tokens=3, max_tokens=4, arrival_s=num(), tenant=text(), name=text(), lane=text()),
        FinishedEvent(request_id=1, finish_reason=text(), error=text(), text=text(), num_prompt_tokens=3,
                      num_output_tokens=num(), arrival_s=num(), first_token_s=num(), finish_s=num()),
        StatusEvent(event=text(), t=num(), error=text(), message=text()),
        StepMessage(event=StepEvent(1, text(), num(), num(), [StepEntry(1, "decode", 1, 5)], 0, 1, [], [], [], 1, 8,
                                    16, 4, 1, {1: [0]}, {1: 5}, 0), deltas={1: text()},
                    roofline={"mem_util": num()}, lane=text()),
    ]
    for ev in events:
        strict(ev.json())
