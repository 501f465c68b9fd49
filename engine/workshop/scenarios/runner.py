"""Run a scenario on the live service: set its lanes, then fire its request stream from a background
thread, so the caller never blocks on it.

One stream at a time per process (like the load generator): firing another stops the one running,
unless a viewer would stop someone else's. Every request goes to every lane, as the `client` that fired
it (room limits apply to a viewer). Setting lanes is the presenter's; so is a stream that names tenants
or priorities (the service makes a viewer its own tenant and refuses it a priority below 0).
"""
from __future__ import annotations

import functools
import logging
import threading
import time

from engine import SamplingParams
from engine.room.access import LOCAL, Client
from engine.serving.submitter import Submitter

from .model import Arrival, Fit, Scenario

log = logging.getLogger(__name__)
TAG = "scenario"
READY_WAIT_S = 300.0
FULL_WAIT_S = 30.0   # an arrival sent when_batch_full waits this long at most (a lane may never fill)
FULL_POLL_S = 0.02   # (a service's status reads every lane's)
PRESENTER_ONLY = ("this stream names tenants and priorities, which only the presenter's requests keep "
                  "(a viewer is its own tenant and may not ask for a priority below 0)")


def fit_of(svc) -> Fit:
    """The smallest context of the running lanes (2,048 while none has loaded), and how many tokens chat
    messages take on their model (a local lane's: a tokenizer of its own, not the engine's, which its
    thread uses)."""
    lens = [e["max_model_len"] for e in svc.status()["engines"].values() if e["max_model_len"]]
    engines = [getattr(w, "engine", None) for w in list(svc.workers.values())]  # (read once: a lane may drop it)
    dirs = [e.runner.model_dir for e in engines if e is not None]
    return Fit(min(lens, default=2048), token_counter(str(dirs[0])) if dirs else None)


@functools.lru_cache(maxsize=4)
def token_counter(model_dir: str):
    from transformers import AutoTokenizer

    from engine.detokenizer import apply_chat_template
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lock = threading.Lock()  # one stream at a time uses it, but a fast tokenizer must not be shared

    def count(messages: list[dict]) -> int:
        with lock:
            return len(apply_chat_template(tokenizer, messages))
    return count


class StreamRunner(Submitter):
    """The stream starts once the lanes have loaded (a scenario that changed them waits for their
    engines, up to READY_WAIT_S), fitted to their context and their tokenizer."""

    def __init__(self, svc, scenario: Scenario, client: Client = LOCAL):
        super().__init__(svc, "inflight-scenario-stream", client)
        self.scenario = scenario
        self.arrivals: list[Arrival] = list(scenario.arrivals)  # fitted when the stream starts

    def run(self) -> None:
        try:
            self.svc.wait_ready(READY_WAIT_S)
        except Exception:  # noqa: BLE001 - a lane that failed to load says so itself; send what fits the others
            pass
        self.arrivals = self.scenario.fitted(fit_of(self.svc))
        self.svc.start_run(self.scenario.title)
        t0 = time.monotonic()
        for i, a in enumerate(self.arrivals):
            if self.halt.wait(max(0.0, t0 + a.at_s - time.monotonic())):
                return
            if a.when_batch_full and not self._until_batches_full():
                return
            params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0, ignore_eos=True)
            prompt, messages = (None, a.chat()) if a.messages else (a.prompt(i), None)
            self.submit(prompt, params, messages=messages, tag=TAG, priority=a.priority, tenant=a.tenant)
        self.settle()

    def _until_batches_full(self) -> bool:
        """Wait until every lane runs a full batch (batches_full), for FULL_WAIT_S of unpaused time at most
        (a lane short of KV may never fill: the request then goes, said in the log). False: the stream was
        stopped meanwhile."""
        left, last = FULL_WAIT_S, time.monotonic()
        while True:
            status = self.svc.status()
            if batches_full(status["engines"]):
                return True
            now = time.monotonic()
            left -= 0.0 if status.get("paused") else now - last
            last = now
            if left <= 0:
                log.warning("%s: a lane's batch did not fill in %.0f s; the next request goes now",
                            self.scenario.key, FULL_WAIT_S)
                return True
            if self.halt.wait(FULL_POLL_S):
                return False


def batches_full(engines: dict) -> bool:
    """Whether every ready lane of a service's status runs a full batch: a continuous lane max_num_seqs
    requests (a disaggregated one, whose count adds its halves', and any other lane: one)."""
    def full(e: dict) -> bool:
        cfg = e.get("config") or {}
        plain = cfg.get("strategy") == "continuous" and not cfg.get("disaggregated")
        return (e.get("num_running") or 0) >= (cfg.get("max_num_seqs", 1) if plain else 1)
    return all(full(e) for e in engines.values() if e.get("ready", True) and not e.get("error"))


_current: StreamRunner | None = None  # one per process, like the service it feeds
_lock = threading.Lock()


def fire(svc, scenario: Scenario, client: Client = LOCAL) -> StreamRunner:
    """Start the scenario's stream on the lanes that run; a viewer cannot replace a stream that someone
    else started, nor fire one that names tenants or priorities (ValueError)."""
    global _current
    if scenario.presenter_only and not client.presenter:
        raise ValueError(PRESENTER_ONLY)
    with _lock:
        running = _current is not None and _current.is_alive() and not _current.halt.is_set()
        if running and not client.presenter and _current.client.key != client.key:
            raise ValueError("a request stream is already running; fire yours when it has been sent")
        if _current is not None:
            _current.stop()
        _current = StreamRunner(svc, scenario, client)
        _current.start()
        return _current


def start(svc, scenario: Scenario, client: Client = LOCAL) -> StreamRunner:
    """One click: run the scenario's lanes (the presenter's, unless they already run), then its stream."""
    if not scenario.runs_on(svc.lanes, svc.cfg):
        svc.access.require_presenter(client, "scenario")
        svc.set_lanes(scenario.lanes)
    return fire(svc, scenario, client)
