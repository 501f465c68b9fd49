"""An engine's requests as its callers read them: the unfinished ones (live, by id) and the outputs of the
last KEEP finished ones. LLMEngine and DisaggregatedEngine each hold one and read it through ReadsOutputs;
generate() runs prompts to the end through either."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from .request import Request, RequestOutput, SamplingParams

KEEP = 10_000  # finished outputs kept for get_output(), oldest dropped first


class Outputs:
    def __init__(self):
        self.live: dict[int, Request] = {}  # unfinished, wherever they are
        self.finished: OrderedDict[int, RequestOutput] = OrderedDict()

    def known(self, request_id: int) -> bool:
        return request_id in self.live or request_id in self.finished

    def finish(self, request_id: int, out: RequestOutput) -> None:
        """The request ended (if it was live): its output is kept, the oldest kept one dropped past KEEP."""
        if self.live.pop(request_id, None) is None:
            return
        self.finished[request_id] = out
        while len(self.finished) > KEEP:
            self.finished.popitem(last=False)

    def get(self, request_id: int) -> RequestOutput:
        req = self.live.get(request_id)
        if req is not None:
            return req.to_output()
        if request_id in self.finished:
            return self.finished[request_id]
        raise KeyError(f"unknown request id {request_id}")

    def live_text(self, request_id: int) -> str | None:
        """Text so far of an unfinished request (None once it finished), without copying its token lists:
        streaming reads it every step."""
        req = self.live.get(request_id)
        return None if req is None else req.text

    def pop(self, request_id: int) -> RequestOutput:
        out = self.get(request_id)
        self.finished.pop(request_id, None)
        return out


class ReadsOutputs:
    """The output side of an engine's interface, over its `outputs` (LLMEngine, DisaggregatedEngine)."""
    outputs: Outputs

    def get_output(self, request_id: int) -> RequestOutput:
        return self.outputs.get(request_id)

    def live_text(self, request_id: int) -> str | None:
        return self.outputs.live_text(request_id)

    def pop_output(self, request_id: int) -> RequestOutput:
        return self.outputs.pop(request_id)

    def generate(self, prompts: Sequence[str | Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
        """Run the prompts to completion (with whatever else is queued); outputs in input order."""
        return generate(self, prompts, params)


def generate(engine, prompts: Sequence[str | Sequence[int]],
             params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
    """Run the prompts to completion on `engine` (with whatever else is queued there); outputs in input
    order. The engine drains meanwhile: a static batch launches without waiting to fill."""
    if isinstance(params, SamplingParams) or params is None:
        params = [params or SamplingParams()] * len(prompts)
    if len(params) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams")
    ids = [engine.add_request(p, sp) for p, sp in zip(prompts, params)]
    was, engine.draining = engine.draining, True
    try:
        while any(rid in engine.requests for rid in ids):
            engine.step()
    finally:
        engine.draining = was
    return [engine.pop_output(rid) for rid in ids]
