"""Hand-made events as the hub holds them, for tests of its readers (fields a test leaves out get
plausible values)."""
from __future__ import annotations

from engine.event_hub import EventHub
from engine.events import FinishedEvent, RequestEvent, StepEntry, StepEvent, StepMessage


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


BS = 4  # the block size of kv_step's events


def kv_step(n: int, tables: dict[int, list[int]], kv_tokens: dict[int, int], entries=(), cached=(), queries=0,
         hits=0) -> StepEvent:
    used = len({b for t in tables.values() for b in t})
    return StepEvent(step=n, strategy="continuous", t_start=0.1 * n, t_end=0.1 * n + 0.05, entries=list(entries),
                     num_waiting=0, num_running=len(tables), admitted=[], finished=[], preempted=[], tokens_used=0,
                     token_budget=32, num_blocks=16, block_size=BS, used_blocks=used, block_tables=tables,
                     kv_tokens=kv_tokens, reserved_unused_slots=0, cached_blocks=list(cached),
                     prefix_queries=queries, prefix_hits=hits)


def hub_with(*events: StepEvent, lane: str = "cached") -> EventHub:
    hub = EventHub()
    hub.publish(request_event(1, lane, prompt=10, max_tokens=6))
    for ev in events:
        hub.publish(StepMessage(event=ev, lane=lane))
    return hub


# KV accounting's two steps (tests of the KV page): #1 computes a 10-token prompt (blocks 0-2); #2 then hits its first two full blocks (8 tokens) and
# adds block 3; blocks 7 and 9 are cached-evictable, 9 the least recently used.
FIRST = kv_step(0, {1: [0, 1, 2]}, {1: 10}, entries=[StepEntry(1, "prefill", 10, 10, 0)], cached=[9, 7], queries=10)
SECOND = kv_step(1, {1: [0, 1, 2], 2: [0, 1, 3]}, {1: 11, 2: 10},
              entries=[StepEntry(1, "decode", 1, 11, 0), StepEntry(2, "prefill", 2, 10, 1, cached_tokens=8)],
              cached=[9, 7], queries=10, hits=8)
