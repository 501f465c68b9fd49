"""Hand-made events as the hub holds them, for tests of its readers (fields a test leaves out get
plausible values)."""
from __future__ import annotations

from engine.events import FinishedEvent, RequestEvent


def request_event(rid: int, lane: str = "a", t: float = 0.0, prompt: int | None = 16, max_tokens: int = 8,
                  strategy: str = "continuous", **kw) -> RequestEvent:
    return RequestEvent(lane=lane, strategy=strategy, request_id=rid, tag=kw.pop("tag", "test"), prompt=None,
                        messages=None, num_prompt_tokens=prompt, max_tokens=max_tokens, arrival_s=t, **kw)


def finished_event(rid: int, lane: str = "a", t: float | None = 1.0, arrival: float = 0.0,
                   reason: str = "length", strategy: str = "continuous", first_token_s: float | None = None,
                   output_tokens: int = 8) -> FinishedEvent:
    return FinishedEvent(lane=lane, strategy=strategy, request_id=rid, finish_reason=reason, error=None, text="",
                         num_prompt_tokens=16, num_output_tokens=output_tokens, arrival_s=arrival,
                         first_token_s=first_token_s, finish_s=t)
