"""A preset's request stream, fired from a background thread so the page never blocks on it.

One stream at a time per process (like the load generator): firing another stops the one running,
unless a viewer would stop someone else's. Every request goes to every lane, as the viewer `client`
when a viewer fired it (room limits apply). A stream that names tenants or priorities is the
presenter's: the service makes a viewer its own tenant and refuses it a priority below 0.
"""
from __future__ import annotations

import threading
import time

from engine import SamplingParams
from engine.access import LOCAL, Client

from .presets import Arrival, Fit, Stream
from .submitter import Submitter

TAG = "preset"
PRESENTER_ONLY = ("this stream names tenants and priorities, which only the presenter's requests keep "
                  "(a viewer is its own tenant and may not ask for a priority below 0)")


def fit_of(svc) -> Fit:
    """The smallest context of the running lanes (2,048 while none has loaded) and static's batch."""
    lens = [e["max_model_len"] for e in svc.status()["engines"].values() if e["max_model_len"]]
    static = [c.static_batch_size for c in svc.lanes.values() if c.strategy == "static"]
    return Fit(min(lens, default=2048), max(static, default=svc.cfg.static_batch_size))


class StreamRunner(Submitter):
    def __init__(self, svc, stream: Stream, client: Client = LOCAL):
        super().__init__(svc, "inflight-preset-stream", client)
        self.stream = stream
        self.arrivals: list[Arrival] = stream.fitted(fit_of(svc))

    def run(self) -> None:
        t0 = time.monotonic()
        for i, a in enumerate(self.arrivals):
            if self.halt.wait(max(0.0, t0 + a.at_s - time.monotonic())):
                return
            params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0, ignore_eos=True)
            self.submit(a.prompt(i), params, tag=TAG, priority=a.priority, tenant=a.tenant)


_current: StreamRunner | None = None  # one per process, like the service it feeds
_lock = threading.Lock()


def fire(svc, stream: Stream, client: Client = LOCAL) -> StreamRunner:
    """Start `stream`; a viewer cannot replace a stream that someone else started, nor fire one that
    names tenants or priorities (ValueError)."""
    global _current
    if stream.presenter_only and not client.presenter:
        raise ValueError(PRESENTER_ONLY)
    with _lock:
        running = _current is not None and _current.is_alive() and not _current.halt.is_set()
        if running and not client.presenter and _current.client.key != client.key:
            raise ValueError("a request stream is already running; fire yours when it has been sent")
        if _current is not None:
            _current.stop()
        _current = StreamRunner(svc, stream, client)
        _current.start()
        return _current
