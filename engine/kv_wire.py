"""A step event's KV on the wire: key frames and the changes between them.

At a GPU's pace (hundreds of steps a second, hundreds of rows) sending every block table whole in every
step is most of the wire: a decode step changes one table in block_size. So a lane's step events carry a
KV pool's tables whole (a key frame: `block_tables`) in the pool's first event and then at least every
KEY_EVERY_S, and in between only what changed since the pool's previous published event (`tables`:
request id -> [start, blocks...], the table cut to `start` blocks and `blocks` appended, or null once it
is gone; `kv_tokens` the same way where it differs from the scheduled rows' context_len; `cached` when it
changed). `fold_kv` rebuilds the whole snapshot from a key frame and the changes after it; the live
view's reducer does the same (assets/live/kv_blocks.js). A reader that missed events (or starts
mid-stream) keeps a `KvSync`: a live event goes to it in its key form at once, a recorded one (which has
only the form it was recorded in) without its KV until the next key frame.

Nobody pays for encoding at publishing: a step event keeps its tables (lists shared with the previous
event where unchanged) and the previous published event's (`KvBase`, stamped by `KvFrames` as the lane
publishes it); the changes are worked out only when a reader asks for the event's wire form.
"""
from __future__ import annotations

from dataclasses import dataclass

KEY_EVERY_S = 1.0  # the longest a reader that lost its place waits for a key frame
ENTRY_RID, ENTRY_CTX = 0, 3  # request_id and context_len in a wire step entry (events.ENTRY_FIELDS)
SHORT_CTX = 1  # and in a short one, [request_id, context_len] (events.SHORT_ENTRY)


@dataclass(frozen=True)
class KvBase:
    """What the previous published step of the same KV pool held: the next one's changes are against it
    (its KV, and its rows: a row that goes on from there travels as a run of `cont`, engine/events.py)."""
    tables: dict[int, list[int]]
    kv_tokens: dict[int, int]
    cached: list[int]
    entries: list = ()  # its StepEntry rows


class KvFrames:
    """Which of a lane's published step events are key frames, and the base of the others: the state the
    previous published event of the same KV pool held (a lane's, or each half's of a disaggregated lane).
    The publisher stamps each event as it publishes it, so an event it drops is no reader's base."""

    def __init__(self, every_s: float = KEY_EVERY_S):
        self.every_s = every_s
        self._last: dict = {}   # pool (StepEvent.part) -> KvBase
        self._key_t: dict = {}  # pool -> time of its last key frame

    def stamp(self, event) -> None:
        """Set `event.kv_base` (an engine/events.py StepEvent about to be published): None, a key frame,
        for a pool's first event and then at least every `every_s` of its events' time."""
        pool, t = event.part, event.t_end
        prev = self._last.get(pool)
        self._last[pool] = KvBase(event.block_tables, event.kv_tokens, event.cached_blocks, event.entries)
        if prev is None or t - self._key_t[pool] >= self.every_s:
            self._key_t[pool] = t
            prev = None
        event.kv_base = prev


def is_key(kv: dict) -> bool:
    """Whether a wire `kv` object holds its tables whole."""
    return "block_tables" in kv


def key_fields(tables: dict, kv_tokens: dict, cached: list) -> dict:
    return {"block_tables": {str(k): v for k, v in tables.items()},
            "kv_tokens": {str(k): v for k, v in kv_tokens.items()}, "cached": cached}


def change_fields(base: KvBase, tables: dict, kv_tokens: dict, cached: list, contexts) -> dict:
    """contexts: (request id, context_len) of the step's entries, which a reader takes as their kv_tokens."""
    implied = dict(base.kv_tokens)
    implied.update(contexts)
    out = {"tables": table_changes(base.tables, tables), "kv_tokens": value_changes(implied, kv_tokens)}
    if cached is not base.cached and cached != base.cached:
        out["cached"] = cached
    return out


def table_changes(old: dict[int, list[int]], new: dict[int, list[int]]) -> dict[str, list[int] | None]:
    """request id -> [start, blocks appended after the first `start`], or None: its table is gone."""
    out: dict[str, list[int] | None] = {}
    for rid, table in new.items():
        before = old.get(rid)
        if before is table:  # the usual case: an unchanged table is the same list (TableMatrix.copies)
            continue
        start = _common_prefix(before or (), table)
        if before is None or start < len(before) or start < len(table):
            out[str(rid)] = [start, *table[start:]]
    out.update((str(rid), None) for rid in old.keys() - new.keys())
    return out


def value_changes(old: dict[int, int], new: dict[int, int]) -> dict[str, int | None]:
    out: dict[str, int | None] = {str(rid): v for rid, v in new.items() if old.get(rid) != v}
    out.update((str(rid), None) for rid in old.keys() - new.keys())
    return out


def _common_prefix(a, b) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def fold_kv(snapshot: dict | None, kv: dict, entries: list = ()) -> dict:
    """The whole wire snapshot after a step event's `kv` (a key frame, or the changes since `snapshot`,
    the snapshot fold_kv returned for the same engine's previous event); entries: the event's (wire
    lists), whose context_len is each scheduled row's kv_tokens unless `kv` says otherwise. A key frame
    is returned as it is."""
    if is_key(kv):
        return kv
    snapshot = snapshot or {}
    tables = dict(snapshot.get("block_tables") or {})
    for rid, change in (kv.get("tables") or {}).items():
        if change is None:
            tables.pop(rid, None)
        else:
            tables[rid] = tables.get(rid, [])[:max(0, change[0])] + change[1:]
    tokens = dict(snapshot.get("kv_tokens") or {})
    tokens.update((str(e[ENTRY_RID]), e[SHORT_CTX if len(e) == 2 else ENTRY_CTX]) for e in entries)
    for rid, n in (kv.get("kv_tokens") or {}).items():
        if n is None:
            tokens.pop(rid, None)
        else:
            tokens[rid] = n
    out = {k: v for k, v in kv.items() if k != "tables"}
    out.update(block_tables=tables, kv_tokens=tokens, cached=kv.get("cached", snapshot.get("cached", [])))
    return out


# how a reader gets one step event: as it is, in its key form, or without its KV
AS_IS, KEY, NO_KV = "as_is", "key", "no_kv"


class KvSync:
    """The KV pools (a lane, or one half of a disaggregated lane) whose changes one reader can fold: the
    ones it has had a key frame of since it started or last missed events."""

    def __init__(self):
        self._synced: set = set()

    def reset(self) -> None:
        """The reader missed events (or starts again): every pool needs a key frame first."""
        self._synced.clear()

    def form(self, event) -> str:
        """How to hand on this step event (an engine/events.py StepMessage or a recorded one)."""
        pool = event.kv_pool
        if pool in self._synced:
            return AS_IS
        if event.kv_is_key:
            self._synced.add(pool)
            return AS_IS
        if event.can_key:
            self._synced.add(pool)
            return KEY
        return NO_KV
