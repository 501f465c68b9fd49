"""OutputProcessor: a step's new tokens made output: text, a stop, and the finish it brings."""
from __future__ import annotations

from .detokenizer import find_stop
from .outputs import Outputs
from .request import Request, RequestStatus
from .scheduler import ScheduledRow, Scheduler, SchedulerOutput


class OutputProcessor:
    """Turns each new token into its request's text and decides whether the request stops there (an end
    token, a stop token, a stop string, max_tokens); ends requests. Holds the engine's outputs (Outputs:
    its live requests and the finished ones' outputs) and the requests ended since the last step event.
    The scheduler is the caller's: a reset engine makes a new one."""

    def __init__(self, outputs: Outputs):
        self.outputs = outputs
        self._ended: list[int] = []  # reported by the next step event

    def process(self, scheduler: Scheduler, out: SchedulerOutput, new: list[tuple[Request, int]],
                now: float) -> tuple[dict[int, int], dict[int, int]]:
        """Each new token in order (a draft row may bring several; Scheduler.update's list). A request that
        stops drops the tokens it made after the one it stopped at. Returns the step's sampled token per
        request, and the requests whose model ended its answer in this step while ignore_eos kept them going
        (request id -> their text's length there)."""
        sampled: dict[int, int] = {}
        answer_ends: dict[int, int] = {}
        for i, (req, tok) in enumerate(new):
            if req.status is RequestStatus.FINISHED:
                continue  # made after its stop: unsampled when it stopped
            sampled[req.request_id] = tok
            before = len(req.text)
            req.text += req.detok.push(tok)
            # (a token's stop is read only where one can be: most tokens of most requests skip it)
            if tok in req.ends or req.stops or req.detok.num_tokens >= req.params.max_tokens:
                stop = stop_at(req, tok, before, answer_ends)
                if stop:
                    scheduler.unsample(out, req, sum(1 for r, _ in new[i + 1:] if r is req))
                    self.finish(scheduler, req, stop[0], now, flush=stop[1])
        return sampled, answer_ends

    def finish(self, scheduler: Scheduler, req: Request, reason: str, now: float, error: str | None = None,
               flush: bool = True) -> None:
        """End a request (stop, length, abort, error): its output kept, reported by the next step event.
        flush: the text held back for an unfinished character is added (not after a stop string's cut)."""
        if flush:
            req.text += req.detok.finish()
        scheduler.finish(req, reason, now, error)
        self.outputs.finish(req.request_id, req.to_output())
        self._ended.append(req.request_id)

    def fail(self, scheduler: Scheduler, rows: list[ScheduledRow], error: Exception, now: float) -> None:
        """A failed forward ends its batch's requests with the error, not the engine."""
        msg = f"{type(error).__name__}: {error}"
        for row in rows:
            if not row.request.is_finished:
                self.finish(scheduler, row.request, "error", now, error=msg)

    def has_news(self) -> bool:
        return bool(self._ended)

    def news(self) -> list[int]:
        """The requests ended since the last call (a step event's finished)."""
        ended, self._ended = self._ended, []
        return ended


def stop_at(req: Request, tok: int, before: int, answer_ends: dict[int, int]) -> tuple[str, bool] | None:
    """(finish reason, flush) if the request stops at its new token `tok` (its text was `before` characters
    long before it), else None. An end token under ignore_eos marks the end of its answer in answer_ends."""
    p = req.params
    if tok in req.eos_token_ids:
        if not p.ignore_eos:
            return "stop", True
        if req.answer_end is None:  # what follows is the model going on past its answer
            req.answer_end = answer_ends[req.request_id] = len(req.text)
    if p.stop_token_ids and tok in p.stop_token_ids:
        return "stop", True
    if req.stops:
        cut = find_stop(req.text, req.stops, before)
        if cut is not None:
            req.text = req.text[:cut]
            return "stop", False
    if req.detok.num_tokens >= p.max_tokens:  # tokens so far: this step's later ones are not yet read
        return "length", True
    return None
