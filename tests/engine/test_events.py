"""The event contract (engine.events): each event's wire dict, and the contract the browser reads."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.events import (ENTRY_FIELDS, EVENTS, PHASES, REMOTE, Event, FinishedEvent, GpuEvent, LanesEvent,
                           RemoteMetricsEvent, RequestEvent, StatusEvent, StepEntry, StepMessage, full_entries,
                           sampled_ids, wire_contract)
from engine.events_check import check_event
from engine.request import RequestOutput
from engine.events import StepEvent

SAMPLES = [
    RequestEvent(request_id=3, tag="ui", prompt="hi", messages=None, num_prompt_tokens=2, max_tokens=8,
                 arrival_s=1.5, priority=-2, tenant="team-a", name="Ada", strategy="continuous"),
    FinishedEvent(request_id=3, finish_reason="length", error=None, text="ab", num_prompt_tokens=2,
                  num_output_tokens=8, arrival_s=1.5, first_token_s=1.6, finish_s=2.0, strategy="static"),
    StatusEvent(event="configure_failed", error="bad block size", strategy="continuous"),
    StatusEvent(event="progress", message="loading", t=0.5),
    GpuEvent(t=1.0, util_pct=73, mem_used_mb=100.0, mem_total_mb=200.0),
    LanesEvent(lanes={"fast": {"strategy": "continuous", "block_size": 16}}),
    RemoteMetricsEvent(t=2.0, num_running=3.0, num_waiting=0.0, kv_usage=None, lane="vllm", strategy=REMOTE),
]


def step_event() -> StepEvent:
    return StepEvent(step=4, strategy="continuous", t_start=1.0, t_end=1.25,
                     entries=[StepEntry(7, "decode", 1, 12, 0), StepEntry(8, "prefill", 3, 11, 1, cached_tokens=8)],
                     num_waiting=1, num_running=2, admitted=[8], finished=[], preempted=[], tokens_used=4,
                     token_budget=64, num_blocks=8, block_size=4, used_blocks=5,
                     block_tables={7: [0, 1, 2], 8: [0, 1, 3]}, kv_tokens={7: 12, 8: 11}, reserved_unused_slots=1,
                     sampled={7: 42}, cached_blocks=[5, 6], prefix_queries=11, prefix_hits=8)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: f"{e.TYPE}-{getattr(e, 'event', '')}")
def test_to_dict_round_trips_through_json(event):
    wire = json.loads(json.dumps(event.to_dict()))
    assert wire["type"] == event.TYPE
    assert type(event)(**{k: v for k, v in wire.items() if k != "type"}) == event


def test_wire_keys_are_the_ones_clients_read():
    request, finished, failed, progress, gpu, lanes, remote = (e.to_dict() for e in SAMPLES)
    assert set(request) == {"type", "request_id", "tag", "prompt", "messages", "num_prompt_tokens", "max_tokens",
                            "arrival_s", "priority", "tenant", "name", "strategy"}
    assert set(finished) == {"type", "request_id", "finish_reason", "error", "text", "num_prompt_tokens",
                             "num_output_tokens", "arrival_s", "first_token_s", "finish_s", "num_cached_tokens",
                             "strategy"}
    assert failed == {"type": "status", "event": "configure_failed", "error": "bad block size",
                      "strategy": "continuous"}
    # service-wide events name no strategy: every subscriber gets them
    assert progress == {"type": "status", "event": "progress", "message": "loading", "t": 0.5}
    assert gpu == {"type": "gpu", "t": 1.0, "util_pct": 73, "mem_used_mb": 100.0, "mem_total_mb": 200.0}
    assert lanes == {"type": "lanes", "lanes": {"fast": {"strategy": "continuous", "block_size": 16}}}
    assert remote == {"type": "remote_metrics", "t": 2.0, "num_running": 3.0, "num_waiting": 0.0, "kv_usage": None,
                      "lane": "vllm", "strategy": "remote"}


_ENTRY = st.builds(StepEntry, request_id=st.integers(0, 10**6), phase=st.sampled_from(PHASES),
                   num_tokens=st.integers(0, 3), context_len=st.integers(0, 10**5), slot=st.integers(-1, 6),
                   cached_tokens=st.integers(0, 2), drafted=st.integers(0, 2), accepted=st.integers(0, 2))


@given(st.lists(st.one_of(_ENTRY, st.builds(lambda rid, ctx: (rid, ctx), st.integers(0, 10**6),
                                             st.integers(0, 10**5))), max_size=12))
def test_entries_on_the_wire_are_the_steps_rows_whatever_they_hold(drawn):
    """Plain decode rows go short ([request_id, context_len]) and every other row whole; written out again
    they are the step's entries, in order, and the event passes the check an upload gets."""
    entries = [e if isinstance(e, StepEntry) else StepEntry(e[0], "decode", 1, e[1], i) for i, e in enumerate(drawn)]
    ev = dataclasses.replace(step_event(), entries=entries)
    wire = json.loads(json.dumps(StepMessage(event=ev, strategy="continuous", lane="a").to_dict()))
    assert full_entries(wire["entries"]) == [e.to_list() for e in entries]
    plain = [e.phase == "decode" and e.num_tokens == 1 and e.slot == i
             and not (e.cached_tokens or e.drafted or e.accepted) for i, e in enumerate(entries)]
    assert [len(e) == 2 for e in wire["entries"]] == plain
    check_event(wire)


@given(st.lists(st.builds(lambda rid, short: (rid, short), st.integers(0, 40), st.booleans()), max_size=12,
                unique_by=lambda r: r[0]),
       st.sets(st.integers(0, 60), max_size=12))
def test_the_requests_sampled_for_come_back_whole_from_a_steps_short_form(rows, sampled):
    """Short entries mostly all sample: the wire lists only the others (`sampled`) and the short ones that did
    not (`unsampled`, a failed step); read back, the same requests, and an older recording's
    full list (no `unsampled`) reads as it is."""
    entries = [StepEntry(rid, "decode", 1, 9, i if short else -1) for i, (rid, short) in enumerate(rows)]
    ev = dataclasses.replace(step_event(), entries=entries, sampled=dict.fromkeys(sampled, 5))
    wire = json.loads(json.dumps(StepMessage(event=ev, strategy="continuous", lane="a").to_dict()))
    got = sampled_ids(wire)
    assert sorted(got) == sorted(sampled) and len(got) == len(set(got))
    if all(short for _, short in rows) and {rid for rid, _ in rows} == sampled:  # a steady decode step
        assert wire["sampled"] == wire["unsampled"] == []
    check_event(wire)
    old = {k: v for k, v in wire.items() if k != "unsampled"} | {"sampled": [str(r) for r in sampled]}
    assert sorted(sampled_ids(old)) == sorted(sampled)


def test_step_message_is_the_step_event_plus_text_deltas():
    msg = StepMessage(event=step_event(), deltas={7: "x"}, strategy="continuous")
    wire = json.loads(json.dumps(msg.to_dict()))
    assert wire["type"] == "step" and wire["strategy"] == "continuous" and wire["deltas"] == {"7": "x"}
    assert wire["entries"] == [[7, 12], [8, "prefill", 3, 11, 1, 8, 0, 0]]  # a plain decode row's short
    assert full_entries(wire["entries"]) == [[7, "decode", 1, 12, 0, 0, 0, 0], [8, "prefill", 3, 11, 1, 8, 0, 0]]
    entry = dict(zip(ENTRY_FIELDS, wire["entries"][1]))
    assert entry == {"request_id": 8, "phase": "prefill", "num_tokens": 3, "context_len": 11, "slot": 1,
                     "cached_tokens": 8, "drafted": 0, "accepted": 0}
    assert wire["kv"]["block_tables"] == {"7": [0, 1, 2], "8": [0, 1, 3]} and wire["kv"]["reserved_unused_slots"] == 1
    # prefix caching: evictable blocks on the wire; shared ones are derived from the tables
    assert wire["kv"]["cached"] == [5, 6] and (wire["prefix_queries"], wire["prefix_hits"]) == (11, 8)
    assert msg.event.shared_blocks == {0: 2, 1: 2}
    # the hub keeps the event itself; its wire form is built once, on first use, and shared
    assert msg.wire() is msg.wire() and msg.wire() == msg.to_dict() and json.loads(msg.json()) == wire


def test_finished_event_of_an_output():
    out = RequestOutput(request_id=5, prompt_token_ids=[1, 2, 3], output_token_ids=[4, 5], text="de",
                        finish_reason="stop", arrival_s=1.0, first_token_s=1.1, finish_s=1.2)
    ev = FinishedEvent.of(out)
    assert (ev.request_id, ev.num_prompt_tokens, ev.num_output_tokens, ev.text, ev.finish_reason) == (5, 3, 2, "de",
                                                                                                   "stop")


def test_every_event_carries_the_common_fields():
    common = {f.name for f in dataclasses.fields(Event)}
    for cls in EVENTS:
        assert common <= {f.name for f in dataclasses.fields(cls)}, cls


def test_wire_contract_names_entry_fields_and_phases():
    c = json.loads(json.dumps(wire_contract()))
    assert c["entry_fields"] == list(ENTRY_FIELDS) == [f.name for f in dataclasses.fields(StepEntry)]
    assert c["phases"] == list(PHASES) == ["prefill", "decode", "padding"]
    assert c["event_types"] == [e.TYPE for e in EVENTS] and c["remote_strategy"] == REMOTE
    assert {e.TYPE for e in EVENTS} == {"step", "request", "finished", "status", "waits", "gpu", "lanes",
                                        "remote_metrics"}
    assert set(c["wait_reasons"]) >= {"batch_full", "token_budget", "kv_blocks", "batch_filling", "batch_running",
                                      "behind", "preempted_for_blocks", "preempted_by_priority"}
