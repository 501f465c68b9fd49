"""One lane's iteration -> what is notable in it, as plain sentences ranked by interest (lower first).

Pure functions over a StepEvent, the lane's previous one (st.prev) and the lane's state *before* the step
is applied to it. Every sentence is a claim the events prove: it names only requests the narrator saw
arrive, says of an iteration only what its event holds, and of the previous one only when that is the
lane's iteration just before (tests/narration_checker.py re-derives each claim from the events)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.events import DECODE, PADDING, PREFILL, SWAP_IN
from engine.scheduler import waits

from .lane_state import LaneState, Req

LONG_PREFILL = 256  # tokens: a prompt long enough that how it is prefilled is worth a sentence
LONG_WAIT_S = 5.0   # a lane that only waits (a static batch filling up) this long is worth a sentence
JUMP_POLICIES = ("sjf", "fair", "priority", "slo")  # the policies whose order a sentence can explain
SPEC_NOTABLE = 2    # accepted drafts: a row that gains this many tokens more than one in a step is worth a sentence
(PREEMPTED, RECOMPUTE, SWAPPED_IN, JUMP, PREFIX_HIT, CHUNKED, WHOLE_PREFILL, HANDED_OFF, SLOT_REUSE, PADDING_ROWS,
 LONG_WAIT, JOINED, SPECULATED) = range(13)


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
    out = [*_preempted(ev, st), *_swapped_in(ev, st), *_jumps(ev, st), *_slots(ev, st), *_padding(ev, st),
           *_speculated(ev, st), *_handed_off(ev, st)]
    prefills = [e for e in ev.entries if e.phase == PREFILL and st.known(e.request_id) is not None]
    decoding = len(_decoding(ev)) if prefills else 0
    for e in prefills:
        out += _prefill(ev, e, st, decoding)
    return [c for c in out if (c.kind, c.request_id) not in st.told]


def _decoding(ev) -> set[int]:
    """The requests that kept decoding (not those admitted now: a resumed one may decode at once on the
    prefix cache)."""
    return {e.request_id for e in ev.entries if e.phase == DECODE and e.request_id not in ev.admitted}


# ---- preemption ------------------------------------------------------------------------------
def _preempted(ev, st: LaneState) -> list[Candidate]:
    victims = [r for r in ev.preempted if st.known(r) is not None]
    if not victims:
        return []
    one = len(victims) == 1
    was, its, it = ("was", "its", "it") if one else ("were", "their", "they")
    reasons = [ev.waits.get(r) or {} for r in victims]  # the scheduler's own, in this step's changes
    text = f"{ids(victims)} {was} preempted{_preempted_why(reasons, st, its)}"
    if all(w.get("why") == waits.PREEMPTED_FOR_BLOCKS for w in reasons):
        text = f"the KV pool ran out of blocks: {text}"
    return [Candidate(PREEMPTED, "preempted", None, f"{text}; {_kv_went(reasons, it, its, one)}")]


def _kv_went(reasons: list[dict], it: str, its: str, one: bool) -> str:
    """Where the victims' KV went (the reasons' "kv"; recordings made before swap preemption have none)."""
    kv = {w.get("kv", waits.DROPPED) for w in reasons}
    if kv == {waits.SWAPPED}:
        return f"{its} KV {'was' if one else 'were'} copied to the host pool, to come back when {it} resume" + \
            ("s" if one else "")
    recompute = f"{it} will recompute {its} tokens later"
    if kv == {waits.DROPPED_HOST_FULL}:
        return f"the host pool is full: {recompute}"
    return recompute if kv == {waits.DROPPED} else f"some to the host pool, the others dropped: {recompute}"


def _swapped_in(ev, st: LaneState) -> list[Candidate]:
    """A preempted request whose KV came back from the host pool: it resumes where it was."""
    return [Candidate(SWAPPED_IN, "swapped_in", rid, f"#{rid} is back after its preemption: its "
                      f"{counted(n, 'KV block')} came back from the host pool, nothing recomputed")
            for rid, way, n in ev.swaps if way == SWAP_IN and st.known(rid) is not None]


def _preempted_why(reasons: list[dict], st: LaneState, its: str) -> str:
    """' to free its blocks for #3', ' by #3 (priority 0 over 1)', or '' when the victims' reasons differ."""
    codes, by = {w.get("why") for w in reasons}, {w.get("by") for w in reasons}
    whom = by.pop() if len(by) == 1 else None
    whom = whom if whom is not None and st.known(whom) is not None else None  # a request it saw arrive
    if codes == {waits.PREEMPTED_FOR_BLOCKS}:
        return f" to free {its} blocks" + ("" if whom is None else f" for #{whom}")
    if codes == {waits.PREEMPTED_BY_PRIORITY} and whom is not None and all(w == reasons[0] for w in reasons):
        return f" by #{whom} (priority {reasons[0]['by_priority']} over {reasons[0]['priority']})"
    return ""


# ---- prefills --------------------------------------------------------------------------------
def _prefill(ev, e, st: LaneState, decoding: int) -> list[Candidate]:
    rid, prompt = e.request_id, st.known(e.request_id).prompt_len
    if rid in st.preempted or rid in ev.preempted:  # a recompute (or a swap back): not its prompt's prefill
        return _recompute(ev, e, st)
    if e.cached_tokens and prompt and e.cached_tokens <= prompt:
        return [Candidate(PREFIX_HIT, "prefix_hit", rid, f"#{rid} took {e.cached_tokens:,} of its {prompt:,} prompt "
                          "tokens from the prefix cache and prefills only the rest")]
    if not prompt or prompt < LONG_PREFILL or not decoding:
        return []
    if e.context_len < prompt:
        return [Candidate(CHUNKED, "chunked", rid, f"#{rid}'s {prompt:,}-token prompt is prefilled a chunk at a "
                          f"time: {e.num_tokens:,} tokens this iteration, while {counted(decoding, 'request')} "
                          f"{'keeps' if decoding == 1 else 'keep'} decoding")]
    if e.num_tokens >= prompt:
        return [Candidate(WHOLE_PREFILL, "whole_prefill", rid, f"#{rid}'s {prompt:,}-token prompt was prefilled "
                          f"whole in one {1000 * (ev.t_end - ev.t_start):,.0f} ms iteration: "
                          f"{counted(decoding, 'decoding request')} waited that long for the next token")]
    return []


def _recompute(ev, e, st: LaneState) -> list[Candidate]:
    """Said where the preempted request is admitted again; not when the prefix cache holds part of it."""
    rid, before = e.request_id, st.context.get(e.request_id)
    if rid not in ev.admitted or e.cached_tokens or not before or any(r == rid for r, *_ in ev.swaps):
        return []
    return [Candidate(RECOMPUTE, "recompute", rid, f"#{rid} is back after its preemption: it recomputes the "
                      f"{counted(before, 'token')} it had already computed once")]


# ---- who goes first --------------------------------------------------------------------------
def _jumps(ev, st: LaneState) -> list[Candidate]:
    """An admitted request that started ahead of one that arrived earlier and has not started yet (under a
    policy that gives a reason for it: first come, first served never does)."""
    if st.policy not in JUMP_POLICIES or not ev.admitted:
        return []
    skip = {*ev.admitted, *st.preempted, *ev.finished}
    still = [w for w in st.waiting.values() if w.request_id not in skip]  # (once a step: 1,000 may wait)
    for rid in ev.admitted:
        req = st.waiting.get(rid)
        if req is None or rid in st.preempted:
            continue
        passed = [w for w in still if w.arrival_s < req.arrival_s]
        why = passed and (_late(passed, st, ev.t_start) if st.policy == "slo" else _why(req, passed[0], st.policy))
        if why:
            return [Candidate(JUMP, "jump", rid, f"#{rid} started ahead of {_passed(passed)}: {why}")]
    return []


def _passed(passed) -> str:
    return f"#{passed[0].request_id}, which arrived earlier" if len(passed) == 1 else \
        f"{len(passed)} requests that arrived earlier"


def _late(passed: list[Req], st: LaneState, now: float) -> str | None:
    """The slo policy's reason: every request passed is already past its TTFT deadline."""
    ttft = st.slo_ttft_s
    if ttft is None or any(now <= r.arrival_s + ttft for r in passed):
        return None
    who = f"#{passed[0].request_id} is" if len(passed) == 1 else f"all {len(passed)} are"
    return f"{who} past the {ttft:g} s TTFT deadline after arriving, and the slo policy serves late requests last"


def _why(req: Req, other: Req, policy: str) -> str | None:
    """The policy's reason, in the two requests' own numbers; None where they do not show it."""
    if policy == "sjf":
        return _shorter(req, other)
    if policy == "fair" and None not in (req.tenant, other.tenant) and req.tenant != other.tenant:
        return (f"its tenant {req.tenant} goes before #{other.request_id}'s tenant {other.tenant} "
                "(fair share per tenant)")
    if policy == "priority" and req.priority < other.priority:
        return (f"its priority {req.priority} is more urgent than #{other.request_id}'s {other.priority} "
                "(lower runs first)")
    return None


def _shorter(req: Req, other: Req) -> str | None:
    # what shortest-job-first ranks a request that has not started by: its prompt and the answer it may give
    if req.prompt_len is None or other.prompt_len is None:
        return None
    mine, theirs = req.prompt_len + req.max_tokens, other.prompt_len + other.max_tokens
    if mine >= theirs:
        return None
    return (f"it is the shorter job: {mine:,} tokens of prompt and answer against {theirs:,} for "
            f"#{other.request_id} (shortest job first)")


# ---- slots and rows --------------------------------------------------------------------------
def _slots(ev, st: LaneState) -> list[Candidate]:
    # continuous only: a request joins the running batch at once, into a slot freed just before if it was full
    joined = [r for r in ev.admitted if st.known(r) is not None]
    if st.strategy != "continuous" or not joined:
        return []
    reuse, decoding = _reuse(ev, st, joined), len(_decoding(ev))
    if reuse or not decoding:
        return reuse
    return [Candidate(JOINED, "joined", None, f"{ids(joined)} joined the running batch while "
                      f"{counted(decoding, 'request')} kept decoding")]


def _reuse(ev, st: LaneState, joined: list[int]) -> list[Candidate]:
    """The joined requests that were queued when the previous iteration's full batch freed slots: one each."""
    freed = _freed(ev, st)
    waited = [r for r in joined if st.known(r).arrival_s <= st.prev.t_end] if freed else []
    if not waited:  # (an arrival in a lane idle or paused since then did not wait for that slot)
        return []
    took, old = waited[:len(freed)], freed[:len(waited)]
    return [Candidate(SLOT_REUSE, "slot_reuse", None, f"{ids(took)} took the slot{'s' * (len(old) > 1)} "
                      f"{ids(old)} freed in the previous iteration")]


def _freed(ev, st: LaneState) -> list[int]:
    """The requests that finished in the previous iteration while its batch was full: theirs were the only
    free slots at this iteration's admission. [] when that is not certain."""
    prev = st.prev
    if prev is None or prev.step != ev.step - 1 or ev.preempted or st.max_num_seqs is None:
        return []
    if prev.part != ev.part:  # a disaggregated lane's other engine: its slots are not these
        return []
    rows, now = {e.request_id for e in prev.entries}, {e.request_id for e in ev.entries}
    freed = [r for r in prev.finished if r in rows]
    between = [r for r in ev.finished if r in rows and r not in now]  # aborted between the two iterations
    if len(rows) != st.max_num_seqs or between or any(st.known(r) is None for r in freed + ev.admitted):
        return []
    return freed


def _padding(ev, st: LaneState) -> list[Candidate]:
    # static/dynamic: finished rows stay in the launched batch and are still computed
    if st.strategy == "continuous" or not st.ended:  # (padding that is said: an ended request's row)
        return []
    phases: dict[int, set[str]] = {}
    for e in ev.entries:
        phases.setdefault(e.request_id, set()).add(e.phase)
    pad = [rid for rid, p in phases.items() if p == {PADDING}]
    done = sorted(rid for rid in pad if rid in st.ended)
    if not done:
        return []
    verb = "finished but its row is" if len(done) == 1 else "finished but their rows are"
    return [Candidate(PADDING_ROWS, "padding", None, f"{ids(done)} {verb} still computed; {len(pad)} of "
                      f"{len(phases)} rows {'is' if len(pad) == 1 else 'are'} padding")]


# ---- speculative decoding --------------------------------------------------------------------
def _speculated(ev, st: LaneState) -> list[Candidate]:
    """The row whose drafts gained it the most tokens in this step, when that is notable."""
    rows = [e for e in ev.entries if e.accepted >= SPEC_NOTABLE and st.known(e.request_id) is not None]
    if not rows:
        return []
    e = max(rows, key=lambda e: (e.accepted, -e.request_id))
    return [Candidate(SPECULATED, "speculated", e.request_id, f"#{e.request_id} accepted {e.accepted} of "
                      f"{e.drafted} drafted tokens: {e.accepted + 1} tokens in one step")]


# ---- disaggregated lanes ---------------------------------------------------------------------
def _handed_off(ev, st: LaneState) -> list[Candidate]:
    """The decode engine took over a request: its KV copied out of the prefill engine's pool (the step's
    largest copy). Said of the first hand-off and of long prompts': short ones are many and alike."""
    copies = [h for h in ev.handoffs if st.known(h[0]) is not None]
    first = bool(copies) and not any(kind == "handed_off" for kind, _ in st.told)
    notable = copies if first else [h for h in copies if h[1] * ev.block_size >= LONG_PREFILL]
    if not notable:
        return []
    rid, blocks, nbytes, seconds = max(notable, key=lambda h: (h[2], -h[0]))
    return [Candidate(HANDED_OFF, "handed_off", rid, f"#{rid} moved from the prefill engine to the decode engine: "
                      f"its {counted(blocks, 'KV block')} ({nbytes / 1e6:.2f} MB) copied in {1000 * seconds:.1f} ms; "
                      "it decodes there, where no prompt is prefilled")]


# ---- waiting ---------------------------------------------------------------------------------
def long_wait(st: LaneState, now: float) -> Candidate | None:
    """A static lane that has computed nothing for LONG_WAIT_S while requests wait for its batch to fill."""
    idle_since = max(st.last_compute_s or float("-inf"), min(st.wait_since.values(), default=now))
    filling = [st.waiting[rid] for rid, w in st.waits.items()
               if w.get("why") == waits.BATCH_FILLING and rid in st.waiting]
    if st.strategy != "static" or not filling or now - idle_since < LONG_WAIT_S:
        return None
    req = min(filling, key=lambda r: (r.arrival_s, r.request_id))
    return Candidate(LONG_WAIT, "long_wait", req.request_id,
                     f"#{req.request_id} has waited {now - req.arrival_s:.0f} s, "
                     f"{waits.say(st.waits[req.request_id], now)}: this lane launches only full batches; the "
                     "presenter can launch this one now (Launch)")


def counted(count: int, noun: str) -> str:
    """'1 request', '3 requests'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
