"""One lane's iteration -> what is notable in it, as plain sentences ranked by interest (lower first).

Pure functions over a StepEvent and the lane's state *before* the step is applied to it."""
from __future__ import annotations

from dataclasses import dataclass

from engine.events import DECODE, PADDING, PREFILL
from engine.scheduler import waits

from .lane_state import LaneState

LONG_PREFILL = 256  # tokens: a prompt long enough that how it is prefilled is worth a sentence
LONG_WAIT_S = 5.0   # a lane that only waits (a static batch filling up) this long is worth a sentence
PREEMPTED, RECOMPUTE, JUMP, PREFIX_HIT, CHUNKED, WHOLE_PREFILL, SLOT_REUSE, PADDING_ROWS, LONG_WAIT = range(9)


@dataclass(frozen=True)
class Candidate:
    rank: int
    kind: str
    request_id: int | None
    text: str


def ids(rids) -> str:
    """'#3', '#3 and #4', '#3, #4 and 2 more'."""
    tags = [f"#{r}" for r in rids]
    if len(tags) > 3:
        return f"{', '.join(tags[:2])} and {len(tags) - 2} more"
    return tags[0] if len(tags) == 1 else f"{', '.join(tags[:-1])} and {tags[-1]}"


def step_candidates(ev, st: LaneState) -> list[Candidate]:
    out = [*_preempted(ev), *_jumps(ev, st), *_slot_reuse(ev, st), *_padding(ev, st)]
    decoding = sum(e.phase == DECODE for e in ev.entries)
    for e in ev.entries:
        if e.phase == PREFILL:
            out += _prefill(ev, e, st, decoding)
    return [c for c in out if (c.kind, c.request_id) not in st.told]


def _preempted(ev) -> list[Candidate]:
    if not ev.preempted:
        return []
    one = len(ev.preempted) == 1
    was, its = ("was", "its") if one else ("were", "their")
    why = ev.waits.get(ev.preempted[0]) or {}  # the scheduler's own reason (one for every victim of a step)
    if why.get("why") == waits.PREEMPTED_BY_PRIORITY:
        text = f"{ids(ev.preempted)} {was} {waits.say(why)}"
    else:
        whom = f" for {why['whom']}" if why.get("by") is not None else ""
        text = (f"the KV pool is full ({ev.used_blocks} of {ev.num_blocks} blocks): {ids(ev.preempted)} {was} "
                f"preempted, {its} blocks freed{whom}")
    return [Candidate(PREEMPTED, "preempted", None, f"{text}; {'it' if one else 'they'} will recompute {its} "
                      "tokens later")]


def long_wait(st: LaneState, now: float) -> Candidate | None:
    """A lane that has computed nothing for LONG_WAIT_S while a request waits for a batch to fill."""
    idle_since = max(st.last_compute_s or float("-inf"), min(st.wait_since.values(), default=now))
    filling = [(rid, w) for rid, w in st.waits.items() if w.get("why") == waits.BATCH_FILLING]
    if not filling or now - idle_since < LONG_WAIT_S:
        return None
    rid, w = min(filling)
    return Candidate(LONG_WAIT, "long_wait", rid, f"#{rid} has waited {now - idle_since:.0f} s, {waits.say(w, now)}: "
                     "this lane launches only full batches; the presenter can launch this one now (Launch)")


def _prefill(ev, e, st: LaneState, decoding: int) -> list[Candidate]:
    req = st.req(e.request_id)
    rid, prompt = e.request_id, req and req.prompt_len
    if rid in st.preempted:
        return [Candidate(RECOMPUTE, "recompute", rid, f"#{rid} is back after its preemption: recomputing "
                          f"{e.context_len:,} tokens it had already computed once")]
    if e.cached_tokens and prompt:
        return [Candidate(PREFIX_HIT, "prefix_hit", rid, f"#{rid} took {e.cached_tokens:,} of its {prompt:,} prompt "
                          "tokens from the prefix cache and prefills only the rest")]
    if not prompt or prompt < LONG_PREFILL or not decoding:
        return []
    if e.context_len < prompt:
        return [Candidate(CHUNKED, "chunked", rid, f"#{rid}'s {prompt:,}-token prompt is being prefilled in "
                          f"{e.num_tokens:,}-token chunks while {_n(decoding, 'request')} keep decoding")]
    if e.num_tokens >= prompt:
        return [Candidate(WHOLE_PREFILL, "whole_prefill", rid, f"#{rid}'s {prompt:,}-token prompt was prefilled "
                          f"whole in one {1000 * (ev.t_end - ev.t_start):,.0f} ms iteration: "
                          f"{_n(decoding, 'decoding request')} waited that long for the next token")]
    return []


def _jumps(ev, st: LaneState) -> list[Candidate]:
    """An admitted request that started ahead of one that arrived earlier and still waits."""
    for rid in ev.admitted:
        req = st.waiting.get(rid)
        if req is None or rid in st.preempted:
            continue
        passed = [w for w in st.waiting.values() if w.arrival_s < req.arrival_s and w.request_id not in ev.admitted]
        if passed:
            return [Candidate(JUMP, "jump", rid, f"#{rid} started ahead of {_passed(passed)}: {_why(req, passed, st)}")]
    return []


def _passed(passed) -> str:
    return f"#{passed[0].request_id}, which arrived earlier" if len(passed) == 1 else \
        f"{len(passed)} requests that arrived earlier"


def _why(req, passed, st: LaneState) -> str:
    if st.policy == "sjf":
        return f"it asks {req.max_tokens} tokens, #{passed[0].request_id} {passed[0].max_tokens} (shortest job first)"
    if st.policy == "fair" and req.tenant is not None:
        return f"its tenant {req.tenant} had fewer requests running (fair share per tenant)"
    if st.policy == "priority":
        return f"its priority {req.priority} is more urgent (lower runs first)"
    return f"{st.policy} order"


def _slot_reuse(ev, st: LaneState) -> list[Candidate]:
    # continuous only: a freed row is refilled at once from the queue, not at the next batch
    if st.strategy != "continuous" or not ev.admitted:
        return []
    if ev.finished:
        return [Candidate(SLOT_REUSE, "slot_reuse", None, f"{ids(ev.finished)} finished and "
                          f"{ids(ev.admitted)} took the free slot in the same iteration")]
    if st.prev_finished:
        return [Candidate(SLOT_REUSE, "slot_reuse", None, f"{ids(ev.admitted)} took the slot that "
                          f"{ids(st.prev_finished)} freed in the previous iteration; nothing waits for the batch")]
    return []


def _padding(ev, st: LaneState) -> list[Candidate]:
    # static/dynamic: finished rows stay in the launched batch and are still computed
    rows = {e.request_id for e in ev.entries}
    done = sorted({e.request_id for e in ev.entries if e.phase == PADDING and e.request_id not in st.waiting
                   and e.request_id not in st.running})
    if not done or st.strategy == "continuous":
        return []
    verb = "finished but its row is" if len(done) == 1 else "finished but their rows are"
    are = "is" if len(done) == 1 else "are"
    return [Candidate(PADDING_ROWS, "padding", None, f"{ids(done)} {verb} still computed; {len(done)} of "
                      f"{len(rows)} rows {are} padding")]


def _n(count: int, noun: str) -> str:
    """'1 request', '3 requests'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
