"""RequestHandle: one submitted request on one lane, as its caller sees it."""
from __future__ import annotations

import queue
import threading

from ..request import RequestOutput

_END = object()


class RequestHandle:
    """Iterate it for text deltas as they stream; result() waits for the final RequestOutput.

    Written by the engine's worker thread, read from any thread."""

    def __init__(self, request_id: int, lane: str, tag: str):
        self.request_id, self.lane, self.tag = request_id, lane, tag
        self.accepted = threading.Event()   # the engine took it, or rejected it (see rejection)
        self.rejection: str | None = None
        self.output: RequestOutput | None = None
        self.streamed_chars = 0             # characters of the text sent to the stream so far
        self._deltas: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Event()
        self.hold_back = 0                  # chars kept back that could begin a stop string

    # ---- worker side -------------------------------------------------------------------------
    def accept(self, hold_back: int) -> None:
        self.hold_back = hold_back
        self.accepted.set()

    def reject(self, message: str) -> None:
        self.rejection = message
        self.accepted.set()
        self._deltas.put(_END)
        self._done.set()

    def update(self, text: str) -> str:
        """Stream what is new in text (less what might still turn into a stop string). An unfinished
        request's text only grows, so what was streamed is its first streamed_chars: the delta is sliced
        off the end, never the whole text copied or compared (a step streams hundreds of requests)."""
        return self._emit(text, len(text) - self.hold_back)

    def finish(self, output: RequestOutput) -> str:
        """The rest of the final text (a stop string cut it after what was held back, never before)."""
        delta = self._emit(output.text, len(output.text))
        self.output = output
        self._deltas.put(_END)
        self._done.set()
        return delta

    def _emit(self, text: str, end: int) -> str:
        if end <= self.streamed_chars:
            return ""
        delta = text[self.streamed_chars:end]
        self.streamed_chars = end
        self._deltas.put(delta)
        return delta

    # ---- caller side -------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def __iter__(self):
        while True:
            item = self._deltas.get()
            if item is _END:
                return
            yield item

    def result(self, timeout: float | None = None) -> RequestOutput:
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} on lane {self.lane!r} still running")
        if self.rejection:
            raise ValueError(self.rejection)
        return self.output
