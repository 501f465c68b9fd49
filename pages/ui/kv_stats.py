"""KV memory accounting from the latest step event of each lane (for the KV cache page)."""
from __future__ import annotations

from collections import OrderedDict

from engine.events import REMOTE

KEEP_REQUESTS = 5000


class KVStats:
    def __init__(self):
        self.cursor = 0
        self.latest: dict = {}                      # lane -> latest StepEvent
        self.max_total: OrderedDict = OrderedDict()  # request id -> prompt + max_tokens

    def consume(self, hub) -> None:
        batch = hub.read(self.cursor, limit=20000)
        self.cursor = batch.cursor
        for _, item in batch.events:
            if item.get("strategy") == REMOTE:
                continue  # a remote server shows no KV blocks
            if item["type"] == "step":
                self.latest[item["lane"]] = item["event"]
            elif item["type"] == "request":
                self.max_total[item["request_id"]] = item["num_prompt_tokens"] + item["max_tokens"]
                while len(self.max_total) > KEEP_REQUESTS:
                    self.max_total.popitem(last=False)

    def table(self) -> list[dict]:
        rows = []
        for lane, ev in self.latest.items():
            allocated = ev.used_blocks * ev.block_size
            holding = sum(ev.kv_tokens.values())
            unused = ev.reserved_unused_slots  # the engine's definition, not recomputed here
            reserved = sum(self.max_total.get(rid, n) for rid, n in ev.kv_tokens.items())
            capacity = ev.num_blocks * ev.block_size
            rows.append({
                "lane": lane,
                "requests holding KV": len(ev.kv_tokens),
                "blocks used / pool": f"{ev.used_blocks} / {ev.num_blocks}",
                "allocated slots": allocated,
                "holding tokens": holding,
                "unused": unused,
                "unused %": round(100 * unused / allocated, 1) if allocated else 0.0,
                "contiguous reservation (slots)": reserved,
                "reservation unused %": round(100 * (reserved - holding) / reserved, 1) if reserved else 0.0,
                "pool used %": round(100 * allocated / capacity, 1),
            })
        return rows
