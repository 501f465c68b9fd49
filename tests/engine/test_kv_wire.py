"""A step event's KV on the wire (engine/kv_wire.py): key frames, the changes between them, and which form
each reader gets. The engine's own events are checked in every random run (tests/engine/kv/
test_kv_invariants.py, check_wire_kv); these cover the arithmetic on arbitrary tables."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import DECODE, ENTRY_FIELDS, StepEntry, StepEvent, StepMessage, StepRows, with_continued_rows
from engine.kv_wire import AS_IS, ENTRY_CTX, ENTRY_RID, KEY, NO_KV, KvFrames, KvSync, fold_kv, is_key
from engine.workshop.recording.replayer import RecordedEvent
from engine.wire_json import dumps
from tiers import examples

tables = st.dictionaries(st.integers(0, 9), st.lists(st.integers(0, 63), max_size=8), max_size=6)
states = st.lists(st.tuples(tables, st.lists(st.integers(0, 63), max_size=4)), min_size=1, max_size=12)


def step(t: float, frames: KvFrames, tables: dict, cached: list, lane="a", part=None) -> StepMessage:
    """A step event of these tables; the rows of even request ids scheduled (their context_len, as the
    engine's, is their kv_tokens)."""
    tokens = {rid: 3 * len(t) + rid % 3 for rid, t in tables.items()}
    entries = [StepEntry(rid, DECODE, 1, n) for rid, n in tokens.items() if rid % 2 == 0]
    ev = StepEvent(step=1, strategy="continuous", t_start=t, t_end=t, entries=entries, num_waiting=0, num_running=0,
                   admitted=[], finished=[], preempted=[], tokens_used=0, token_budget=8, num_blocks=64,
                   block_size=4, used_blocks=sum(map(len, tables.values())), block_tables=tables, kv_tokens=tokens,
                   reserved_unused_slots=0, cached_blocks=cached, part=part)
    frames.stamp(ev)
    return StepMessage(event=ev, lane=lane, strategy="continuous")


@settings(max_examples=examples(200), deadline=None)
@given(seq=states, gap=st.sampled_from([0.01, 0.3, 2.0]))
def test_changes_fold_into_the_tables_whole(seq, gap):
    """Whatever the tables do between steps (grow, shrink, change, go, come back), folding each event's
    wire KV onto the previous snapshot gives the tables whole; a key frame at least every KEY_EVERY_S."""
    frames, folded, last_key = KvFrames(), None, None
    for i, (tabs, cached) in enumerate(seq):
        msg = step(i * gap, frames, tabs, cached)
        kv = msg.wire()["kv"]
        folded = fold_kv(folded, kv, msg.key_wire()["entries"])
        assert folded == msg.key_wire()["kv"]
        if is_key(kv):
            last_key = i * gap
        assert i * gap - last_key < frames.every_s or gap >= frames.every_s
    assert is_key(step(0.0, KvFrames(), {}, []).wire()["kv"])  # an engine's first event


def test_the_entry_positions_folding_reads_are_the_contracts():
    assert (ENTRY_FIELDS[ENTRY_RID], ENTRY_FIELDS[ENTRY_CTX]) == ("request_id", "context_len")


def test_an_unchanged_step_sends_no_tables():
    frames, tabs = KvFrames(), {1: [4, 5, 6], 2: [7]}
    step(0.0, frames, tabs, [3])
    kv = step(0.1, frames, dict(tabs), [3]).wire()["kv"]
    assert kv["tables"] == {} and kv["kv_tokens"] == {} and "cached" not in kv
    kv = step(0.2, frames, {1: [4, 5, 6, 8], 3: [9]}, [3]).wire()["kv"]
    assert kv["tables"] == {"1": [3, 8], "2": None, "3": [0, 9]}
    assert kv["kv_tokens"] == {"1": 13, "2": None, "3": 3}  # (even ids: their entry says it)
    kv = step(0.3, frames, {2: [1, 2]}, [3]).wire()["kv"]
    assert kv["kv_tokens"] == {"1": None, "3": None}


def test_a_step_left_unpublished_is_no_base():
    """A lane publishes only steps that did something; the next one's changes are against the last one it
    published (a worker stamps what it publishes), so a reader folds the tables whole."""
    frames, unpublished = KvFrames(), KvFrames()
    first = step(0.0, frames, {1: [4, 5], 2: [6]}, [])
    step(0.1, unpublished, {2: [6]}, [])  # request 1 freed in a step nobody is sent
    third = step(0.2, frames, {2: [6], 3: [7]}, [])
    folded = fold_kv(fold_kv(None, first.wire()["kv"]), third.wire()["kv"], third.key_wire()["entries"])
    assert folded == third.key_wire()["kv"] and "1" not in folded["block_tables"]


def test_each_reader_gets_a_key_frame_of_each_pool_first():
    """A live event goes in its key form to a reader that has no key frame of its pool (once); a recorded
    one (its recorded form only) goes without its KV until that pool's next key frame."""
    frames, parts = KvFrames(), ("prefill", "decode")
    first = {p: step(0.0, frames, {1: [2]}, [], part=p) for p in parts}
    later = {p: step(0.1, frames, {1: [2, 3]}, [], part=p) for p in parts}
    sync = KvSync()
    assert [sync.form(later["decode"]), sync.form(later["decode"]), sync.form(first["prefill"])] == [KEY, AS_IS, AS_IS]
    assert sync.form(later["prefill"]) == AS_IS
    sync.reset()
    assert sync.form(later["prefill"]) == KEY
    recorded = {n: RecordedEvent(_head(m), dumps(m.wire())) for n, m in (("key", first["decode"]),
                                                                       ("changes", later["decode"]))}
    sync = KvSync()
    assert [sync.form(recorded["changes"]), sync.form(recorded["key"]), sync.form(recorded["changes"])] == \
        [NO_KV, AS_IS, AS_IS]


def _head(msg: StepMessage) -> dict:
    from engine.workshop.recording.format import Events
    events = Events()
    events.add(0.0, msg.wire())
    return events.heads[0]


rows = st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["decode", "decode", "decode", "prefill"]),
                          st.sampled_from([0, 1, 1, 1, 2])), max_size=10, unique_by=lambda r: r[0])


@settings(max_examples=examples(300), deadline=None)
@given(seq=st.lists(rows, min_size=1, max_size=10), gap=st.sampled_from([0.01, 0.6]))
def test_rows_that_go_on_come_back_whole(seq, gap):
    """Whatever rows a pool's steps schedule (the same ones a token further, others, in another order,
    prefills), a reader that writes each step's runs out from the previous one's rows (StepRows) has every
    step's entries as sent whole; a steady decode step sends no entries, only a run."""
    frames, reader, ctx = KvFrames(), StepRows(), {}
    for i, sched in enumerate(seq):
        entries = []
        for slot, (rid, phase, grow) in enumerate(sched):
            ctx[rid] = ctx.get(rid, 5) + grow
            entries.append(StepEntry(rid, phase, 1 if phase == DECODE else 3, ctx[rid], slot))
        ev = StepEvent(step=i, strategy="continuous", t_start=i * gap, t_end=i * gap, entries=entries,
                       num_waiting=0, num_running=0, admitted=[], finished=[], preempted=[], tokens_used=0,
                       token_budget=8, num_blocks=64, block_size=4, used_blocks=0, block_tables={}, kv_tokens={},
                       reserved_unused_slots=0)
        frames.stamp(ev)
        msg = StepMessage(event=ev, lane="a", strategy="continuous")
        got = reader.resolve(json.loads(dumps(msg.wire())))
        assert got["entries"] == msg.key_wire()["entries"] and "cont" not in got and "cont" not in msg.key_wire()
    frames = KvFrames()
    for k in range(2):  # four rows, a token further each step
        ev = StepEvent(step=k, strategy="continuous", t_start=0, t_end=0, num_waiting=0, num_running=4,
                       entries=[StepEntry(r, DECODE, 1, 9 + k, r) for r in range(4)], admitted=[], finished=[],
                       preempted=[], tokens_used=4, token_budget=8, num_blocks=64, block_size=4, used_blocks=0,
                       block_tables={}, kv_tokens={}, reserved_unused_slots=0)
        frames.stamp(ev)
    wire = StepMessage(event=ev, lane="a", strategy="continuous").wire()
    assert wire["entries"] == [] and wire["cont"] == [[0, 0, 4]]


def test_a_reader_without_the_previous_rows_cannot_write_runs_out():
    assert with_continued_rows(None, {"entries": [[1, 5]], "cont": [[0, 0, 2]]}) is None
    assert with_continued_rows(None, {"entries": [[1, 5]]}) == [[1, 5]]
    prev = [[3, 7], [4, "prefill", 3, 9, 1, 0, 0, 0]]
    # runs past prev's rows are cut, and no more rows than prev holds ever go on
    assert with_continued_rows(prev, {"entries": [], "cont": [[0, 1, 9], [1, 0, 9]]}) == [[4, 10], [3, 8]]
    assert len(with_continued_rows(prev, {"entries": [], "cont": [[0, 0, 2]] * 1000})) == 2
