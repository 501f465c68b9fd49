"""A load generator for the live page: Poisson arrivals of bundled real prompts."""
from __future__ import annotations

import random
import threading

from ..request import SamplingParams
from ..serving.submitter import Submitter
from .prompts import load_prompts


class LoadGenerator(Submitter):
    """Submits chat prompts to the service at `rate` requests/s (exponential gaps) until stopped.

    Output lengths are uniform in [mean - spread, mean + spread] tokens with ignore_eos, so
    the length spread (what separates static from continuous batching) is under control."""

    def __init__(self, service, rate: float, mean_tokens: int, spread: int, seed: int = 0, tag: str = "loadgen"):
        super().__init__(service, "inflight-loadgen")
        self.tag = tag
        self.wake = threading.Event()  # new settings or stop: the wait for the next arrival ends early
        self.retune(rate, mean_tokens, spread)
        self.prompts = [p["prompt"] for p in load_prompts()]
        self.rng = random.Random(seed)

    def retune(self, rate: float, mean_tokens: int, spread: int) -> None:
        """New settings, from the next arrival on (the page's sliders, while it runs)."""
        self.rate = rate
        self.lengths = (max(1, mean_tokens - spread), mean_tokens + spread)  # uniform, both ends included
        self.wake.set()

    def stop(self) -> None:
        super().stop()
        self.wake.set()

    def run(self) -> None:
        while not self.halt.is_set():
            self.wake.clear()
            if not self.wake.wait(self.rng.expovariate(self.rate)):
                self.submit_one()
            # else woken: stopped, or a new rate (arrivals are memoryless: the next gap is drawn afresh)
        self.settle()

    def submit_one(self) -> None:
        messages = [{"role": "user", "content": self.rng.choice(self.prompts)}]
        self.submit(messages=messages, params=SamplingParams(max_tokens=self.rng.randint(*self.lengths),
                                                             ignore_eos=True), tag=self.tag)


_current: LoadGenerator | None = None  # one per process, like the service it feeds


def latest() -> LoadGenerator | None:
    """The generator started last, running or not (its counts stay readable)."""
    return _current


def running() -> LoadGenerator | None:
    """The generator sending now (one that was told to stop counts as stopped, even mid-submit)."""
    return _current if _current is not None and _current.is_alive() and not _current.halt.is_set() else None


def retune(rate: float, mean_tokens: int, spread: int) -> None:
    gen = running()
    if gen is not None:
        gen.retune(rate, mean_tokens, spread)


def start(service, rate: float, mean_tokens: int, spread: int) -> LoadGenerator:
    global _current
    stop()
    _current = LoadGenerator(service, rate, mean_tokens, spread)
    _current.start()
    return _current


def stop() -> None:
    if _current is not None:
        _current.stop()
