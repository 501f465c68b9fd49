"""HandOffs: a disaggregated lane's prefill half hands every request on once it has its first token."""
from __future__ import annotations

from .request import Request
from .scheduler import ScheduledRow, Scheduler


class HandOffs:
    """The requests a prefill half handed on (engine/disaggregated.py), their blocks held in its cache until
    the decode half copied them, and the KV tokens those blocks hold (the request itself goes on changing on
    the decode half's thread)."""

    def __init__(self, scheduler: Scheduler, live: dict[int, Request]):
        self.scheduler, self.live = scheduler, live  # the half's (live: its unfinished requests, by id)
        self.sent: dict[int, Request] = {}
        self.kv_tokens: dict[int, int] = {}
        self._news: list[int] = []  # handed on since the last step event

    def take(self, rows: list[ScheduledRow]) -> None:
        """Every request of a step's rows that now has its first token leaves the scheduler and the live ones."""
        for row in rows:
            req = row.request
            if not req.is_finished and req.output_token_ids and req.request_id in self.live:
                self.scheduler.detach(req)
                del self.live[req.request_id]
                self.sent[req.request_id] = req
                self.kv_tokens[req.request_id] = req.num_computed_tokens
                self._news.append(req.request_id)

    def news(self) -> list[int]:
        """The requests handed on since the last call (a step event's handed_off)."""
        news, self._news = self._news, []
        return news

    def kv(self, request_ids: list[int]) -> list[tuple[Request, list[int]]]:
        """Requests handed on, with the blocks that hold their KV here."""
        tables = self.scheduler.cache.block_tables
        return [(self.sent[rid], list(tables[rid])) for rid in request_ids if rid in self.sent]

    def release(self, request_ids: list[int]) -> None:
        """The decode half copied (or no longer needs) these requests' blocks: free them."""
        for rid in request_ids:
            if self.sent.pop(rid, None) is not None:
                del self.kv_tokens[rid]
                self.scheduler.cache.free(rid)
