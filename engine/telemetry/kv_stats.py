"""KV memory accounting from the latest step event of each lane (for the KV cache page), with the prefix
cache's part: shared and cached blocks, hit rate, and one request's block table."""
from __future__ import annotations

from collections import OrderedDict

from ..event_hub import HubReader

KEEP_REQUESTS = 5000


def _remember(store: OrderedDict, key, value) -> None:
    store[key] = value
    while len(store) > KEEP_REQUESTS:
        store.popitem(last=False)


class KVStats(HubReader):
    def __init__(self):
        super().__init__()
        self.latest: dict = {}                      # lane -> latest StepEvent
        self.max_total: OrderedDict = OrderedDict()  # request id -> prompt + max_tokens
        self.from_cache: OrderedDict = OrderedDict()  # (lane, request id) -> tokens served at admission
        self.prefix: dict[str, list[int]] = {}      # lane -> [tokens looked up, tokens hit] since it began reading

    def on_step(self, msg) -> None:
        if not msg.is_remote:  # a remote server shows no KV blocks
            self._step(msg.lane, msg.event)

    def on_request(self, ev) -> None:
        if not ev.is_remote:
            _remember(self.max_total, ev.request_id, ev.num_prompt_tokens + ev.max_tokens)

    def _step(self, lane: str, ev) -> None:
        self.latest[lane] = ev
        counts = self.prefix.setdefault(lane, [0, 0])
        counts[0] += ev.prefix_queries
        counts[1] += ev.prefix_hits
        for e in ev.entries:
            if e.cached_tokens:
                _remember(self.from_cache, (lane, e.request_id), e.cached_tokens)

    def table(self) -> list[dict]:
        rows = []
        for lane, ev in self.latest.items():
            allocated = ev.used_blocks * ev.block_size
            holding = sum(ev.kv_tokens.values())
            unused = ev.reserved_unused_slots  # the engine's definition, not recomputed here
            reserved = sum(self.max_total.get(rid, n) for rid, n in ev.kv_tokens.items())
            capacity = ev.num_blocks * ev.block_size
            queries, hits = self.prefix.get(lane, (0, 0))
            rows.append({
                "lane": lane,
                "requests holding KV": len(ev.kv_tokens),
                "blocks used / pool": f"{ev.used_blocks} / {ev.num_blocks}",
                "shared blocks": len(ev.shared_blocks),
                "cached blocks (evictable)": len(ev.cached_blocks),
                "prefix hit rate %": round(100 * hits / queries, 1) if queries else None,
                "allocated slots": allocated,
                "holding tokens": holding,
                "unused": unused,
                "unused %": round(100 * unused / allocated, 1) if allocated else 0.0,
                "contiguous (slots)": reserved,   # short: the page's label column cut the long name
                "contiguous unused %": round(100 * (reserved - holding) / reserved, 1) if reserved else 0.0,
                "pool used %": round(100 * allocated / capacity, 1),
            })
        return rows

    def request_to_show(self, lane: str, selected: int | None) -> int | None:
        """The picked request if it holds KV blocks in the lane, else the one sharing the most blocks
        (the newest on a tie), or None when no request holds any."""
        ev = self.latest.get(lane)
        if ev is None or not ev.block_tables:
            return None
        if selected in ev.block_tables:
            return selected
        shared = ev.shared_blocks
        return max(ev.block_tables, key=lambda rid: (sum(b in shared for b in ev.block_tables[rid]), rid))

    def block_rows(self, lane: str, rid: int) -> list[dict]:
        """One request's block table: each logical block, the physical block it points to, the tokens in
        it, whether it came from the prefix cache at admission, and who else holds it."""
        ev = self.latest.get(lane)
        table = ev.block_tables.get(rid) if ev is not None else None
        if not table:
            return []
        holders = ev.block_holders()
        cached_blocks = self.from_cache.get((lane, rid), 0) // ev.block_size
        held = ev.kv_tokens.get(rid, 0)
        return [{
            "logical block": i,
            "physical block": b,
            "tokens": max(0, min(ev.block_size, held - i * ev.block_size)),
            "from prefix cache": i < cached_blocks,
            "holders (ref count)": len(holders[b]),
            "shared with": ", ".join(f"#{r}" for r in holders[b] if r != rid),
        } for i, b in enumerate(table)]

