"""Why a request waits: the scheduler's own decision at a step, for every request in its waiting queue.

A reason is a small dict, {"why": CODE, ...details}, as it travels on the wire (step events carry the
changes: engine/events.py). TEMPLATES phrase each one for people; the live view gets them through the
wire contract and the narration uses them, so every explanation reads the same everywhere. CAPACITY
names the reasons vLLM counts as `reason="capacity"` in num_requests_waiting_by_reason; the others are
"deferred".
"""
from __future__ import annotations

BATCH_FULL = "batch_full"              # continuous: max_num_seqs rows already run
TOKEN_BUDGET = "token_budget"          # continuous: the step's token budget is spent (or, unchunked, too small)
KV_BLOCKS = "kv_blocks"                # not enough free KV blocks to start
BATCH_FILLING = "batch_filling"        # static/dynamic: no batch yet, it fills up
BATCH_RUNNING = "batch_running"        # static/dynamic: a launched batch must finish first
BEHIND = "behind"                      # behind the head of the queue, in the policy's order
QUEUED = "queued"                      # further back: QUEUE_SHOWN or more requests ahead of it
PREEMPTED_FOR_BLOCKS = "preempted_for_blocks"
PREEMPTED_BY_PRIORITY = "preempted_by_priority"

# what a preemption did with the request's KV (the reason's "kv", said after it)
SWAPPED = "its KV swapped out to the host pool, to come back when it resumes"
DROPPED = "its KV dropped, to recompute when it resumes"
DROPPED_HOST_FULL = "the host pool full: its KV dropped, to recompute when it resumes"

CAPACITY = (BATCH_FULL, TOKEN_BUDGET, KV_BLOCKS)
# The first requests of a queue get their exact place (BEHIND: rank, head, length); those further back one
# reason that holds while the queue moves (QUEUED). A step sends only reasons that changed, and every place
# moves when the head leaves or a request arrives: 768 exact places were ~38 KB of every step's event.
QUEUE_SHOWN = 16
# the policy's reason for an order (scheduling_policy -> what decides who goes first)
ORDER = {"fcfs": "arrival", "priority": "priority", "sjf": "shortest job first", "fair": "fair share",
         "slo": "TTFT deadline (late ones last)"}

TEMPLATES = {
    BATCH_FULL: "batch full: {running} of max_num_seqs={max} rows already run",
    TOKEN_BUDGET: "token budget spent: {left} of {budget} tokens left this iteration",
    KV_BLOCKS: "KV blocks short: needs {need}, {free} free",
    BATCH_FILLING: "waiting for a full batch: {have} of {size}",
    BATCH_RUNNING: "a batch of {rows} is in flight: the next one launches when it has finished",
    BEHIND: "behind #{head} in the queue: number {rank} of {of} by {order}",
    QUEUED: "in the queue with {ahead} or more ahead of it by {order}",
    PREEMPTED_FOR_BLOCKS: "preempted to free KV blocks for {whom}",
    PREEMPTED_BY_PRIORITY: "preempted by #{by} (priority {by_priority} over {priority})",
}
# dynamic batching also launches a partial batch at `launch_at_s` (service clock): said as a countdown
LAUNCH_AT = "launches in {s:.1f} s at the latest"


def say(reason: dict, now: float | None = None) -> str:
    """A reason as a sentence part ("KV blocks short: needs 3, 1 free"); `now` (service clock) for a
    dynamic batch's countdown."""
    try:
        text = TEMPLATES.get(reason.get("why"), "{why}").format(**reason)
    except (KeyError, ValueError):
        return str(reason.get("why"))
    if reason.get("kv"):
        text += f"; {reason['kv']}"
    if reason.get("launch_at_s") is not None and now is not None:
        text += f" ({LAUNCH_AT.format(s=max(0.0, reason['launch_at_s'] - now))})"
    return text


def changes(before: dict[int, dict], after: dict[int, dict]) -> dict[int, dict | None]:
    """What a client that saw `before` needs to know `after`: new or changed reasons, and None for
    requests that no longer wait."""
    out: dict[int, dict | None] = {rid: w for rid, w in after.items() if before.get(rid) != w}
    out.update({rid: None for rid in before if rid not in after})
    return out


def kind(code: str) -> str:
    """vLLM's coarse reason for one of ours: "capacity" or "deferred"."""
    return "capacity" if code in CAPACITY else "deferred"


def batch_full(running: int, max_seqs: int) -> dict:
    return {"why": BATCH_FULL, "running": running, "max": max_seqs}


def token_budget(left: int, budget: int) -> dict:
    return {"why": TOKEN_BUDGET, "left": left, "budget": budget}


def kv_blocks(need: int, free: int) -> dict:
    return {"why": KV_BLOCKS, "need": need, "free": free}


def batch_filling(have: int, size: int, launch_at_s: float | None = None) -> dict:
    """launch_at_s: when a dynamic batch launches however full (a time, so the reason does not change
    while it counts down)."""
    out = {"why": BATCH_FILLING, "have": have, "size": size}
    if launch_at_s is not None:
        out["launch_at_s"] = round(launch_at_s, 3)
    return out


def batch_running(rows: int) -> dict:
    return {"why": BATCH_RUNNING, "rows": rows}


def behind(head: int, rank: int, of: int, order: str) -> dict:
    """order: what put the head first (the policy's ORDER, or the policy's own reason for this head)."""
    return {"why": BEHIND, "head": head, "rank": rank, "of": of, "order": order}


def queued(ahead: int, order: str) -> dict:
    return {"why": QUEUED, "ahead": ahead, "order": order}


def preempted_for_blocks(by: int | None) -> dict:
    """by: the request that needed the blocks (None: those ahead of it in the running order)."""
    return {"why": PREEMPTED_FOR_BLOCKS, "by": by, "whom": "the requests ahead of it" if by is None else f"#{by}"}


def preempted_by_priority(by: int, by_priority: int, priority: int) -> dict:
    return {"why": PREEMPTED_BY_PRIORITY, "by": by, "by_priority": by_priority, "priority": priority}
